#!/usr/bin/env python3
"""Cost of the plugin host: start-up with 50 plugins, a ``tools.call`` round trip, and the event
loop while a plugin tool burns CPU.

**Start-up**: time from spawning ``python -m hermesd`` to its ``READY=1`` on NOTIFY_SOCKET, with
50 generated plugins in ``$HERMES_HOME/plugins`` (each: a manifest, a package with a relative
import, one tool, one hook) against the same daemon with no plugins at all (bundled plugins
switched off with an empty ``HERMES_BUNDLED_PLUGINS`` in both). Starts alternate A/B/B/A.

**Round trip**: one ``hermesctl.client.Client`` connection to a daemon with the bundled
calculator; sequential ``tools.call`` of ``calculate`` (through the whole pipeline: argument
checks, hooks, a worker thread, the calculator's post_tool_call hook) against sequential
``ping`` on the same connection, in interleaved rounds.

**Busy tool**: ``ping`` round trips on one connection while a plugin tool spins on a worker
thread (a pure-Python loop for a fixed time) on another, against ``ping`` on the same daemon
while nothing runs: what a CPU-bound plugin costs every other client (the loop waits for the
interpreter lock up to Python's switch interval, 5 ms, each time it needs it).

    python bench/plugins.py            # the full run (about half a minute)
    python bench/plugins.py --quick    # a smoke run (a few seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import common
from common import Client, median, percentile

PLUGINS = 50

PLUGIN_INIT = """\
import json
from .schemas import SCHEMA

def handler(args, **kwargs):
    return json.dumps({{"plugin": {n}, "text": args.get("text", "")}})

def register(ctx):
    ctx.register_tool("echo_{n:02d}_text", "bench_{n:02d}", SCHEMA, handler)
    ctx.register_hook("post_tool_call", lambda tool_name, **kw: None)
"""
PLUGIN_SCHEMAS = """\
SCHEMA = {{
    "description": "Echo the text back and return it as JSON, from bench plugin {n}",
    "parameters": {{"type": "object", "required": ["text"], "properties": {{
        "text": {{"type": "string", "description": "text to echo back unchanged"}}}}}},
}}
"""


def write_plugins(home: Path, count: int) -> None:
    """``count`` plugin folders in ``home/plugins``."""
    for n in range(count):
        folder = home / "plugins" / f"bench_{n:02d}"
        folder.mkdir(parents=True)
        (folder / "plugin.yaml").write_text(f"name: bench_{n:02d}\nversion: 1.0.{n}\n")
        (folder / "__init__.py").write_text(PLUGIN_INIT.format(n=n))
        (folder / "schemas.py").write_text(PLUGIN_SCHEMAS.format(n=n))


class Start:
    """One hermesd started over ``home``; ``ready_ms`` is spawn → READY=1."""

    def __init__(self, home: Path, env: dict[str, str], timeout: float = 60.0) -> None:
        self.dir = common.scratch_dir("hbp-")
        self.socket = self.dir / "hermesd.sock"
        notify_path = self.dir / "notify.sock"
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(notify_path))
        notify.settimeout(0.05)
        argv = [sys.executable, "-m", "hermesd", "--socket", str(self.socket)]
        if os.geteuid() == 0:
            argv.append("--allow-root")
        full_env = common.clean_env(
            {
                **env,
                "HERMES_HOME": str(home),
                "NOTIFY_SOCKET": str(notify_path),
                "PYTHONPATH": str(common.SOURCE),
            }
        )
        self.log_path = self.dir / "hermesd.log"
        started = time.perf_counter()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.dir),
            )
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    if b"READY=1" in notify.recv(65536):
                        break
                except TimeoutError:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "hermesd did not get ready:\n" + self.log_path.read_text(errors="replace")
                    )
            self.ready_ms = (time.perf_counter() - started) * 1000
            self.ready_cpu_ms = common.cpu_seconds(self.proc.pid) * 1000
        except BaseException:
            self.stop()
            raise
        finally:
            notify.close()

    def stop(self) -> None:
        common.stop_process(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def startup(rounds: int) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU time (ms) to READY per case, interleaved."""
    scratch = common.scratch_dir("hbp-")
    empty = scratch / "no-bundled"
    empty.mkdir()
    homes = {"0 plugins": scratch / "home0", f"{PLUGINS} plugins": scratch / "home50"}
    for home in homes.values():
        home.mkdir()
    write_plugins(homes[f"{PLUGINS} plugins"], PLUGINS)
    env = {"HERMES_BUNDLED_PLUGINS": str(empty)}
    times: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in homes}
    try:
        for name in homes:  # warm the page cache and the plugins' __pycache__
            Start(homes[name], env).stop()
        check = Start(homes[f"{PLUGINS} plugins"], env)
        try:
            with Client.connect(check.socket) as client:
                loaded = [
                    p for p in client.call("plugins.list")["plugins"] if p["state"] == "loaded"
                ]
        finally:
            check.stop()
        if len(loaded) != PLUGINS:
            raise RuntimeError(f"expected {PLUGINS} loaded plugins, got {len(loaded)}")
        for name in common.interleaved(rounds, list(homes)):
            started = Start(homes[name], env)
            times[name]["wall"].append(started.ready_ms)
            times[name]["cpu"].append(started.ready_cpu_ms)
            started.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return times


def round_trips(rounds: int, per_round: int) -> dict[str, list[float]]:
    """Seconds per call of ``tools.call calculate`` and ``ping`` on one connection."""
    home = common.scratch_dir("hbp-")
    daemon = Start(home, {})
    calls = {
        "tools.call calculate": (
            "tools.call",
            {"name": "calculate", "args": {"expression": "sqrt(2*pi) * 2**16"}},
        ),
        "ping": ("ping", None),
    }
    samples: dict[str, list[float]] = {name: [] for name in calls}
    clock = time.perf_counter
    try:
        with Client.connect(daemon.socket, timeout=30) as client:
            result = client.call(*calls["tools.call calculate"])["result"]
            if '"result"' not in result:
                raise RuntimeError(f"calculate failed: {result}")
            for method, params in calls.values():
                for _ in range(200):
                    client.call(method, params)
            for name in common.interleaved(rounds, list(calls)):
                method, params = calls[name]
                for _ in range(per_round):
                    t0 = clock()
                    client.call(method, params)
                    samples[name].append(clock() - t0)
    finally:
        daemon.stop()
        shutil.rmtree(home, ignore_errors=True)
    return samples


BUSY_INIT = """
import json, time

def spin(args, **kwargs):
    end = time.monotonic() + float(args.get("seconds", 1))
    loops = 0
    while time.monotonic() < end:
        loops += 1
    return json.dumps({"loops": loops})

def register(ctx):
    ctx.register_tool("spin", "busy", {
        "name": "spin", "description": "Run a pure-Python loop for the given seconds and "
        "return how many times it went round",
        "parameters": {"type": "object", "properties": {"seconds": {"type": "number"}}}}, spin)
"""
BUSY_CASES = ("idle", "a plugin tool busy")


def busy_tool(rounds: int, seconds: float) -> dict[str, list[float]]:
    """Ping round trips (s) with nothing running and while the spin tool runs, ``rounds``
    daemons each; and the tool's loop counts."""
    out: dict[str, list[float]] = {"idle": [], "a plugin tool busy": [], "loops": []}
    for _ in range(rounds):
        home = common.scratch_dir("hbb-")
        (home / "plugins" / "busy").mkdir(parents=True)
        (home / "plugins" / "busy" / "plugin.yaml").write_text("name: busy\nversion: 1.0.0\n")
        (home / "plugins" / "busy" / "__init__.py").write_text(BUSY_INIT)
        daemon = Start(home, {"HERMES_BUNDLED_PLUGINS": ""})

        def pings(probe: Client, case: str, until: float) -> None:
            while time.monotonic() < until:
                t0 = time.perf_counter()
                probe.call("ping")
                out[case].append(time.perf_counter() - t0)
                time.sleep(0.005)

        try:
            with (
                Client.connect(daemon.socket, timeout=30) as tool,
                Client.connect(daemon.socket, timeout=30) as probe,
            ):
                pings(probe, "idle", time.monotonic() + seconds - 0.3)
                pending = tool.send("tools.call", {"name": "spin", "args": {"seconds": seconds}})
                time.sleep(0.1)  # the tool is running
                pings(probe, "a plugin tool busy", time.monotonic() + seconds - 0.2)
                result = json.loads(tool.wait(pending, timeout=seconds + 30)["result"])
                out["loops"].append(float(result["loops"]))
        finally:
            daemon.stop()
            shutil.rmtree(home, ignore_errors=True)
    return out


def report(
    start_ms: dict[str, dict[str, list[float]]],
    rtt: dict[str, list[float]],
    busy: dict[str, list[float]],
    args: argparse.Namespace,
) -> str:
    none, many = start_ms["0 plugins"]["wall"], start_ms[f"{PLUGINS} plugins"]["wall"]
    cpu_none, cpu_many = start_ms["0 plugins"]["cpu"], start_ms[f"{PLUGINS} plugins"]["cpu"]
    per_plugin = (median(many) - median(none)) / PLUGINS
    calc, ping = rtt["tools.call calculate"], rtt["ping"]
    us = 1e6
    lines = [
        f"**Start-up** (spawn of `python -m hermesd` → `READY=1`), {args.start_rounds} starts "
        f"per case, interleaved. {PLUGINS} generated plugins in `$HERMES_HOME/plugins`, each "
        "a manifest, a package with a relative import, one tool and one hook; bundled plugins "
        "off in both cases. CPU is the daemon's user+system time when READY=1 arrives (10 ms "
        "resolution), which other load on the machine disturbs less than wall time.",
        "",
        "| case | median | min | max | CPU (median) |",
        "|---|---|---|---|---|",
        f"| 0 plugins | {median(none):.0f} ms | {min(none):.0f} ms | {max(none):.0f} ms "
        f"| {median(cpu_none):.0f} ms |",
        f"| {PLUGINS} plugins | {median(many):.0f} ms | {min(many):.0f} ms | {max(many):.0f} ms "
        f"| {median(cpu_many):.0f} ms |",
        "",
        f"Ratio {PLUGINS} plugins / 0 plugins: **{median(many) / median(none):.2f}×** wall "
        f"(+{median(many) - median(none):.0f} ms, about {per_plugin:.1f} ms per plugin), "
        f"**{median(cpu_many) / median(cpu_none):.2f}×** CPU "
        f"(+{median(cpu_many) - median(cpu_none):.0f} ms).",
        "",
        f"**Round trip** on one `hermesctl.client.Client` connection, {args.rounds} rounds of "
        f"{args.calls} sequential calls per method, interleaved "
        f"({len(calc)} samples each): `tools.call` of the bundled `calculate` "
        "(`sqrt(2*pi) * 2**16`) through the full tool pipeline, against `ping`.",
        "",
        "| call | p50 | p99 |",
        "|---|---|---|",
        f"| `tools.call` calculate | {median(calc) * us:.0f} µs | "
        f"{percentile(calc, 99) * us:.0f} µs |",
        f"| `ping` | {median(ping) * us:.0f} µs | {percentile(ping, 99) * us:.0f} µs |",
        "",
        f"Ratio tools.call / ping (p50): **{median(calc) / median(ping):.2f}×** "
        f"(+{(median(calc) - median(ping)) * us:.0f} µs for the pipeline; the handler and "
        "the calculator's sync `post_tool_call` hook each run on a worker thread).",
    ]
    idle, spinning = (busy[c] for c in BUSY_CASES)
    ms = 1000
    lines += [
        "",
        (
            f"**Busy tool**: `ping` every 5 ms on one connection, first with nothing running, "
            f"then while a plugin tool runs a pure-Python loop for {args.spin:g} s on a worker "
            f"thread (another connection); {args.busy_rounds} daemons ({len(idle)} and "
            f"{len(spinning)} pings; the tool went round its loop "
            f"{median(busy['loops']) / 1e6:.1f} M times, median)."
        ),
        "",
        "| while | ping p50 | p99 | max |",
        "|---|---|---|---|",
        *(
            f"| {case} | {median(busy[case]) * ms:.2f} ms | "
            f"{percentile(busy[case], 99) * ms:.2f} ms | {max(busy[case]) * ms:.2f} ms |"
            for case in BUSY_CASES
        ),
        "",
        (
            f"A busy plugin thread adds {(median(spinning) - median(idle)) * ms:.1f} ms to a "
            "request (p50): the loop waits for the interpreter lock up to Python's switch "
            "interval (5 ms) each time it needs it."
        ),
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    if args.quick:
        args.start_rounds, args.rounds, args.calls, args.busy_rounds, args.spin = 2, 4, 100, 2, 1
    else:
        args.start_rounds, args.rounds, args.calls, args.busy_rounds, args.spin = 16, 20, 500, 4, 2
    started, machine_line = common.now_utc(), common.machine()
    print(f"start-up: {args.start_rounds} starts per case", flush=True)
    start_ms = startup(args.start_rounds)
    print(f"round trip: {args.rounds} rounds × {args.calls} calls per method", flush=True)
    rtt = round_trips(args.rounds, args.calls)
    print(f"busy tool: {args.busy_rounds} daemons", flush=True)
    busy = busy_tool(args.busy_rounds, args.spin)
    body = report(start_ms, rtt, busy, args)
    common.publish(
        args,
        "plugins",
        "Plugins: start-up with 50 plugins, tools.call round trip",
        body,
        started,
        machine_line,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
