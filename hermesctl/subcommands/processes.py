"""``hermesctl processes [SESSION] [--kill ID]``: the background processes terminal started.

A wrapper over ``process.list`` and ``process.kill``: one session's processes (a unique prefix
of its id will do) or those of every session the caller may use, with their state, pid, how
long they have run and their command; ``--json`` prints the list as the daemon gave it.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from hermesctl.client import Client
from hermesctl.subcommands.base import EXIT_ERROR, EXIT_OK, command, emit_json


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "processes",
        help="background processes started by terminal (background=true)",
        description="Background processes the terminal tool started: running, exited, killed "
        "or gone (left running by a daemon that did not stop cleanly).",
    )
    p.add_argument("session", nargs="?", help="only this session (a unique prefix will do)")
    p.add_argument("--kill", metavar="ID", help="kill this process of SESSION (proc_…)")
    p.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )


@command("processes")
def cmd_processes(args: argparse.Namespace, client: Client) -> int:
    if args.kill:
        if not args.session:
            print("hermesctl processes --kill ID needs the process's SESSION")
            return EXIT_ERROR
        done = client.call("process.kill", {"session_id": args.session, "id": args.kill})
        print(f"{done['id']}: {done['status']} ({done.get('termination_source') or '-'})")
        return EXIT_OK
    params = {"session_id": args.session} if args.session else {}
    found: list[dict[str, Any]] = client.call("process.list", params)["processes"]
    if args.json:
        emit_json(found)
        return EXIT_OK
    if not found:
        print("No background processes.")
        return EXIT_OK
    print(f"{'ID':<18} {'SESSION':<24} {'STATUS':<8} {'PID':>7} {'UPTIME':>8}  COMMAND")
    for p in found:
        running = p["status"] == "running"
        uptime = f"{int(time.time() - p['started_at'])}s" if running else "-"
        status = f"exit {p['exit_code']}" if p["status"] == "exited" else p["status"]
        shown = p["command"] if len(p["command"]) <= 50 else p["command"][:47] + "..."
        pid = p["pid"] or "-"
        print(f"{p['id']:<18} {p['session_id']:<24} {status:<8} {pid:>7} {uptime:>8}  {shown}")
    return EXIT_OK
