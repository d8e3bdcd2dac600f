"""Streamed text per second to 1 and to 10 attached clients.

One turn whose answer the scripted model streams as many small chunks (one 5-character word
each) at full speed (no latency) is watched by N clients attached to the session, each a
separate process reading its own connection (so the readers do not share one interpreter
lock). Each reader counts the characters of the turn's ``text.delta`` events, the events
themselves, and the time from the first to ``turn.finished``; the figure is the model's chunks
delivered per second per client and in total (characters / 5), for N = 1 and N = 10,
interleaved (1/10/10/1…). hermesd sends the chunks that arrive in one read from the model as
one event, so at full speed there are far fewer events than chunks. The model server runs in
its own process too. The ratio 10-client total / 1-client total says how well hermesd's
fan-out (one encoding, one write per connection) scales.

    python bench/stream.py [--quick] [--no-write] [--chunks N] [--rounds N]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import (
    REPO,
    SOURCE,
    clean_env,
    cpu_seconds,
    interleaved,
    machine,
    median,
    stop_process,
)

from hermesctl.client import Client
from tests.support.daemon import DaemonProcess, start_daemon

SERVER = """
import sys
from tests.support.modelserver import ScriptedModelServer, reply
chunks = int(sys.argv[1])
text = "word " * chunks  # chunk_chars=5: one chunk per word
server = ScriptedModelServer(rules=lambda request: reply(text, chunk_chars=5))
print(server.url, flush=True)
server._httpd.serve_forever(poll_interval=0.2)
"""

READER = """
import json, sys, time
from hermesctl.client import Client
sock, sid = sys.argv[1], sys.argv[2]
with Client.connect(sock, timeout=120) as c:
    c.call("session.attach", {"session_id": sid})
    print("ready", flush=True)
    first = None
    count = chars = 0
    while True:
        note = c.next_notification(timeout=120)
        if note is None:
            raise SystemExit("no turn.finished")
        ev = note.params[0]
        if ev.get("type") == "text.delta":
            count += 1
            chars += len(ev["text"])
            if first is None:
                first = time.monotonic()
        elif ev.get("type") == "turn.finished":
            end = time.monotonic()
            break
print(json.dumps({"events": count, "chars": chars, "first": first, "end": end}), flush=True)
"""


def start_server(chunks: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(chunks)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env=clean_env({"PYTHONPATH": str(REPO)}),
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


CHUNK_CHARS = 5  # "word " per chunk


def one_turn(d: DaemonProcess, c: Client, readers: int, expected_chars: int) -> dict[str, Any]:
    """One streamed turn watched by ``readers`` attached reader processes."""
    sid = c.call("session.create")["id"]
    env = clean_env({"PYTHONPATH": str(SOURCE)})
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", READER, str(d.socket), sid],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(readers)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a reader did not attach")
        cpu0 = cpu_seconds(d.proc.pid)
        c.call("session.send", {"session_id": sid, "message": "stream", "wait": True}, timeout=300)
        results = []
        for proc in procs:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"reader exited {proc.returncode}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        cpu = cpu_seconds(d.proc.pid) - cpu0
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop_process(proc)
    chunks = [r["chars"] / CHUNK_CHARS for r in results]  # the model's chunks, delivered
    rates = [n / (r["end"] - r["first"]) for n, r in zip(chunks, results, strict=True)]
    span = max(r["end"] for r in results) - min(r["first"] for r in results)
    return {
        "chunks": chunks[0],
        "events": median([r["events"] for r in results]),
        "per_client": median(rates),
        "total": sum(chunks) / span,
        "cpu": cpu,
        "complete": all(r["chars"] == expected_chars for r in results),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter turns")
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    parser.add_argument("--chunks", type=int, default=None, help="model chunks per turn (5000)")
    parser.add_argument("--rounds", type=int, default=None, help="turns per N (3)")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
    machine_line = machine()
    chunks = args.chunks or (1000 if args.quick else 5000)
    rounds = args.rounds or (1 if args.quick else 3)
    server, url = start_server(chunks)
    runs: dict[int, list[dict[str, Any]]] = {1: [], 10: []}
    try:
        d = start_daemon(
            config=f"model:\n  provider: custom\n  base_url: {url}\n  default: scripted-model\n",
            env={"PYTHONPATH": str(SOURCE)},
        )
        try:
            with Client.connect(d.socket, hello=True, timeout=300) as c:
                one_turn(d, c, 1, chunks * CHUNK_CHARS)  # warm-up: lazy imports, page cache
                for name in interleaved(rounds, ["1", "10"]):
                    runs[int(name)].append(one_turn(d, c, int(name), chunks * CHUNK_CHARS))
        finally:
            d.stop()
    finally:
        stop_process(server)

    rows = []
    for n, items in runs.items():
        rows.append(
            f"| {n} | {chunks} | {median([r['events'] for r in items]):,.0f} | "
            f"{median([r['per_client'] for r in items]):,.0f} | "
            f"{median([r['total'] for r in items]):,.0f} | "
            f"{median([r['cpu'] for r in items]) * 1e6 / (chunks * n):.1f} µs"
            f" | {'yes' if all(r['complete'] for r in items) else 'NO'} |"
        )
    one = median([r["total"] for r in runs[1]])
    ten = median([r["total"] for r in runs[10]])
    body = "\n".join(
        [
            (
                f"One turn streaming {chunks} text chunks (a 5-character word each) at full speed "
                "from "
                "the scripted model server (own process), watched by N attached clients (one "
                "process "
                f"and connection each); median of {rounds} turns per N, interleaved, after one "
                "warm-up "
                "turn. Chunks per second are the model's chunks delivered (characters received / "
                "5), "
                "from a reader's first `text.delta` to its `turn.finished`; daemon CPU is for the "
                "whole turn, per chunk delivered to one client. hermesd sends the chunks of one "
                "read "
                "from the model as one `text.delta`, so at full speed a turn takes far fewer "
                "events "
                "than chunks (a model streaming at its own pace gets one event per chunk)."
            ),
            "",
            (
                "| attached clients | model chunks per turn | `text.delta` events per turn | "
                "chunks/s per client | chunks/s all clients | daemon CPU per delivered chunk | "
                "every client got all the text |"
            ),
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            (
                f"10 clients receive **{ten / one:.1f}×** the text per second of one client in "
                "total "
                f"({ten / 10 / one:.2f}× per client): each event is redacted and encoded once, and "
                "the "
                "events of a loop iteration go to each connection in one write. The readers are 10 "
                "Python processes on the same 2 CPUs: part of the per-client drop is theirs."
            ),
        ]
    )
    common.publish(args, "stream", "Streamed text to attached clients", body, started, machine_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
