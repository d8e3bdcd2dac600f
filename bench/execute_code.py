#!/usr/bin/env python3
"""execute_code start-up, side by side with the reference's execute_code on the same scripts.

**Ours**: ``tools.call execute_code`` on a real hermesd (default configuration: bubblewrap
where it works, issue 29's seccomp filter, private tmp, limits), timed at the client: the
RPC round trip, the tool pipeline, the sandbox's command line, the daemon's Python starting
``code_runner.py`` in the sandbox, the script and its module sent over the pipe pair, and the
result. ``terminal echo ok`` through the same path is shown as the sandbox's own floor.
**Reference**: hermes-agent 0.19.0's ``tools.code_execution_tool.execute_code`` called
in-process in ``/tmp/refvenv`` (offline; its local backend: an unconfined Python child, a Unix
socket for tool calls), no RPC. Scripts: ``print('hi')``, and one ``terminal('echo ok')`` call
from the script. Blocks of the two sides alternate, so machine load hits both alike.

    python bench/execute_code.py            # the full run (about a minute)
    python bench/execute_code.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from common import Daemon, machine, median, now_utc, percentile, publish

from hermesctl.client import Client

REFERENCE_PYTHON = Path("/tmp/refvenv/bin/python")
SCRIPTS = {
    "trivial": "print('hi')",
    "one tool call": "from hermes_tools import terminal\nprint(terminal('echo ok')['output'])",
}
REFERENCE_CHILD = """
import json, os, sys, time
from tools.code_execution_tool import execute_code
code, samples = sys.argv[1], int(sys.argv[2])
execute_code(code, task_id="bench", enabled_tools=["terminal"])  # warm: imports, first spawn
out = []
for _ in range(samples):
    started = time.perf_counter()
    result = json.loads(execute_code(code, task_id="bench", enabled_tools=["terminal"]))
    out.append((time.perf_counter() - started) * 1000)
    assert result["status"] == "success", result
print(json.dumps(out))
"""


def ours(client: Client, sid: str, name: str, args: dict[str, Any], samples: int) -> list[float]:
    """Milliseconds of ``samples`` tools.call round trips."""
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        result = json.loads(
            client.call("tools.call", {"name": name, "args": args, "session_id": sid})["result"]
        )
        out.append((time.perf_counter() - started) * 1000)
        assert result.get("status", "success") == "success" and "error" not in result, result
    return out


def reference(code: str, samples: int, home: Path) -> list[float]:
    """Milliseconds of the reference's execute_code, or [] when it is not installed."""
    if not REFERENCE_PYTHON.exists():
        return []
    done = subprocess.run(
        [str(REFERENCE_PYTHON), "-c", REFERENCE_CHILD, code, str(samples)],
        capture_output=True,
        text=True,
        timeout=600,
        env={"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin", "HOME": str(home)},
        cwd=str(home),
    )
    if done.returncode != 0:
        raise SystemExit(f"the reference failed:\n{done.stderr[-2000:]}")
    values: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return values


def row(label: str, values: list[float]) -> str:
    if not values:
        return f"| {label} | – | – | – |"
    return f"| {label} | {median(values):.1f} | {percentile(values, 90):.1f} | {len(values)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (few samples)")
    parser.add_argument("--no-write", action="store_true", help="do not update the doc")
    args = parser.parse_args()
    blocks, per_block = (1, 3) if args.quick else (4, 10)
    started = now_utc()
    results: dict[str, list[float]] = {}
    with Daemon() as daemon, tempfile.TemporaryDirectory(prefix="hb-ref-") as ref_home:
        client = Client.connect(daemon.socket, timeout=60, hello=True)
        sid = client.call("session.create")["id"]
        ours(client, sid, "execute_code", {"code": "pass"}, 2)  # warm: workspace, filter file
        for _ in range(blocks):
            for label, code in SCRIPTS.items():
                got = ours(client, sid, "execute_code", {"code": code}, per_block)
                results.setdefault(f"hermesd execute_code, {label}", []).extend(got)
                ref = reference(code, per_block, Path(ref_home))
                results.setdefault(f"reference execute_code, {label}", []).extend(ref)
            floor = ours(client, sid, "terminal", {"command": "echo ok"}, per_block)
            results.setdefault("hermesd terminal echo ok (the sandbox's floor)", []).extend(floor)
        client.close()
    body = "\n".join(
        [
            "| case | p50 ms | p90 ms | samples |",
            "|---|---|---|---|",
            *(row(label, values) for label, values in results.items()),
        ]
    )
    publish(args, "execute_code", "execute_code start-up", body, started, machine())


if __name__ == "__main__":
    main()
