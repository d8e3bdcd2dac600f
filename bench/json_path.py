"""JSON on the model round's hot path: hermesd's own functions with ``hermesd.model.fastjson``
(orjson) and with the standard library's ``json`` in its place, side by side in one run.

(a) ``ModelClient._encode``: the request body of a round, for sessions of 4, 40 and 400
    messages (a tool call and its result every fourth message; the tools list is cached, as in
    the daemon).
(b) ``sse.read_chunks`` + ``StreamAccumulator``: an answer streamed in 10 and in 500 chunks
    of a few words each (OpenAI's chunk shape), fed from memory in reads of 4 KiB.

Each measurement alternates the two codecs (A B B A …) and reports the median time per call
and the ratio. CPU-bound and single-threaded, so the ratio is stable on a noisy machine.

    python bench/json_path.py [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import interleaved, machine, median, now_utc

from hermesd.model import client as llm
from hermesd.model import fastjson
from hermesd.model import stream as sse
from hermesd.model.client import ModelClient, ModelSettings


def _stdlib_dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


CODECS: dict[str, tuple[Callable[[Any], bytes], Callable[[Any], Any]]] = {
    "fastjson": (fastjson.dumps, fastjson.loads),
    "json": (_stdlib_dumps, json.loads),
}


def use(codec: str) -> None:
    """Put ``codec`` where hermesd's hot path looks for its JSON functions."""
    dumps, loads = CODECS[codec]
    llm.fastjson = sse.fastjson = type(sys)("codec")  # type: ignore[attr-defined]
    llm.fastjson.dumps, llm.fastjson.loads = dumps, loads  # type: ignore[attr-defined]


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "Does one thing well, with a description of some length.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Where."},
                    "limit": {"type": "integer", "minimum": 1},
                },
                "required": ["path"],
            },
        },
    }
    for i in range(12)
]


def conversation(messages: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are Hermes. " * 40}]
    for i in range(messages):
        kind = i % 4
        if kind == 0:
            out.append({"role": "user", "content": f"Question {i}: what is 15 * {i}? " * 3})
        elif kind == 1:
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {
                                "name": "calculate",
                                "arguments": json.dumps({"expression": f"15 * {i}"}),
                            },
                        }
                    ],
                }
            )
        elif kind == 2:
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": f"call_{i - 1}",
                    "content": json.dumps({"expression": f"15 * {i}", "result": 15 * i}),
                }
            )
        else:
            out.append({"role": "assistant", "content": f"The result is {15 * i}. " * 4})
    return out


def stream(chunks: int) -> list[bytes]:
    events = [
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1764400000,
            "model": "bench",
            "choices": [{"index": 0, "delta": {"content": f"word {i} "}, "finish_reason": None}],
        }
        for i in range(chunks)
    ]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    body += b"data: [DONE]\n\n"
    return [body[i : i + 4096] for i in range(0, len(body), 4096)]


class _Response:
    http_version = "HTTP/2"  # no body to drain after [DONE]
    request = None

    def __init__(self, reads: list[bytes]) -> None:
        self._reads = iter(reads)

    def aiter_bytes(self) -> _Response:  # an iterator, not a generator: nothing to finalise
        return self

    def __aiter__(self) -> _Response:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._reads)
        except StopIteration:
            raise StopAsyncIteration from None


def time_encode(client: ModelClient, payload: dict[str, Any], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        client._encode(payload)
    return (time.perf_counter() - started) / calls


LOOP = asyncio.new_event_loop()


def time_read(reads: list[bytes], calls: int) -> float:
    async def main() -> float:
        started = time.perf_counter()
        for _ in range(calls):
            acc = sse.StreamAccumulator(lambda event: None)
            await sse.read_chunks(_Response(reads), acc.add, acc.flush)
        return (time.perf_counter() - started) / calls

    return LOOP.run_until_complete(main())


def measure(rounds: int, run: Callable[[], float]) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {name: [] for name in CODECS}
    for name in CODECS:  # warm-up: first calls, caches
        use(name)
        run()
    for name in interleaved(rounds, list(CODECS)):
        use(name)
        found[name].append(run())
    use("fastjson")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    args = parser.parse_args()
    started, machine_line = now_utc(), machine()
    rounds = 2 if args.quick else 10
    client = ModelClient(ModelSettings(base_url="http://127.0.0.1:9/v1", model="bench"))
    rows = ["| what | fastjson (orjson) | json | json / fastjson |", "|---|---|---|---|"]
    for messages in (4, 40, 400):
        payload = {
            "model": "bench",
            "messages": conversation(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": TOOLS,
        }
        calls = max(20, 20_000 // messages) // (10 if args.quick else 1)
        found = measure(rounds, lambda p=payload, n=calls: time_encode(client, p, n))
        fast, slow = median(found["fastjson"]), median(found["json"])
        rows.append(
            f"| request body, {messages} messages (`ModelClient._encode`) | "
            f"{fast * 1e6:.1f} µs | {slow * 1e6:.1f} µs | {slow / fast:.1f}× |"
        )
    for chunks in (10, 500):
        reads = stream(chunks)
        calls = max(10, 20_000 // chunks) // (10 if args.quick else 1)
        found = measure(rounds, lambda r=reads, n=calls: time_read(r, n))
        fast, slow = median(found["fastjson"]), median(found["json"])
        rows.append(
            f"| an answer in {chunks} chunks (`read_chunks` + `StreamAccumulator`) | "
            f"{fast * 1e6:.1f} µs | {slow * 1e6:.1f} µs | {slow / fast:.1f}× |"
        )
    body = "\n".join(
        [
            (
                "hermesd's own hot-path functions with `hermesd.model.fastjson` (orjson, with "
                "the standard library behind it for what orjson refuses) and with `json` in its "
                f"place, alternated A B B A over {rounds} rounds, median per call. Encoding covers "
                "everything but the tools list (encoded once and cached, as in the daemon); "
                "reading covers splitting the event stream, decoding each chunk and folding it "
                "into the answer."
            ),
            "",
            *rows,
        ]
    )
    common.publish(args, "json", "JSON on the model round's hot path", body, started, machine_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
