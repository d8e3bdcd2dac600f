"""``hermesctl recorder …``: the recorder provider's command (its cli.py, as the reference has)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from . import _home


def _calls(args: argparse.Namespace) -> int:
    path = _home() / "recorder.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    methods = [json.loads(line)["method"] for line in lines]
    print(f"{len(methods)} calls recorded; last: {methods[-1] if methods else 'none'}")
    return 0


def register_cli(subparser: argparse.ArgumentParser) -> None:
    subs = subparser.add_subparsers(dest="recorder_command")
    calls = subs.add_parser("calls", help="How many calls the recorder has seen")
    calls.set_defaults(func=_calls)
    home = subs.add_parser("home", help="Where the recorder writes")
    home.set_defaults(func=lambda args: print(Path(os.environ["HERMES_HOME"])) or 0)
