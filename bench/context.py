"""Context engines: preparing a turn of a long session, and compaction beside a running turn.

(a) What a turn of a 10,000-message session does before its first model request, in this
    process on a real ``state.db``: ``store.messages.history()`` (the newest compaction's view
    and the messages after it), the rough token estimate of system prompt + view + tool schemas, and
    the built-in compressor's ``should_compress``. The session is 5,000 turns of ~300 characters
    per message, compacted once near its end as the built-in compressor leaves it (head, one
    summary, the last 40 messages); side by side, the same session never compacted (every stored
    message sent: ``compression.enabled: false``). Target: compacted ≤ 5 ms p50.
(b) A real hermesd with ``context.background`` on and a scripted model whose summary answers take
    300 ms. Session B runs one turn after another (``session.send`` with ``wait``) on its own
    connection while, on another, a session forked from a long one runs a turn that leaves it
    near its threshold, so it is compacted in the background. B's turn latency while a background
    compaction runs (between that turn's end and its ``context.compacted`` event) against B's
    turns while nothing else happens. Target: p99 delay ≤ 10 ms.

    python bench/context.py [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import machine, now_utc, percentile

from hermesd.context.compressor import (
    SUMMARY_PREFIX,
    SUMMARY_SYSTEM,
    BuiltinCompressor,
    CompressionSettings,
    estimate_tokens,
)
from hermesd.store.facade import SessionStore
from tests.support.daemon import start_daemon
from tests.support.modelserver import ScriptedModelServer, Step, model_config, reply

MESSAGES = 10_000
TAIL = 40
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "x" * 200,
            "parameters": {"type": "object", "properties": {"a": {"type": "string"}}},
        },
    }
    for i in range(20)
]
SYSTEM = {"role": "system", "content": "You are Hermes. " * 100}


def _fill(store: SessionStore) -> tuple[str, str]:
    """Two sessions of MESSAGES messages; the first compacted like the built-in leaves it."""
    ids = []
    for _ in range(2):
        sid = store.sessions.create()["id"]

        def add(sid: str = sid) -> None:
            for i in range(MESSAGES // 2):
                store.messages.append(sid, "user", f"question {i} " + "q" * 280)
                store.messages.append(sid, "assistant", f"answer {i} " + "a" * 290)

        asyncio.run(store.run(store.run_in_transaction, add))  # one transaction: seconds
        ids.append(sid)
    compacted = ids[0]
    head = store.messages.history(compacted)[:3]
    summary = {"role": "assistant", "content": SUMMARY_PREFIX + "\n\n" + "s" * 4000}
    store.compactions.record(compacted, [*head, summary], MESSAGES - TAIL, engine="compressor")
    return compacted, ids[1]


def prepare_turn(quick: bool) -> dict[str, Any]:
    rounds = 60 if quick else 300
    engine = BuiltinCompressor(CompressionSettings())
    engine.update_model("m", 128_000)
    with tempfile.TemporaryDirectory(prefix="hb-ctx-") as tmp:
        store = SessionStore(Path(tmp) / "state.db")
        try:
            compacted, whole = _fill(store)
            times: dict[str, list[float]] = {"compacted": [], "whole": []}
            sizes = {}
            for name in common.interleaved(rounds, ["compacted", "whole"]):
                sid = compacted if name == "compacted" else whole
                started = time.perf_counter()
                view = store.messages.history(sid)
                tokens = estimate_tokens([SYSTEM, *view], TOOLS)
                engine.should_compress(tokens)
                times[name].append((time.perf_counter() - started) * 1000)
                sizes[name] = (len(view), tokens)
        finally:
            store.close()
    return {"times": times, "sizes": sizes}


class Model:
    """Instant answers; summaries take SUMMARY_DELAY."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __call__(self, request: dict[str, Any]) -> Step:
        messages = request.get("messages") or []
        if messages and messages[0].get("content") == SUMMARY_SYSTEM:
            return reply("SUMMARY: what happened", delay=self.delay)
        asked = str(messages[-1].get("content", ""))
        if asked.startswith("grow"):
            return reply("g" * 2000)  # 500 tokens
        if asked == "big":
            return reply("b" * 4000)  # 1,000 tokens: past 90% of the threshold, not past it
        return reply("ok")


def beside_compaction(quick: bool) -> dict[str, Any]:
    rounds = 6 if quick else 30
    window = 8000
    with ScriptedModelServer(rules=Model(0.3), model_info={"max_model_len": window}) as server:
        config = (
            model_config(server.url)
            + "tools:\n  enabled_toolsets: [context_engine]\n"
            + "compression:\n  protect_last_n: 4\ncontext:\n  background: true\n"
        )
        daemon = start_daemon(config=config, timeout=60)
        try:
            a = daemon.client()
            b = daemon.client()
            seed = a.call("session.create", {})["id"]
            # the threshold is 85% of the window (6,800 tokens), background compaction starts at
            # 90% of that: 11 turns of ~500 tokens stay under it, one more answer of 1,000 not
            for i in range(11):
                a.call("session.send", {"session_id": seed, "message": f"grow {i}", "wait": True})
            busy = b.call("session.create", {})["id"]
            turns: list[tuple[float, float]] = []
            stop = threading.Event()

            def run_b() -> None:
                while not stop.is_set():
                    t0 = time.monotonic()
                    b.call("session.send", {"session_id": busy, "message": "hi", "wait": True})
                    turns.append((t0, time.monotonic()))

            windows: list[tuple[float, float]] = []
            quiet: list[tuple[float, float]] = []
            worker = threading.Thread(target=run_b)
            worker.start()
            try:
                for _ in range(rounds):
                    q0 = time.monotonic()
                    time.sleep(0.4)  # nothing else running
                    quiet.append((q0, time.monotonic()))
                    fork = a.call("session.fork", {"session_id": seed})["id"]
                    a.call("session.attach", {"session_id": fork})
                    a.call("session.send", {"session_id": fork, "message": "big", "wait": True})
                    w0 = time.monotonic()
                    deadline = w0 + 10
                    while time.monotonic() < deadline:
                        note = a.next_notification(timeout=1)
                        if note is not None and note.params[0].get("type") == "context.compacted":
                            break
                    else:
                        raise RuntimeError("no background compaction")
                    windows.append((w0, time.monotonic()))
            finally:
                stop.set()
                worker.join(30)
        finally:
            daemon.stop()

    def inside(turn: tuple[float, float], spans: list[tuple[float, float]]) -> bool:
        return any(s <= turn[0] and turn[1] <= e for s, e in spans)

    during = [(e - s) * 1000 for s, e in turns if inside((s, e), windows)]
    idle = [(e - s) * 1000 for s, e in turns if inside((s, e), quiet)]
    return {"during": during, "idle": idle, "compactions": len(windows)}


def _row(name: str, size: tuple[int, int], times: list[float]) -> str:
    p50, p90 = percentile(times, 50), percentile(times, 90)
    return f"| {name} | {size[0]} | {size[1]:,} | {p50:.2f} ms | {p90:.2f} ms |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    started, machine_line = now_utc(), machine()
    a = prepare_turn(args.quick)
    ta, sizes = a["times"], a["sizes"]
    c50, w50 = percentile(ta["compacted"], 50), percentile(ta["whole"], 50)
    b = beside_compaction(args.quick)
    d99, i99 = percentile(b["during"], 99), percentile(b["idle"], 99)
    d50, i50 = percentile(b["during"], 50), percentile(b["idle"], 50)
    delay = d99 - i99
    body = f"""\
**Preparing a turn of a 10,000-message session** (`history()` + token estimate +
`should_compress`, {len(ta["compacted"])} times each, interleaved):

| session | messages sent | tokens (rough) | p50 | p90 |
|---|---|---|---|---|
{_row(f"compacted (head, summary, last {TAIL})", sizes["compacted"], ta["compacted"])}
{_row("never compacted (every stored message)", sizes["whole"], ta["whole"])}

Compacted p50 {c50:.2f} ms: {common.fmt_ratio(c50 / 5.0, 1.0)} of the 5 ms budget; the
never-compacted session costs {w50 / c50:.1f}× as much (and would not fit a model's window).

**A turn of another session while a background compaction runs** ({b["compactions"]}
compactions, summary model answering in 300 ms; B's turns entirely inside a compaction vs
entirely inside a quiet period):

| B's turns | count | p50 | p99 |
|---|---|---|---|
| beside a background compaction | {len(b["during"])} | {d50:.2f} ms | {d99:.2f} ms |
| nothing else running | {len(b["idle"])} | {i50:.2f} ms | {i99:.2f} ms |

p99 delay {delay:.2f} ms (target ≤ 10 ms: {"met" if delay <= 10 else "missed"}); ratio
{common.fmt_ratio(d99 / i99)}.
"""
    common.publish(args, "context", "Context engines and compaction", body, started, machine_line)


if __name__ == "__main__":
    main()
