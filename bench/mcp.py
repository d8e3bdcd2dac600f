#!/usr/bin/env python3
"""MCP servers: a tool call through hermesd against the same call made directly with the SDK,
and the daemon's memory with 5 servers and 100 idle sessions.

**Call**: one stdio MCP test server (tests/support/mcp_server.py, ``echo``) behind hermesd,
called with ``tools.call mcp__e__echo`` on one ``hermesctl.client.Client`` connection (socket,
msgpack, the whole tool pipeline, the pool, the SDK's client session, the server), against the
same tool of a second copy of the same server called directly from this process with the SDK's
``ClientSession.call_tool`` over stdio. Rounds of sequential calls, interleaved A/B/B/A. Target:
hermesd's p50 at most 1.5 × the direct p50 + 1 ms.

**Memory**: a daemon with 5 stdio servers (``mcp.start: eager``), RSS of the daemon and of its
server processes, before and after 100 sessions are created and attached by 10 clients and each
has run one tool call of every server. One process per server, whatever the number of sessions.

    python bench/mcp.py            # the full run (about a minute)
    python bench/mcp.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import machine, median, now_utc, percentile

from hermesctl.client import Client
from tests.support.daemon import DaemonProcess, child_pids, start_daemon
from tests.support.mcp_helpers import SERVER, config, stdio

# this script is bench/mcp.py: with its folder on sys.path, `import mcp` would find it, not the SDK
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

TARGET_RATIO = 1.5
TARGET_EXTRA_MS = 1.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def server_pids(daemon: DaemonProcess) -> list[int]:
    """The test servers' processes: the daemon's descendants running mcp_server.py (under
    bubblewrap the server is a grandchild, below bwrap itself)."""
    found = []
    waiting = child_pids(daemon.proc.pid)
    while waiting:
        pid = waiting.pop()
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            program = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            continue
        if any(a.endswith(b"mcp_server.py") for a in argv) and program != "bwrap":
            found.append(pid)
        else:
            waiting.extend(child_pids(pid))
    return found


async def direct_calls(session: Any, n: int) -> list[float]:
    """The baseline: the SDK's own ``ClientSession.call_tool``, sequentially."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        result = await session.call_tool("echo", {"text": "x"})
        times.append(time.perf_counter() - t0)
        assert not result.is_error
    return times


def through_hermesd(client: Client, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        result = client.call("tools.call", {"name": "mcp__e__echo", "args": {"text": "x"}})
        times.append(time.perf_counter() - t0)
        assert '"x"' in result["result"], result
    return times


async def interleave(client: Client, rounds: int, per_round: int) -> dict[str, list[float]]:
    """Both paths in one task (the SDK's contexts are entered and left in the same task); the
    hermesd calls block this loop, which has nothing else to do meanwhile."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[SERVER, "echo"])
    samples: dict[str, list[float]] = {"hermesd": [], "direct": []}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        through_hermesd(client, 50)  # warm both
        await direct_calls(session, 50)
        for name in common.interleaved(rounds, ["hermesd", "direct"]):
            if name == "hermesd":
                samples[name] += through_hermesd(client, per_round)
            else:
                samples[name] += await direct_calls(session, per_round)
    return samples


def bench_call(rounds: int, per_round: int) -> tuple[str, bool]:
    daemon = start_daemon(config=config({"e": stdio("echo")}, mcp={"start": "eager"}))
    try:
        with daemon.client() as client:
            samples = asyncio.run(interleave(client, rounds, per_round))
    finally:
        daemon.stop()
    p50 = {k: median(v) * 1000 for k, v in samples.items()}
    p99 = {k: percentile(v, 99) * 1000 for k, v in samples.items()}
    limit = p50["direct"] * TARGET_RATIO + TARGET_EXTRA_MS
    met = p50["hermesd"] <= limit
    n = len(samples["hermesd"])
    body = (
        f"**Call**: `echo` of the stdio test server, {rounds} rounds of {per_round} sequential "
        f"calls per path, interleaved ({n} samples each).\n\n"
        "| path | p50 | p99 |\n|---|---|---|\n"
        f"| `tools.call mcp__e__echo` through hermesd | {p50['hermesd']:.2f} ms "
        f"| {p99['hermesd']:.2f} ms |\n"
        f"| `ClientSession.call_tool` direct (SDK) | {p50['direct']:.2f} ms "
        f"| {p99['direct']:.2f} ms |\n\n"
        f"Ratio hermesd / direct (p50): **{p50['hermesd'] / p50['direct']:.2f}×** "
        f"(+{p50['hermesd'] - p50['direct']:.2f} ms); target ≤ {TARGET_RATIO}× + "
        f"{TARGET_EXTRA_MS:g} ms = {limit:.2f} ms: **{'met' if met else 'NOT met'}**.\n"
    )
    return body, met


def bench_memory(sessions: int, clients: int) -> str:
    servers = {f"s{i}": stdio("echo") for i in range(5)}
    daemon = start_daemon(config=config(servers, mcp={"start": "eager"}))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = daemon.call("mcp.list")["servers"]
            if all(r["state"] == "ready" for r in rows):
                break
            time.sleep(0.1)
        before = (rss_mb(daemon.proc.pid), [rss_mb(p) for p in server_pids(daemon)])
        conns = [daemon.client() for _ in range(clients)]
        for i in range(sessions):
            c = conns[i % clients]
            sid = c.call("session.create")["id"]
            c.call("session.attach", {"session_id": sid})
            for s in servers:
                params: dict[str, Any] = {"name": f"mcp__{s}__echo", "args": {"text": "x"}}
                c.call("tools.call", {**params, "session_id": sid})
        time.sleep(0.5)
        after_pids = server_pids(daemon)
        after = (rss_mb(daemon.proc.pid), [rss_mb(p) for p in after_pids])
        for c in conns:
            c.close()
    finally:
        daemon.stop()
    return (
        f"**Memory**: 5 stdio servers (`mcp.start: eager`); then {sessions} sessions created and "
        f"attached by {clients} clients, each session calling one tool of every server "
        f"({sessions * 5} calls).\n\n"
        "| | daemon RSS | server processes | their RSS (sum) |\n|---|---|---|---|\n"
        f"| servers ready, no session | {before[0]:.1f} MB | {len(before[1])} "
        f"| {sum(before[1]):.1f} MB |\n"
        f"| {sessions} idle sessions | {after[0]:.1f} MB | {len(after_pids)} "
        f"| {sum(after[1]):.1f} MB |\n\n"
        f"One process per server whatever the number of sessions; the sessions add "
        f"{after[0] - before[0]:.1f} MB to the daemon.\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    started, machine_line = now_utc(), machine()
    rounds, per_round = (4, 50) if args.quick else (16, 250)
    call_body, met = bench_call(rounds, per_round)
    memory_body = bench_memory(20 if args.quick else 100, 10)
    common.publish(
        args,
        "mcp",
        "MCP servers: a tool call against the SDK's own client, memory with 100 sessions",
        call_body + "\n" + memory_body,
        started,
        machine_line,
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
