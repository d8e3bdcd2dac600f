"""Daemon start-up: spawn → READY=1 with and without 50 plugins and a model, and what it imports.

Cases, started alternately (A/B/C/C/B/A…), each a fresh ``python -m hermesd`` over its own home:

- **bare**: no plugins at all (bundled ones off), no model configured;
- **default**: the bundled plugins and a configured model endpoint (the model SDK is imported
  in the background so the first turn does not pay for it);
- **50 plugins**: the default plus 50 generated plugins (``bench/plugins.py``'s).

Then one start of the 50-plugin case under ``python -X importtime``: the imports made before
READY=1, largest cumulative first, and the heaviest third-party packages; and the same for
``hermesctl status`` (a whole process against a running daemon).

    python bench/startup.py [--quick] [--no-write] [--rounds N]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
from common import interleaved, machine, median, now_utc

from plugins import PLUGINS, Start, write_plugins

MODEL = "model:\n  provider: custom\n  base_url: http://127.0.0.1:9/v1\n  default: bench-model\n"
_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def homes(scratch: Path) -> dict[str, tuple[Path, dict[str, str]]]:
    empty = scratch / "no-bundled"
    empty.mkdir()
    out = {}
    for name in ("bare", "default", f"{PLUGINS} plugins"):
        home = scratch / name.replace(" ", "")
        home.mkdir()
        env: dict[str, str] = {}
        if name == "bare":
            env["HERMES_BUNDLED_PLUGINS"] = str(empty)
        else:
            (home / "config.yaml").write_text(MODEL)
        if name.endswith("plugins"):
            write_plugins(home, PLUGINS)
        out[name] = (home, env)
    return out


def parse_importtime(text: str) -> list[tuple[str, int, int, int]]:
    """(module, depth, self µs, cumulative µs) for every import line."""
    rows = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            rows.append((m.group(4), len(m.group(3)) // 2, int(m.group(1)), int(m.group(2))))
    return rows


def top_packages(rows: list[tuple[str, int, int, int]], n: int) -> list[tuple[str, float]]:
    """Self time summed per top-level package, largest first (ms)."""
    per: dict[str, int] = {}
    for name, _, own, _ in rows:
        per[name.split(".")[0]] = per.get(name.split(".")[0], 0) + own
    return [(k, v / 1000) for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:n]]


def import_profile(home: Path, env: dict[str, str]) -> tuple[str, str]:
    """importtime output of the daemon up to READY=1, and of ``hermesctl status``."""
    daemon = Start(home, {**env, "PYTHONPROFILEIMPORTTIME": "1"})
    try:
        at_ready = daemon.log_path.read_text(errors="replace")
        ctl = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-m",
                "hermesctl.cli",
                "--socket",
                str(daemon.socket),
                "status",
            ],
            env=common.clean_env({"PYTHONPATH": str(common.SOURCE)}),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        daemon.stop()
    return at_ready, ctl.stderr


def table(rows: list[tuple[str, int, int, int]], n: int) -> list[str]:
    out = ["| module | depth | cumulative | self |", "|---|---|---|---|"]
    for name, depth, own, cum in sorted(rows, key=lambda r: -r[3])[:n]:
        out.append(f"| `{name}` | {depth} | {cum / 1000:.1f} ms | {own / 1000:.1f} ms |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 8)
    started, machine_line = now_utc(), machine()
    scratch = common.scratch_dir("hbst-")
    try:
        cases = homes(scratch)
        for home, env in cases.values():  # page cache, __pycache__ of the plugins
            Start(home, env).stop()
        wall: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        for name in interleaved(rounds, list(cases)):
            start = Start(*cases[name])
            wall[name].append(start.ready_ms)
            cpu[name].append(start.ready_cpu_ms)
            start.stop()
        daemon_prof, ctl_prof = import_profile(*cases[f"{PLUGINS} plugins"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    bare = median(wall["bare"])
    lines = [
        f"{rounds} starts per case, interleaved; spawn of `python -m hermesd` → `READY=1`; "
        "CPU is the daemon's user+system time at READY=1 (10 ms ticks).",
        "",
        "| case | median | min | CPU (median) | vs bare |",
        "|---|---|---|---|---|",
    ]
    for name in cases:
        lines.append(
            f"| {name} | {median(wall[name]):.0f} ms | {min(wall[name]):.0f} ms | "
            f"{median(cpu[name]):.0f} ms | {median(wall[name]) / bare:.2f}× |"
        )
    drows = parse_importtime(daemon_prof)
    crows = parse_importtime(ctl_prof)
    dtotal = sum(r[2] for r in drows) / 1000
    ctotal = sum(r[2] for r in crows) / 1000
    lines += [
        "",
        f"**Imports before READY=1** ({PLUGINS}-plugin case, one start under "
        f"`-X importtime`, which slows imports: read as proportions): {len(drows)} "
        f"modules, {dtotal:.0f} ms of import time. Largest by cumulative time:",
        "",
        *table(drows, 12),
        "",
        "By top-level package (self time): "
        + ", ".join(f"`{k}` {v:.0f} ms" for k, v in top_packages(drows, 10))
        + ".",
        "",
        f"**`hermesctl status`**: {len(crows)} modules, {ctotal:.0f} ms of import time; "
        "by package: "
        + ", ".join(f"`{k}` {v:.1f} ms" for k, v in top_packages(crows, 6))
        + " (details in the CLI start-up section).",
    ]
    body = "\n".join(lines)
    common.publish(
        args, "startup", "Daemon start-up and import profile", body, started, machine_line
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
