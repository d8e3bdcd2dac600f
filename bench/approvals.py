#!/usr/bin/env python3
"""Cost of approvals and redaction on the tool pipeline, measured in-process side by side.

**Pipeline**: the real ``ToolRegistry.call`` pipeline (argument checks, hooks, a worker
thread) for a ``terminal``-shaped tool whose handler echoes the command (no shell, so only the
pipeline is measured), once bare and once with the daemon's approver (``ApprovalBroker``:
floor, deny globs, the dangerous-command table, rules) and redactor (20 planted secret values
plus the key formats), over the harmless commands of the test corpus; interleaved rounds.

**Parser**: the table's cost per terminal command (``patterns.assess``: parse with
tree-sitter-bash, strip wrappers, floor and dangerous table), p50/p99 over every command of the
corpus, side by side with the regex table it replaced (loaded from git history, commit
``REGEX_TABLE``, when the checkout has it).

**Parts**: redaction of a 50 KB ``env``-like output.

    python bench/approvals.py            # the full run (about 20 seconds)
    python bench/approvals.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path
from typing import Any

import common
from common import median, percentile

from hermesd.approvals import patterns
from hermesd.approvals.broker import ApprovalBroker
from hermesd.daemon.config import Config
from hermesd.redact import Redactor
from hermesd.runtime.hooks import HookBus
from hermesd.store.facade import SessionStore
from hermesd.tools.registry import ToolRegistry
from hermesd.tools.terminal import TERMINAL_SCHEMA

CORPUS = json.loads((common.REPO / "tests" / "data" / "approval_corpus.json").read_text())
REGEX_TABLE = "447a5b7"  # main's last commit with the regular-expression table
WHERE = patterns.Where("/home/ann", "/home/ann/.hermes", 31337, "/home/ann/project")
SECRETS = {f"SERVICE_{n}_TOKEN": f"tok-{n:02d}-{'x' * 20}" for n in range(20)}


def echo(args: dict[str, Any], **_: Any) -> str:
    return json.dumps({"output": args["command"] + "\n", "exit_code": 0})


def registry(approver: Any = None, redactor: Any = None) -> ToolRegistry:
    reg = ToolRegistry(HookBus(), approver=approver, redactor=redactor)
    reg.register("terminal", "terminal", TERMINAL_SCHEMA, echo)
    return reg


async def pipeline(rounds: int, calls: int, home: Path) -> dict[str, list[float]]:
    store = SessionStore.in_home(home)
    broker = ApprovalBroker(store, HookBus(), Config({}), attached=lambda sid: [])
    await broker.load()
    both = {
        "bare": registry(),
        "approvals": registry(broker.approve, Redactor.from_env(SECRETS, {})),
    }
    # the few harmless commands that ask by decision would wait for a person: left out
    commands = [c for c in CORPUS["harmless"] if c not in CORPUS["expected_prompts"]]
    samples: dict[str, list[float]] = {"bare": [], "approvals": []}
    for name in common.interleaved(rounds, list(both)):
        reg = both[name]
        for i in range(calls):
            args = {"command": commands[i % len(commands)]}
            t0 = time.perf_counter()
            await reg.call("terminal", args, session_id="s")
            samples[name].append(time.perf_counter() - t0)
    await store.aclose()
    return samples


def regex_table() -> Any | None:
    """The old regular-expression table as a module, or None without that history."""
    try:
        source = subprocess.run(
            ["git", "show", f"{REGEX_TABLE}:hermesd/approvals/patterns.py"],
            cwd=common.REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType("regex_patterns")
    sys.modules[module.__name__] = module  # its dataclasses look themselves up there
    exec(compile(source, "regex_patterns.py", "exec"), module.__dict__)
    return module


def table_costs(repeat: int) -> dict[str, list[float]]:
    """Seconds per command: the parsing table, and the regex table when it can be loaded."""
    commands = [
        *CORPUS["harmless"],
        *(d["command"] for d in CORPUS["dangerous"]),
        *(d["command"] for d in CORPUS["floor"]),
    ]
    old = regex_table()
    samples: dict[str, list[float]] = {"parser": [], "regex": []}
    for _ in range(repeat):
        for command in commands:
            t0 = time.perf_counter()
            patterns.assess(command, WHERE)
            samples["parser"].append(time.perf_counter() - t0)
            if old is not None:
                t0 = time.perf_counter()
                old.dangerous(command)
                old.floor(command)
                samples["regex"].append(time.perf_counter() - t0)
    return samples


def parts(repeat: int) -> dict[str, float]:
    redactor = Redactor.from_env(SECRETS, {})
    lines = [f"VAR_{n}=value-{n}-{'y' * 30}" for n in range(1200)]
    lines[600] = f"SERVICE_3_TOKEN={SECRETS['SERVICE_3_TOKEN']}"
    output = json.dumps({"output": "\n".join(lines)})
    t0 = time.perf_counter()
    for _ in range(repeat):
        redactor(output)
    return {
        "redact": (time.perf_counter() - t0) / repeat,
        "size": float(len(output)),
    }


def report(
    samples: dict[str, list[float]],
    costs: dict[str, list[float]],
    part: dict[str, float],
    args: Any,
) -> str:
    us = 1e6
    bare, full = samples["bare"], samples["approvals"]
    parser, regex = costs["parser"], costs["regex"]
    count = len(CORPUS["harmless"]) + len(CORPUS["dangerous"]) + len(CORPUS["floor"])
    table = [
        (
            f"**Parser**, the table's cost per terminal command over the {count} corpus "
            f"commands ({len(parser)} samples):"
        ),
        "",
        "| table | p50 | p99 |",
        "|---|---|---|",
        (
            f"| tree-sitter parse + wrappers + table (`patterns.assess`) | "
            f"{median(parser) * us:.0f} µs | {percentile(parser, 99) * us:.0f} µs |"
        ),
    ]
    if regex:
        table.append(
            f"| the regular-expression table it replaced (`{REGEX_TABLE}`) | "
            f"{median(regex) * us:.0f} µs | {percentile(regex, 99) * us:.0f} µs |"
        )
    table.append("")
    lines = [
        (
            f"**Pipeline**, {args.rounds} interleaved rounds of {args.calls} sequential "
            f"`ToolRegistry.call`s each ({len(bare)} samples per case), harmless corpus commands:"
        ),
        "",
        "| pipeline | p50 | p99 |",
        "|---|---|---|",
        f"| bare | {median(bare) * us:.0f} µs | {percentile(bare, 99) * us:.0f} µs |",
        (
            f"| with approvals + redaction | {median(full) * us:.0f} µs | "
            f"{percentile(full, 99) * us:.0f} µs |"
        ),
        "",
        (
            f"Ratio with / without (p50): **{median(full) / median(bare):.2f}×** "
            f"(+{(median(full) - median(bare)) * us:.0f} µs per call)."
        ),
        "",
        (
            f"**Parts**: redacting a {part['size'] / 1024:.0f} KB `env`-like result takes "
            f"{part['redact'] * 1000:.2f} ms ({part['redact'] * us / (part['size'] / 1024):.1f} µs "
            "per KB)."
        ),
    ]
    return "\n".join([*table, *lines])


def main() -> int:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    args.rounds, args.calls, repeat = (2, 100, 5) if args.quick else (10, 500, 50)
    started, machine_line = common.now_utc(), common.machine()
    home = common.scratch_dir("hb-ap-")
    samples = asyncio.run(pipeline(args.rounds, args.calls, home))
    body = report(samples, table_costs(2 if args.quick else 20), parts(repeat), args)
    common.publish(
        args,
        "approvals",
        "Approvals and redaction: cost per tool call",
        body,
        started,
        machine_line,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
