"""Daemon memory: RSS with 1,000 idle sessions attached by 100 clients, and over 10,000 turns.

(a) A real hermesd; 100 client connections each create (and so attach to) 10 sessions; the
    daemon's RSS (``VmRSS``, with any child processes it has) before, with all of them
    attached, and after the clients close.
    Target ≤ 100 MB with the 1,000 sessions attached.
(b) 10,000 chat turns against the scripted model server at zero latency, 8 sessions at a time
    on one connection (``session.send`` with ``wait``), each session used for 10 turns and then
    deleted, so sessions come and go as in real use; every fourth turn is a maths question that
    makes the model call the ``calculate`` tool (two model rounds). RSS sampled every 250 turns;
    the leak check is a least-squares line through the second half of the samples: its slope
    (KB per 1,000 turns) and the growth it predicts over that half. Target: no growth (the line
    rises less than 2 MB over the second half).

    python bench/memory.py [--quick] [--no-write] [--turns N] [--trace]

``--quick``: 10 clients × 10 sessions and 1,000 turns. ``--trace`` runs the daemon with
``tracemalloc`` on (much slower, so RSS figures are not comparable) and prints the 15 source
lines whose allocations grew most between the middle and the end of the turns.
"""

from __future__ import annotations

import argparse
import pickle
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import SOURCE, machine, now_utc

from hermesctl.client import Client
from tests.support.daemon import DaemonProcess, child_pids, start_daemon
from tests.support.modelserver import ScriptedModelServer, calculator_rules

SAMPLE_EVERY = 250
PARALLEL = 8
TURNS_PER_SESSION = 10
LEAK_LIMIT_MB = 2.0


def rss_mb(pid: int) -> float:
    """RSS of hermesd: the daemon plus any child processes (a plugin's lint run, say)."""
    return sum(_own_rss_mb(proc) for proc in (pid, *child_pids(pid)))


def _own_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


# Runs ``python -m hermesd …`` (the rest of argv) with tracemalloc on; SIGUSR1 writes a
# snapshot to $HERMES_BENCH_TRACE/<n>.pickle.
LAUNCHER = """
import os, pickle, runpy, signal, sys, tracemalloc
tracemalloc.start(8)
count = [0]
def dump(signum, frame):
    count[0] += 1
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)])
    path = os.path.join(os.environ["HERMES_BENCH_TRACE"], f"{count[0]}.pickle")
    with open(path + ".tmp", "wb") as fh:
        pickle.dump(snap, fh)
    os.replace(path + ".tmp", path)
signal.signal(signal.SIGUSR1, dump)
sys.argv = ["hermesd", *sys.argv[4:]]
runpy.run_module("hermesd", run_name="__main__", alter_sys=True)
"""


def start(url: str, trace_dir: str | None = None) -> DaemonProcess:
    config = (
        f"model:\n  provider: custom\n  base_url: {url}\n  default: scripted-model\n"
        "plugins:\n  enabled: [calculator]\n"
    )
    env = {"PYTHONPATH": str(SOURCE)}
    if trace_dir is None:
        return start_daemon(config=config, env=env)
    env["HERMES_BENCH_TRACE"] = trace_dir
    return start_daemon(
        config=config, env=env, argv_prefix=[sys.executable, "-c", LAUNCHER], timeout=60
    )


def snapshot(daemon: DaemonProcess, trace_dir: str, n: int) -> Any:
    """Ask the traced daemon for its ``n``-th snapshot and load it."""
    path = Path(trace_dir) / f"{n}.pickle"
    daemon.proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 120
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("no tracemalloc snapshot from the daemon")
        time.sleep(0.1)
    with open(path, "rb") as fh:
        return pickle.load(fh)


def idle_sessions(daemon: DaemonProcess, clients: int, per_client: int) -> dict[str, float]:
    time.sleep(2.0)  # the model SDK is imported in the background after READY=1
    out = {"started": rss_mb(daemon.proc.pid)}
    conns: list[Client] = []
    try:
        for _ in range(clients):
            client = daemon.client()
            conns.append(client)
            for _ in range(per_client):
                client.call("session.create", {"title": "idle"})
        time.sleep(0.5)
        out["attached"] = rss_mb(daemon.proc.pid)
    finally:
        for client in conns:
            client.close()
    time.sleep(1.0)
    out["closed"] = rss_mb(daemon.proc.pid)
    return out


def turns(daemon: DaemonProcess, total: int, trace_dir: str | None = None) -> dict[str, Any]:
    samples: list[tuple[int, float]] = [(0, rss_mb(daemon.proc.pid))]
    snaps: list[Any] = []
    done = 0
    failed = 0
    started = time.perf_counter()
    with daemon.client() as client:
        slots: list[tuple[str, int]] = []  # (session id, turns done in it)
        for _ in range(PARALLEL):
            slots.append((client.call("session.create", {"title": "turns"})["id"], 0))
        while done < total:
            batch = min(PARALLEL, total - done)
            ids = []
            for i in range(batch):
                n = done + i
                message = "What is 15 * 23?" if n % 4 == 0 else f"hello number {n}"
                ids.append(
                    client.send(
                        "session.send",
                        {"session_id": slots[i][0], "message": message, "wait": True},
                    )
                )
            for msgid in ids:
                if client.wait(msgid, timeout=60).get("status") != "completed":
                    failed += 1
            for _ in client.notifications(timeout=0):  # the turns' events: not measured here
                pass
            for i in range(batch):
                sid, used = slots[i]
                if used + 1 >= TURNS_PER_SESSION:
                    client.call("session.delete", {"session_id": sid})
                    slots[i] = (client.call("session.create", {"title": "turns"})["id"], 0)
                else:
                    slots[i] = (sid, used + 1)
            before = done
            done += batch
            if done // SAMPLE_EVERY != before // SAMPLE_EVERY or done == total:
                samples.append((done, rss_mb(daemon.proc.pid)))
            if trace_dir is not None and (before < total // 2 <= done or done == total):
                snaps.append(snapshot(daemon, trace_dir, len(snaps) + 1))
    wall = time.perf_counter() - started
    half = [(float(n), mb) for n, mb in samples if n >= total / 2]
    per_turn = slope(half)
    grown = []
    if len(snaps) == 2:
        grown = [str(d) for d in snaps[1].compare_to(snaps[0], "lineno")[:15]]
    return {
        "samples": samples,
        "failed": failed,
        "wall": wall,
        "slope_kb": per_turn * 1000 * 1024,
        "growth_mb": per_turn * (total / 2),
        "grown": grown,
    }


def report(args: argparse.Namespace, idle: dict[str, float], run: dict[str, Any]) -> str:
    n_sessions = args.clients * args.per_client
    ok = idle["attached"] <= 100
    lines = [
        f"**(a) Idle sessions**: {args.clients} client connections each create (and stay "
        f"attached to) {args.per_client} sessions, {n_sessions:,} in all.",
        "",
        "| daemon | RSS |",
        "|---|---|",
        f"| 2 s after READY=1 (model SDK imported), no clients | {idle['started']:.1f} MB |",
        f"| {args.clients} clients, {n_sessions:,} sessions attached | {idle['attached']:.1f} MB |",
        f"| after the clients closed | {idle['closed']:.1f} MB |",
        "",
        f"With {n_sessions:,} sessions attached: **{idle['attached']:.1f} MB** (target ≤ "
        f"100 MB: {'met' if ok else 'MISSED'}), "
        f"{(idle['attached'] - idle['started']) * 1024 / n_sessions:.1f} KB per attached "
        f"session and its share of a connection.",
        "",
    ]
    samples = run["samples"]
    total = samples[-1][0]
    grows = run["growth_mb"] >= LEAK_LIMIT_MB
    second_half = len([s for s in samples if s[0] >= total / 2])
    lines += [
        f"**(b) {total:,} turns** (scripted model at zero latency, {PARALLEL} sessions at "
        f"a time, {TURNS_PER_SESSION} turns per session then deleted, every fourth turn "
        f"a `calculate` tool call): {run['wall']:.0f} s, "
        f"{run['wall'] * 1000 / total:.1f} ms per turn, {run['failed']} failed.",
        "",
        "| turns | "
        + " | ".join(f"{n:,}" for n, _ in samples[:: max(1, len(samples) // 10)])
        + " |",
        "|---|" + "---|" * len(samples[:: max(1, len(samples) // 10)]),
        "| RSS (MB) | "
        + " | ".join(f"{mb:.1f}" for _, mb in samples[:: max(1, len(samples) // 10)])
        + " |",
        "",
        f"RSS {samples[0][1]:.1f} MB before the first turn, {samples[-1][1]:.1f} MB after "
        f"the last. Leak check (least-squares line through the {second_half} "
        f"samples of the second half): {run['slope_kb']:+.0f} KB per 1,000 turns, "
        f"**{run['growth_mb']:+.2f} MB over the second half** (target: below "
        f"{LEAK_LIMIT_MB:g} MB: {'MISSED' if grows else 'met'}).",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--turns", type=int)
    parser.add_argument("--trace", action="store_true", help="tracemalloc diff (slow)")
    args = parser.parse_args()
    args.clients, args.per_client = (10, 10) if args.quick else (100, 10)
    total = args.turns or (1_000 if args.quick else 10_000)
    started, machine_line = now_utc(), machine()
    with ScriptedModelServer(rules=calculator_rules) as model:
        trace_dir = tempfile.mkdtemp(prefix="hbm-") if args.trace else None
        daemon = start(model.url, trace_dir)
        try:
            idle = idle_sessions(daemon, args.clients, args.per_client)
            run = turns(daemon, total, trace_dir)
        finally:
            daemon.stop()
    body = report(args, idle, run)
    if run["grown"]:
        body += (
            "\n\n**tracemalloc** (daemon traced, so the RSS above is inflated): source "
            "lines whose allocations grew most from the middle to the end of the turns:"
            "\n\n```\n" + "\n".join(run["grown"]) + "\n```"
        )
    common.publish(
        args, "memory", "Memory: idle sessions and 10,000 turns", body, started, machine_line
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
