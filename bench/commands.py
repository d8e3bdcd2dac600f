#!/usr/bin/env python3
"""Cost of slash commands, plugin CLI commands and hot reload, against ``ping`` side by side.

One real hermesd with a small plugin (a slash command and an argparse CLI command) in its
HERMES_HOME. Interleaved rounds of sequential requests on one connection: ``ping`` (the
baseline: one round trip), ``command.run "/echo x"`` (parse, registry lookup, a worker thread)
and ``cli.run ["bench-cli", "say", "x"]`` (a fresh argparse tree, parse, a worker thread, a
per-call output capture). Then whole processes, interleaved: ``hermesctl status`` against
``hermesctl bench-cli say x`` (forwarded to the daemon). Last, ``plugins.reload`` with the
plugin plus N copies, and a ``ping`` sent while the reload runs.

    python bench/commands.py            # the full run (about 30 seconds)
    python bench/commands.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import common
from common import Client, median, percentile

PLUGIN = """
import sys

def register(ctx):
    ctx.register_command("echo", lambda raw: raw, description="echo")

    def setup(parser):
        sub = parser.add_subparsers(dest="action", required=True)
        say = sub.add_parser("say")
        say.add_argument("words", nargs="+")

    def handle(args):
        print(" ".join(args.words))

    ctx.register_cli_command("bench-cli", "benchmark command", setup, handle)
"""


def write_plugin(home: Any, name: str) -> None:
    folder = home / "plugins" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.yaml").write_text(f"name: {name}\nversion: 1.0.0\n")
    (folder / "__init__.py").write_text(
        PLUGIN if name == "bench" else "def register(ctx):\n    pass\n"
    )


def requests(client: Client, rounds: int, calls: int) -> dict[str, list[float]]:
    kinds = {
        "ping": ("ping", None),
        "command.run": ("command.run", {"line": "/echo x"}),
        "cli.run": ("cli.run", {"argv": ["bench-cli", "say", "x"]}),
    }
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    for name in common.interleaved(rounds, list(kinds)):
        method, params = kinds[name]
        for _ in range(calls):
            t0 = time.perf_counter()
            client.call(method, params)
            samples[name].append(time.perf_counter() - t0)
    return samples


def processes(socket: str, rounds: int) -> dict[str, list[float]]:
    argvs = {"hermesctl status": ["status"], "hermesctl bench-cli say x": ["bench-cli", "say", "x"]}
    env = common.clean_env({"PYTHONPATH": str(common.SOURCE)})
    samples: dict[str, list[float]] = {k: [] for k in argvs}
    for name in common.interleaved(rounds, list(argvs)):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "hermesctl", "--socket", socket, *argvs[name]],
            env=env,
            check=True,
            capture_output=True,
        )
        samples[name].append(time.perf_counter() - t0)
    return samples


def reloads(client: Client, socket: str, times: int) -> tuple[list[float], list[float]]:
    took, pings = [], []
    for _ in range(times):
        done = threading.Event()

        def ping_during(done: threading.Event = done) -> None:
            with Client.connect(socket) as other:
                time.sleep(0.005)
                t0 = time.perf_counter()
                other.call("ping")
                pings.append(time.perf_counter() - t0)
            done.set()

        thread = threading.Thread(target=ping_during)
        t0 = time.perf_counter()
        thread.start()
        client.call("plugins.reload")
        took.append(time.perf_counter() - t0)
        thread.join()
    return took, pings


def report(
    req: dict[str, list[float]],
    proc: dict[str, list[float]],
    took: list[float],
    pings: list[float],
    plugins: int,
    args: Any,
) -> str:
    us = 1e6
    base = median(req["ping"])
    lines = [
        f"**Requests**, {args.rounds} interleaved rounds of {args.calls} sequential requests on "
        "one connection:",
        "",
        "| request | p50 | p99 | p50 / ping |",
        "|---|---|---|---|",
    ]
    for name, values in req.items():
        lines.append(
            f"| `{name}` | {median(values) * us:.0f} µs | "
            f"{percentile(values, 99) * us:.0f} µs | {median(values) / base:.2f}× |"
        )
    status, forwarded = proc["hermesctl status"], proc["hermesctl bench-cli say x"]
    lines += [
        "",
        f"**Processes**, {args.proc_rounds} interleaved runs each: `hermesctl status` "
        f"{median(status) * 1000:.0f} ms, `hermesctl bench-cli say x` (forwarded to the daemon) "
        f"{median(forwarded) * 1000:.0f} ms p50 — ratio "
        f"**{median(forwarded) / median(status):.2f}×**.",
        "",
        f"**Hot reload** of {plugins} plugins (`plugins.reload`, {len(took)} times): "
        f"{median(took) * 1000:.0f} ms p50; a `ping` from another connection started 5 ms "
        f"after each reload answered in {median(pings) * 1000:.1f} ms p50 "
        f"({max(pings) * 1000:.1f} ms max): plugins load on a worker thread, the loop serves.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    args.rounds, args.calls, args.proc_rounds, n_reload, extra = (
        (2, 50, 3, 2, 5) if args.quick else (10, 300, 15, 10, 20)
    )
    started, machine_line = common.now_utc(), common.machine()
    with common.Daemon() as daemon:
        write_plugin(daemon.home, "bench")
        for i in range(extra):
            write_plugin(daemon.home, f"filler-{i:02d}")
        with Client.connect(daemon.socket) as client:
            client.call("plugins.reload")
            req = requests(client, args.rounds, args.calls)
            proc = processes(str(daemon.socket), args.proc_rounds)
            took, pings = reloads(client, str(daemon.socket), n_reload)
        plugins = extra + 2  # the fillers, bench, and the bundled calculator
    body = report(req, proc, took, pings, plugins, args)
    common.publish(
        args,
        "commands",
        "Slash commands, plugin CLI commands, hot reload",
        body,
        started,
        machine_line,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
