#!/usr/bin/env python3
"""Whole-process wall time of ``hermesctl status`` against ``python -c 'import msgpack'``.

A command-line client is mostly interpreter start-up and imports, so the baseline is the least
any Python msgpack client pays: the same interpreter importing msgpack. Runs alternate
(A/B/C/D, then D/C/B/A) against one running hermesd; the ratio is of medians. Also prints what
``python -X importtime`` says the largest imports of ``hermesctl status`` are.

The client runs from a NON-editable install: setuptools' editable finder alone adds ~15 ms of
imports at interpreter start. That is ``.venv`` (``scripts/bootstrap`` does ``pip install .``)
when it is current, else a throwaway venv in /tmp built from a copy of this checkout.

    python bench/cli_startup.py            # 40 runs of each command
    python bench/cli_startup.py --quick    # 8 runs of each
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
from common import REPO, SOURCE, median, percentile

TARGET = 2.0
BASELINE = "python -c 'import msgpack'"
THROWAWAY = Path("/tmp/hermesd-bench-venv")
PACKAGES = ("hermesd", "hermesctl")
# What a copy of the checkout to build from can leave out: history, caches, build output.
UNPACKAGED = (
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".hypothesis",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "result",
)


# --- the interpreter under test ----------------------------------------------------------------


def client_modules(python: Path) -> dict[str, Path] | None:
    """Our modules that ``import hermesctl.cli`` loads under ``python``, by path in the package.

    None when hermesctl is not installed there, or only as an editable install of a checkout.
    """
    probe = subprocess.run(
        [
            str(python),
            "-c",
            (
                "import sys, hermesctl.cli\n"
                "for m in list(sys.modules.values()):\n"
                "    if m.__name__.split('.')[0] in ('hermesd', 'hermesctl'):\n"
                "        print(m.__name__, m.__file__)"
            ),
        ],
        capture_output=True,
        text=True,
        cwd="/",
        env=common.clean_env(),
        timeout=60,
        check=False,
    )
    if probe.returncode != 0:
        return None
    found = {}
    for line in probe.stdout.splitlines():
        name, file = line.split(" ", 1)
        path = Path(file)
        if REPO in path.parents or SOURCE in path.parents:
            return None
        package = path.name == "__init__.py"
        relative = name.replace(".", "/") + ("/__init__.py" if package else ".py")
        found[relative] = path
    return found


def is_current(python: Path) -> bool:
    """True when ``python`` runs hermesctl from a non-editable install of this checkout."""
    modules = client_modules(python)
    if not modules:
        return False
    return all(
        (SOURCE / rel).exists() and filecmp.cmp(SOURCE / rel, path, shallow=False)
        for rel, path in modules.items()
    )


def pip(python: Path, *args: str) -> None:
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        check=True,
        env=common.clean_env(),
        timeout=600,
    )


def client_python() -> Path:
    """An interpreter with hermesctl installed normally (not editable) from this checkout."""
    dot_venv = REPO / ".venv" / "bin" / "python"
    if dot_venv.exists() and is_current(dot_venv):
        return dot_venv
    if dot_venv.exists():
        print(".venv does not hold this checkout (stale or editable); using", THROWAWAY)
    python = THROWAWAY / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(THROWAWAY)], check=True, timeout=300)
    if not is_current(python):
        import msgpack  # the same msgpack the rest of the benchmarks use

        pip(python, f"msgpack=={msgpack.version[0]}.{msgpack.version[1]}.{msgpack.version[2]}")
        # Build from a copy: pip builds in the source tree, and this checkout is not ours to touch.
        with tempfile.TemporaryDirectory(prefix="hbsrc-") as tmp:
            src = Path(tmp) / "src"
            shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(*UNPACKAGED))
            if SOURCE != REPO:
                for package in PACKAGES:
                    shutil.rmtree(src / package)
                    shutil.copytree(
                        SOURCE / package, src / package, ignore=shutil.ignore_patterns(*UNPACKAGED)
                    )
            pip(python, "--no-deps", "--force-reinstall", str(src))
        if not is_current(python):  # edited meanwhile: measure what was installed, but say so
            print(f"warning: the checkout changed while it was installed into {python}")
    return python


# --- timing ------------------------------------------------------------------------------------


def run_once(argv: list[str], scratch: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=scratch,
        env=common.clean_env(),
        timeout=60,
        check=False,
    )
    taken = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited with {done.returncode}: {done.stderr.decode()}")
    return taken


def import_times(argv: list[str], scratch: Path, runs: int) -> dict[str, tuple[int, float, float]]:
    """Per module: (depth, median self ms, median cumulative ms) under ``-X importtime``."""
    seen: dict[str, list[tuple[int, float, float]]] = {}
    for _ in range(runs):
        done = subprocess.run(
            [argv[0], "-X", "importtime", *argv[1:]],
            capture_output=True,
            text=True,
            cwd=scratch,
            env=common.clean_env(),
            timeout=60,
            check=False,
        )
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or "cumulative" in line:
                continue
            self_us, cumulative_us, name = line[len("import time:") :].split("|")
            depth = (len(name) - len(name.lstrip()) - 1) // 2
            seen.setdefault(name.strip(), []).append(
                (depth, int(self_us) / 1000, int(cumulative_us) / 1000)
            )
    return {
        name: (v[0][0], median([s for _, s, _ in v]), median([c for _, _, c in v]))
        for name, v in seen.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--runs", type=int, help="runs of each command (default 40, quick 8)")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    runs = args.runs or (8 if args.quick else 40)
    started, machine_line = common.now_utc(), common.machine()
    python = client_python()
    shown = os.path.relpath(python, REPO) if REPO in python.parents else str(python)
    hermesctl = python.parent / "hermesctl"
    scratch = common.scratch_dir("hbc-")
    try:
        with common.Daemon() as daemon:
            commands = {
                "python -c pass": [str(python), "-c", "pass"],
                BASELINE: [str(python), "-c", "import msgpack"],
                "python -c 'import hermesctl.cli'": [str(python), "-c", "import hermesctl.cli"],
                "hermesctl status": [str(hermesctl), "--socket", str(daemon.socket), "status"],
            }
            for argv in commands.values():  # page cache, .pyc files, the daemon's first call
                for _ in range(3):
                    run_once(argv, scratch)
            print(f"{runs} runs of each of {len(commands)} commands, interleaved", flush=True)
            times: dict[str, list[float]] = {name: [] for name in commands}
            for name in common.interleaved(runs, list(commands)):
                times[name].append(run_once(commands[name], scratch))
            status_argv = [str(python), str(hermesctl), "--socket", str(daemon.socket), "status"]
            imports = import_times(status_argv, scratch, 5 if args.quick else 11)
            baseline_imports = import_times([str(python), "-c", "import msgpack"], scratch, 3)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    body = report(times, imports, baseline_imports, runs, shown)
    common.publish(args, "cli", "CLI start-up: hermesctl status", body, started, machine_line)
    return 0


def report(
    times: dict[str, list[float]],
    imports: dict[str, tuple[int, float, float]],
    baseline_imports: dict[str, tuple[int, float, float]],
    runs: int,
    python: str,
) -> str:
    ms = 1e3
    base = median(times[BASELINE])
    status = median(times["hermesctl status"])
    lines = [
        (
            f"Client interpreter: `{python}` (non-editable install of this checkout); each command "
            f"run {runs} times, interleaved, against one running hermesd. Wall time of the whole "
            "process, as started by `subprocess.run`."
        ),
        "",
        "| command | median | min | p90 | vs baseline |",
        "|---|---|---|---|---|",
    ]
    for name, samples in times.items():
        lines.append(
            f"| `{name}` | {median(samples) * ms:.1f} ms | {min(samples) * ms:.1f} ms | "
            f"{percentile(samples, 90) * ms:.1f} ms | {median(samples) / base:.2f}× |"
        )
    extra = {n: v for n, v in imports.items() if n not in baseline_imports}
    lines += [
        "",
        (
            f"`hermesctl status` / `python -c 'import msgpack'`, ratio of medians: "
            f"**{common.fmt_ratio(status / base, TARGET)}**, {(status - base) * ms:+.1f} ms. "
            f"Ratio of minimums: {min(times['hermesctl status']) / min(times[BASELINE]):.2f}× "
            "(a busy machine only ever adds time to a process start, so on one the minimum is the "
            "steadier figure)."
        ),
        "",
        (
            f"Largest imports of `hermesctl status` by cumulative time (`python -X importtime`, "
            f"median of runs; importtime itself slows imports, so read these as proportions). "
            f"It imports {len(extra)} modules that the baseline does not, "
            f"{sum(s for _, s, _ in extra.values()):.1f} ms of their own import time in all."
        ),
        "",
        "| module | depth | cumulative | self | also imported by the baseline |",
        "|---|---|---|---|---|",
    ]
    top = sorted(imports.items(), key=lambda kv: kv[1][2], reverse=True)[:15]
    for name, (depth, self_ms, cumulative_ms) in top:
        lines.append(
            f"| `{name}` | {depth} | {cumulative_ms:.2f} ms | {self_ms:.2f} ms | "
            f"{'yes' if name in baseline_imports else 'no'} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
