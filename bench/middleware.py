#!/usr/bin/env python3
"""Cost of plugin middleware when none is registered, against a ``tools.call``.

With no middleware registered, each tool call asks the middleware bus twice whether a
``tool_request`` or ``tool_execution`` callback exists, and each model request twice more
(``llm_request``, ``llm_execution``); nothing else runs. **Gate**: those two look-ups, timed
in-process on the daemon's own `MiddlewareBus` (a million times, best of several runs).
**tools.call**: sequential ``tools.call`` of the bundled calculator on one connection to a real
hermesd (the whole pipeline and the socket). **One pass-through**: the same call with one
``tool_execution`` middleware that only calls ``next_call`` (a plugin in ``$HERMES_HOME``),
the price a guard adds, for scale. The two daemons are measured in interleaved rounds.

    python bench/middleware.py            # the full run (about half a minute)
    python bench/middleware.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import textwrap
import time
import timeit
from pathlib import Path

import common
from common import Client, median, percentile

PASS_THROUGH = """\
def tool_execution(*, args, next_call, **context):
    return next_call(args)

def register(ctx):
    ctx.register_middleware("tool_execution", tool_execution)
"""
MANIFEST = "name: passthrough\nversion: '1.0'\n"
CALL = ("tools.call", {"name": "calculate", "args": {"expression": "sqrt(2*pi) * 2**16"}})


def gate_seconds(runs: int, number: int) -> float:
    """Seconds per tool call spent asking whether middleware exists (none registered)."""
    from hermesd.runtime.middleware import MiddlewareBus

    bus = MiddlewareBus()
    stmt = "bus.has('tool_request') or bus.has('tool_execution')"
    best = min(timeit.repeat(stmt, globals={"bus": bus}, number=number, repeat=runs))
    return best / number


class Started:
    """A hermesd over ``home`` (bundled plugins: the calculator)."""

    def __init__(self, home: Path) -> None:
        self.dir = common.scratch_dir("hbm-")
        self.socket = self.dir / "hermesd.sock"
        argv = [sys.executable, "-m", "hermesd", "--socket", str(self.socket)]
        if os.geteuid() == 0:
            argv.append("--allow-root")
        env = common.clean_env({"HERMES_HOME": str(home), "PYTHONPATH": str(common.SOURCE)})
        self.log = open(self.dir / "hermesd.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT
        )
        common.wait_for_ping(self.socket, self.proc)

    def stop(self) -> None:
        common.stop_process(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def round_trips(rounds: int, per_round: int) -> dict[str, list[float]]:
    """Seconds per ``tools.call calculate`` without middleware and with one pass-through."""
    plain_home = common.scratch_dir("hbm-")
    wrapped_home = common.scratch_dir("hbm-")
    plugin = wrapped_home / "plugins" / "passthrough"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text(MANIFEST)
    (plugin / "__init__.py").write_text(PASS_THROUGH)
    daemons = {"no middleware": Started(plain_home), "one pass-through": Started(wrapped_home)}
    samples: dict[str, list[float]] = {name: [] for name in daemons}
    clock = time.perf_counter
    clients: dict[str, Client] = {}
    try:
        for name, daemon in daemons.items():
            clients[name] = Client.connect(daemon.socket, timeout=30)
            result = clients[name].call(*CALL)["result"]
            if '"result"' not in result:
                raise RuntimeError(f"calculate failed on {name}: {result}")
            for _ in range(200):
                clients[name].call(*CALL)
        for name in common.interleaved(rounds, list(daemons)):
            client = clients[name]
            for _ in range(per_round):
                t0 = clock()
                client.call(*CALL)
                samples[name].append(clock() - t0)
    finally:
        for client in clients.values():
            client.close()
        for daemon in daemons.values():
            daemon.stop()
        shutil.rmtree(plain_home, ignore_errors=True)
        shutil.rmtree(wrapped_home, ignore_errors=True)
    return samples


def report(gate: float, rtt: dict[str, list[float]], args: argparse.Namespace) -> str:
    plain = median(rtt["no middleware"])
    wrapped = median(rtt["one pass-through"])
    share = gate / plain * 100
    verdict = "meets" if share <= 1.0 else "misses"
    lines = [
        f"{args.rounds} interleaved rounds × {args.calls} sequential `tools.call calculate` per "
        "daemon on one connection; the gate timed in-process (best of "
        f"{args.gate_runs} × {args.gate_number:,}).",
        "",
        "| what | median | p99 |",
        "|---|---|---|",
        f"| middleware gate per tool call, none registered | {gate * 1e9:.0f} ns | — |",
        f"| `tools.call calculate`, no middleware | {plain * 1e6:.0f} µs | "
        f"{percentile(rtt['no middleware'], 99) * 1e6:.0f} µs |",
        f"| `tools.call calculate`, one pass-through `tool_execution` | {wrapped * 1e6:.0f} µs | "
        f"{percentile(rtt['one pass-through'], 99) * 1e6:.0f} µs |",
        "",
        f"With no middleware the gate is **{share:.4f}%** of a `tools.call` "
        f"({verdict} the ≤ 1% target). One pass-through middleware adds "
        f"{(wrapped - plain) * 1e6:.0f} µs ({(wrapped / plain - 1) * 100:.0f}%): its callback runs "
        "on a worker thread and its `next_call` hands the rest of the call back to the event loop.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.calls, args.gate_runs, args.gate_number = 2, 100, 3, 100_000
    else:
        args.rounds, args.calls, args.gate_runs, args.gate_number = 10, 300, 7, 1_000_000
    started, machine_line = common.now_utc(), common.machine()
    gate = gate_seconds(args.gate_runs, args.gate_number)
    print(f"round trip: {args.rounds} rounds × {args.calls} calls per daemon", flush=True)
    rtt = round_trips(args.rounds, args.calls)
    body = report(gate, rtt, args)
    common.publish(
        args, "middleware", "Middleware: cost with none registered", body, started, machine_line
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
