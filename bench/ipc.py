#!/usr/bin/env python3
"""IPC cost of hermesd: ``ping`` against a bare asyncio msgpack echo server, side by side.

Both servers run at once, each in its own process on its own Unix socket, and are driven by the
same synchronous client code (``hermesctl.client.Client``), so the client's cost is identical and
the ratio is the price of hermesd's RPC layer (decoding limits, message classification, method
lookup, parameter validation, peer checks). Three measurements, rounds alternating A/B/B/A:

- latency: sequential pings on one connection, with the processes pinned to CPUs (same vCPU,
  then different vCPUs); p50/p99 over all samples and the ratio of p50s;
- throughput: 50 client processes at once, sequential or 16 requests in flight each; requests/s
  (median of rounds) and the server's CPU time per request;
- server Python per ping with no I/O: request bytes fed straight to each server's protocol
  object in this process, writes discarded.

    python bench/ipc.py            # the full run (about 1 minute)
    python bench/ipc.py --quick    # a smoke run (a few seconds)
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
from common import median, percentile

from hermesctl.client import Client

LATENCY_TARGET = 1.5


def start_echo(directory: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """The baseline server, same interpreter as hermesd, in its own process."""
    path = directory / "echo.sock"
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("echo_server.py")), str(path)],
        env=common.clean_env(),
        stdin=subprocess.DEVNULL,
    )
    common.wait_for_ping(path, proc)
    return proc, path


# --- latency -----------------------------------------------------------------------------------


def latency(targets: dict[str, Path], rounds: int, per_round: int) -> dict[str, Any]:
    """Sequential pings on one connection per server; returns samples (seconds) per server."""
    clients = {name: Client.connect(path, timeout=10) for name, path in targets.items()}
    samples: dict[str, list[float]] = {name: [] for name in targets}
    round_p50: dict[str, list[float]] = {name: [] for name in targets}
    clock = time.perf_counter
    try:
        for client in clients.values():
            for _ in range(500):  # warm both ends: sockets, allocator, code paths
                client.call("ping")
        for name in common.interleaved(rounds, list(targets)):
            call = clients[name].call
            taken = []
            for _ in range(per_round):
                t0 = clock()
                call("ping")
                taken.append(clock() - t0)
            samples[name] += taken
            round_p50[name].append(median(taken))
    finally:
        for client in clients.values():
            client.close()
    return {"samples": samples, "round_p50": round_p50}


# --- throughput --------------------------------------------------------------------------------


def _client_process(path: str, requests: int, depth: int, barrier: Any, results: Any) -> None:
    try:
        client = Client.connect(path, timeout=60)
        client.call("ping")
    except Exception as exc:
        barrier.abort()
        results.put(("error", repr(exc)))
        return
    barrier.wait(timeout=60)
    clock = time.perf_counter  # CLOCK_MONOTONIC: comparable across processes
    t0 = clock()
    if depth <= 1:
        for _ in range(requests):
            client.call("ping")
    else:
        window = [client.send("ping") for _ in range(min(depth, requests))]
        sent = len(window)
        while window:
            client.wait(window.pop(0))
            if sent < requests:
                window.append(client.send("ping"))
                sent += 1
    results.put((t0, clock()))
    client.close()


def throughput_round(
    path: Path, server_pid: int, clients: int, requests: int, depth: int
) -> tuple[float, float]:
    """Requests/s of ``clients`` processes pinging at once, and server CPU µs per request."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(clients + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_client_process, args=(str(path), requests, depth, barrier, results), daemon=True
        )
        for _ in range(clients)
    ]
    for proc in procs:
        proc.start()
    try:
        barrier.wait(timeout=120)  # every client connected and warmed up
        cpu0 = common.live_threads_cpu_seconds(server_pid)
        spans = []
        for _ in range(clients):
            item = results.get(timeout=300)
            if item[0] == "error":
                raise RuntimeError(f"a client failed: {item[1]}")
            spans.append(item)
        cpu1 = common.live_threads_cpu_seconds(server_pid)
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    wall = max(end for _, end in spans) - min(start for start, _ in spans)
    total = clients * requests
    return total / wall, (cpu1 - cpu0) / total * 1e6


def throughput(
    targets: dict[str, tuple[Path, int]], rounds: int, clients: int, requests: int, depth: int
) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {n: {"rps": [], "cpu_us": []} for n in targets}
    for name in common.interleaved(rounds, list(targets)):
        path, pid = targets[name]
        rps, cpu_us = throughput_round(path, pid, clients, requests, depth)
        out[name]["rps"].append(rps)
        out[name]["cpu_us"].append(cpu_us)
        print(f"  {name:8} {rps:9.0f} req/s  server CPU {cpu_us:5.1f} µs/request", flush=True)
    return out


# --- in process --------------------------------------------------------------------------------


class _NullTransport(asyncio.Transport):
    """Swallows what a server writes: no syscalls, so only the server's own Python is timed."""

    def write(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def in_process(rounds: int, per_round: int) -> dict[str, dict[str, list[float]]]:
    """Seconds per ping spent in each server's protocol object, bytes fed in directly."""
    import tempfile

    import echo_server

    from hermesd.daemon import config
    from hermesd.daemon.main import Daemon
    from hermesd.rpc import wire
    from hermesd.rpc.connection import Connection, Limits

    async def measure() -> dict[str, dict[str, list[float]]]:
        with tempfile.TemporaryDirectory(prefix="hbi-") as home:
            daemon = Daemon(Path(home), config.load(Path(home)), Path(home) / "unused.sock")
        protocols: dict[str, asyncio.Protocol] = {
            "hermesd": Connection(daemon.router, Limits(), lambda conn, transport: None),
            "echo": echo_server.Echo(),
        }
        for proto in protocols.values():
            proto.connection_made(_NullTransport())
        requests = [wire.pack_request(i + 1, "ping", []) for i in range(per_round)]
        out: dict[str, dict[str, list[float]]] = {}
        for batch in (1, 16):
            chunks = [b"".join(requests[i : i + batch]) for i in range(0, per_round, batch)]
            times: dict[str, list[float]] = {name: [] for name in protocols}
            for name in common.interleaved(rounds + 2, list(protocols))[4:]:  # 2 warm-ups
                feed = protocols[name].data_received
                t0 = time.perf_counter()
                for chunk in chunks:
                    feed(chunk)
                times[name].append((time.perf_counter() - t0) / per_round)
            out["one request per read" if batch == 1 else f"{batch} requests per read"] = times
        return out

    return asyncio.run(measure())


# --- report ------------------------------------------------------------------------------------


def placements() -> dict[str, tuple[set[int], set[int]]]:
    """CPU placements for the latency runs: (client CPUs, server CPUs).

    Unpinned, a round trip is bimodal on a VM (about 2× apart): waking a process on an idle
    other vCPU costs far more than a switch on the same one, and the scheduler picks either
    way from run to run. Pinning makes each placement repeatable; the same-CPU one measures
    software cost alone, the cross-CPU one what an idle machine adds to every request.
    """
    cpus = sorted(os.sched_getaffinity(0))
    out = {"same CPU": ({cpus[-1]}, {cpus[-1]})}
    if len(cpus) > 1:
        out["client and servers on different CPUs"] = ({cpus[0]}, {cpus[-1]})
    return out


def _verdict(res: dict[str, Any]) -> str:
    ratio = median(res["samples"]["hermesd"]) / median(res["samples"]["echo"])
    return f"{ratio:.3f}× {'met' if ratio <= LATENCY_TARGET else '**missed**'}"


def report(
    lat: dict[str, dict[str, Any]],
    thr: dict[str, dict[str, dict[str, list[float]]]],
    inproc: dict[str, dict[str, list[float]]],
    args: argparse.Namespace,
) -> str:
    us = 1e6
    first = next(iter(lat.values()))
    n = len(first["samples"]["hermesd"])
    lines = [
        (
            f"**Latency**: one connection per server, sequential `ping`s, {args.rounds} rounds of "
            f"{args.pings} per server, interleaved ({n} samples per server and placement). "
            "Processes are pinned to CPUs (see `placements()` in the script for why)."
        ),
        "",
        (
            "| placement | hermesd p50 | hermesd p99 | baseline p50 | baseline p99 | p50 ratio "
            "| per-round ratios | hermesd extra |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for placement, res in lat.items():
        s_h, s_e = res["samples"]["hermesd"], res["samples"]["echo"]
        p50_h, p50_e = median(s_h), median(s_e)
        pairs = zip(res["round_p50"]["hermesd"], res["round_p50"]["echo"], strict=True)
        rounds = [h / e for h, e in pairs]
        lines.append(
            f"| {placement} | {p50_h * us:.1f} µs | {percentile(s_h, 99) * us:.1f} µs "
            f"| {p50_e * us:.1f} µs | {percentile(s_e, 99) * us:.1f} µs "
            f"| **{p50_h / p50_e:.2f}×** | {min(rounds):.2f}–{max(rounds):.2f}× "
            f"| {(p50_h - p50_e) * us:+.1f} µs |"
        )
    lines += [
        "",
        f"Target p50 ratio ≤ {LATENCY_TARGET:g}× — "
        + "; ".join(f"{placement}: {_verdict(r)}" for placement, r in lat.items())
        + ".",
        "",
        (
            f"**Throughput**: {args.clients} client processes at once (unpinned), {args.requests} "
            f"`ping`s each ({args.clients * args.requests} per round), {args.tp_rounds} rounds per "
            "server and mode, interleaved; median of rounds. Server CPU is the time the server "
            "process spent on a CPU per request (schedstat), which the machine's noise disturbs "
            "far less than wall time."
        ),
        "",
        (
            "| mode | hermesd | baseline | ratio | hermesd CPU/request | baseline CPU/request "
            "| CPU ratio |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for mode, res in thr.items():
        rh, re_ = median(res["hermesd"]["rps"]), median(res["echo"]["rps"])
        ch, ce = median(res["hermesd"]["cpu_us"]), median(res["echo"]["cpu_us"])
        cpu_ratio = f"{ch / ce:.2f}×" if ce > 0 else "n/a"
        lines.append(
            f"| {mode} | {rh:,.0f} req/s | {re_:,.0f} req/s | {rh / re_:.2f}× | "
            f"{ch:.1f} µs | {ce:.1f} µs | {cpu_ratio} |"
        )
    lines += [
        "",
        (
            f"**Server Python per ping, no I/O**: request bytes fed straight to each server's "
            f"protocol object (`rpc.Connection` with the real `ping` handler, the echo's "
            f"`asyncio.Protocol`), writes discarded; {args.rounds} rounds of {args.pings}, "
            "interleaved; the best round, since for code that does no I/O the machine's noise "
            "(the other vCPU busy, preemption) only ever adds time. This is the part of the round "
            "trip that is hermesd's own code."
        ),
        "",
        "| feeding | hermesd | baseline | ratio | hermesd extra |",
        "|---|---|---|---|---|",
    ]
    for feeding, res in inproc.items():
        h, e = min(res["hermesd"]), min(res["echo"])
        lines.append(
            f"| {feeding} | {h * us:.2f} µs | {e * us:.2f} µs | {h / e:.2f}× "
            f"| {(h - e) * us:+.2f} µs |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.pings, args.tp_rounds, args.clients, args.requests = 6, 300, 1, 10, 500
    else:
        args.rounds, args.pings, args.tp_rounds, args.clients, args.requests = 30, 1000, 3, 50, 2000
    started, machine_line = common.now_utc(), common.machine()
    print(f"in process: {args.rounds} rounds × {args.pings} pings per server", flush=True)
    inproc = in_process(args.rounds, args.pings)  # first: a small, fresh heap for both
    scratch = common.scratch_dir("hbe-")
    with common.Daemon() as daemon:
        echo, echo_path = start_echo(scratch)
        try:
            lat = {}
            every_cpu = os.sched_getaffinity(0)
            for placement, (client_cpus, server_cpus) in placements().items():
                print(
                    f"latency ({placement}): {args.rounds} rounds × {args.pings} pings per server",
                    flush=True,
                )
                for pid in (0, daemon.pid, echo.pid):
                    common.pin(pid, client_cpus if pid == 0 else server_cpus)
                try:
                    lat[placement] = latency(
                        {"hermesd": daemon.socket, "echo": echo_path}, args.rounds, args.pings
                    )
                finally:
                    for pid in (0, daemon.pid, echo.pid):
                        common.pin(pid, every_cpu)
            targets = {"hermesd": (daemon.socket, daemon.pid), "echo": (echo_path, echo.pid)}
            thr = {}
            for mode, depth in (("sequential", 1), ("pipelined, 16 in flight", 16)):
                print(
                    f"throughput ({mode}): {args.clients} clients × {args.requests} pings",
                    flush=True,
                )
                thr[mode] = throughput(targets, args.tp_rounds, args.clients, args.requests, depth)
        finally:
            common.stop_process(echo)
            shutil.rmtree(scratch, ignore_errors=True)
    body = report(lat, thr, inproc, args)
    common.publish(args, "ipc", "IPC: ping latency and throughput", body, started, machine_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
