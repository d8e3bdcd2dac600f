#!/usr/bin/env python3
"""The patch tool on a 10,000-line file, side by side with the reference's matcher.

**Matcher**: one replace on a 10,000-line Python-like file, in-process: an exact one-line
match near the end, a three-line snippet written at another indentation (the forgiving line
strategy), and no match at all (every strategy runs to the end). Ours is
``hermesd.tools.patch_match.replace``; the reference's is hermes-agent 0.19.0's
``tools.fuzzy_match.fuzzy_find_and_replace``, imported from ``REFERENCE`` when present
(offline), measured interleaved on the same input.

**Tool**: the whole ``patch`` handler (read, match, write, unified diff) on that file in a
scratch workspace, replace mode and a three-hunk multi-file patch, without the daemon.

    python bench/patch.py            # the full run (under a minute)
    python bench/patch.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import machine, median, now_utc, percentile, publish, scratch_dir

from hermesd.tools.file_access import PathGuard
from hermesd.tools.patch import PatchTool
from hermesd.tools.patch_match import MatchError, replace

REFERENCE = Path("/tmp/refvenv/lib/python3.11/site-packages")
LINES = 10_000


def source() -> str:
    """A 10,000-line file of small functions, each line distinct."""
    out = []
    for i in range(LINES // 4):
        out += [f"def f{i}(x):", f"    if x > {i}:", f"        return x - {i}", ""]
    return "\n".join(out) + "\n"


CASES: dict[str, tuple[str, str]] = {
    "exact, 1 line": ("        return x - 2400", "        return x + 2400"),
    "indentation differs, 3 lines": (
        "def f2450(x):\n  if x > 2450:\n      return x - 2450",
        "def f2450(x):\n  if x >= 2450:\n      return 0",
    ),
    "no match": ("        return x * 7", "x"),
}


def reference() -> Callable[[str, str, str, bool], Any] | None:
    if not REFERENCE.is_dir():
        return None
    sys.path.insert(0, str(REFERENCE))
    try:
        from tools.fuzzy_match import fuzzy_find_and_replace  # type: ignore[import-not-found]
    except Exception:
        return None
    return fuzzy_find_and_replace  # type: ignore[no-any-return]


def ours(content: str, old: str, new: str, replace_all: bool) -> Any:
    try:
        return replace(content, old, new, replace_all)
    except MatchError:
        return None


def timed(fn: Callable[[], Any], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def matcher_rows(rounds: int) -> list[str]:
    text, ref = source(), reference()
    rows = ["| case | hermesd p50 ms | reference p50 ms | ratio |", "|---|---:|---:|---:|"]
    for name, (old, new) in CASES.items():
        mine: list[float] = []
        theirs: list[float] = []
        for _ in range(rounds):  # interleaved, one of each per round
            mine += timed(lambda o=old, n=new: ours(text, o, n, False), 1)
            if ref is not None:
                theirs += timed(lambda o=old, n=new: ref(text, o, n, False), 1)
        if ref is not None:
            r = f"{median(theirs):.2f}"
            ratio = f"{median(mine) / median(theirs):.2f}"
        else:
            r, ratio = "n/a", "n/a"
        rows.append(f"| {name} | {median(mine):.2f} | {r} | {ratio} |")
    if ref is None:
        rows.append(f"\n(the reference was not importable from {REFERENCE})")
    return rows


def tool_rows(rounds: int) -> list[str]:
    work = scratch_dir("bench-patch-")
    target = work / "big.py"
    guard = PathGuard(work / "hermes-home", work)
    tool = PatchTool(guard, lambda _sid: work)
    patch = (
        "*** Begin Patch\n*** Update File: big.py\n"
        "@@ def f100\n-        return x - 100\n+        return x + 100\n"
        "@@ def f1250\n-        return x - 1250\n+        return x + 1250\n"
        "@@ def f2250\n-        return x - 2250\n+        return x + 2250\n"
        "*** End Patch\n"
    )
    calls: dict[str, dict[str, Any]] = {
        "replace, 1 line": {
            "mode": "replace",
            "path": "big.py",
            "old_string": "        return x - 2400",
            "new_string": "        return x + 2400",
        },
        "patch, 3 hunks": {"mode": "patch", "patch": patch},
    }
    rows = ["| call | p50 ms | p90 ms |", "|---|---:|---:|"]
    for name, args in calls.items():
        times = []
        for _ in range(rounds):
            target.write_text(source())
            start = time.perf_counter()
            result = json.loads(tool.run(args))
            times.append((time.perf_counter() - start) * 1000)
            assert result.get("success") is True, result
        rows.append(f"| {name} | {median(times):.2f} | {percentile(times, 90):.2f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    started = now_utc()
    rounds = 5 if args.quick else 40
    body = "\n".join(
        [
            f"Matcher, one replace on a {LINES:,}-line file ({rounds} interleaved rounds):",
            "",
            *matcher_rows(rounds),
            "",
            "The whole `patch` handler (read, match, write, diff) on that file:",
            "",
            *tool_rows(rounds),
        ]
    )
    publish(args, "patch", "Patch tool: a 10,000-line file", body, started, machine())


if __name__ == "__main__":
    main()
