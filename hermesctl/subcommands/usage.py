"""``hermesctl usage [--session ID] [--since WHEN] [--until WHEN]``: tokens and estimated cost.

A wrapper over ``usage.get``: the window's totals (one session or all), by model and by
session, today's and this month's totals and the budgets; ``--json`` prints the report as the
daemon gave it. ``WHEN`` is a date (``2026-12-01``, local midnight), a date and time
(``2026-12-01T09:30``) or a span back from now (``90m``, ``24h``, ``7d``, ``2w``).
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

from hermesctl.client import Client
from hermesctl.subcommands.base import EXIT_OK, command, emit_json, positive_int

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S")


def when(text: str, now: float | None = None) -> float:
    """argparse type: ``WHEN`` as Unix seconds (local time for dates)."""
    span = _SPAN.match(text)
    if span:
        return (time.time() if now is None else now) - float(span[1]) * _UNIT[span[2]]
    for fmt in _FORMATS:
        try:
            return time.mktime(time.strptime(text.strip(), fmt))
        except ValueError:
            continue
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a date (2026-12-01, 2026-12-01T09:30) or a span back from now "
        "(90m, 24h, 7d, 2w)"
    )


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "usage",
        help="tokens and estimated cost of model requests, and the budgets",
        description="Tokens and estimated cost of model requests (priced offline), by model "
        "and by session, with today's and this month's totals and the budgets.",
    )
    p.add_argument("--session", metavar="ID", help="only this session (a unique prefix will do)")
    p.add_argument(
        "--since", type=when, metavar="WHEN", help="from: 2026-12-01, 2026-12-01T09:30, 24h, 7d"
    )
    p.add_argument("--until", type=when, metavar="WHEN", help="before: same forms as --since")
    p.add_argument(
        "-n", "--limit", type=positive_int, default=20, help="most sessions and models (20)"
    )
    p.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )


@command("usage")
def cmd_usage(args: argparse.Namespace, client: Client) -> int:
    from hermesd.rpc.humanize import usage_report

    params: dict[str, Any] = {"limit": args.limit}
    if args.session:
        params["session_id"] = args.session
    for key in ("since", "until"):
        if getattr(args, key) is not None:
            params[key] = getattr(args, key)
    report = client.call("usage.get", params)
    if args.json:
        emit_json(report)
        return EXIT_OK
    heading = f"Session {report['session_id']}" if report.get("session_id") else "All sessions"
    if report.get("since") is not None:
        heading += " since " + time.strftime("%Y-%m-%d %H:%M", time.localtime(report["since"]))
    if report.get("until") is not None:
        heading += " until " + time.strftime("%Y-%m-%d %H:%M", time.localtime(report["until"]))
    print(usage_report(report, heading))
    return EXIT_OK
