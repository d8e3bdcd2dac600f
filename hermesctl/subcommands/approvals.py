"""``hermesctl approvals pending|approve|deny|list|revoke``: answer and manage approvals.

Thin wrappers over the ``approvals.*`` methods. ``approve ID`` answers once (``--session``:
for the rest of that session, ``--always``: remembered in state.db); ``deny ID [REASON]``
relays the reason to the model.
"""

from __future__ import annotations

import argparse
import time

from hermesctl.approval_prompt import command_lines, visible
from hermesctl.client import Client
from hermesctl.subcommands.base import COMMANDS, EXIT_OK, emit_json

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up
    from typing import Any


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("approvals", help="answer pending approvals, manage always-rules")
    s = p.add_subparsers(dest="approvals_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        a = s.add_parser(name, help=help_text)
        a.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
        )
        return a

    a = action("pending", "tool calls waiting for an answer")
    a.add_argument("--session", metavar="ID", help="only this session's")
    a = action("approve", "let a pending tool call run")
    a.add_argument("id")
    scope = a.add_mutually_exclusive_group()
    scope.add_argument(
        "--session",
        dest="scope",
        action="store_const",
        const="session",
        help="and the same kind of command for the rest of that session",
    )
    scope.add_argument(
        "--always",
        dest="scope",
        action="store_const",
        const="always",
        help="and the same kind of command from now on (kept in state.db)",
    )
    a = action("deny", "refuse a pending tool call")
    a.add_argument("id")
    a.add_argument("reason", nargs="*", help="told to the model")
    action("list", "the remembered always-rules")
    a = action("revoke", "forget an always-rule")
    a.add_argument("key", help="its pattern key (see `approvals list`)")


def _when(ts: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(float(ts)))
    except (TypeError, ValueError):
        return "?"


def cmd_pending(args: argparse.Namespace, client: Client) -> int:
    params = {"session_id": args.session} if args.session else {}
    pending: list[dict[str, Any]] = client.call("approvals.pending", params)["pending"]
    if args.json:
        emit_json(pending)
        return EXIT_OK
    if not pending:
        print("no pending approvals")
    for p in pending:
        left = max(0, int(float(p["deadline"]) - time.time()))
        print(
            f"{p['id']}  session {p['session_id'] or '-'}  {visible(p['tool'])}  "
            f"({visible(p['description'])}; {left}s left)"
        )
        print("\n".join(command_lines(p, pad="    ")))
    return EXIT_OK


def cmd_approve(args: argparse.Namespace, client: Client) -> int:
    result = client.call("approvals.respond", {"id": args.id, "choice": args.scope or "once"})
    if args.json:
        emit_json(result)
    else:
        print(f"approved {args.id} ({result['choice']})")
    return EXIT_OK


def cmd_deny(args: argparse.Namespace, client: Client) -> int:
    params: dict[str, Any] = {"id": args.id, "choice": "deny"}
    if args.reason:
        params["reason"] = " ".join(args.reason)
    result = client.call("approvals.respond", params)
    if args.json:
        emit_json(result)
    else:
        print(f"denied {args.id}")
    return EXIT_OK


def cmd_list(args: argparse.Namespace, client: Client) -> int:
    rules: list[dict[str, Any]] = client.call("approvals.list")["rules"]
    if args.json:
        emit_json(rules)
        return EXIT_OK
    if not rules:
        print("no always-rules")
    for r in rules:
        print(
            f"{r['pattern_key']:<24} {_when(r['created_at'])}  by {r['decided_by'] or '?'}  "
            f"{r['description'] or ''}"
        )
    return EXIT_OK


def cmd_revoke(args: argparse.Namespace, client: Client) -> int:
    result = client.call("approvals.revoke", {"pattern_key": args.key})
    if args.json:
        emit_json(result)
    else:
        print(f"revoked {args.key}")
    return EXIT_OK


_ACTIONS = {
    "pending": cmd_pending,
    "approve": cmd_approve,
    "deny": cmd_deny,
    "list": cmd_list,
    "revoke": cmd_revoke,
}


def _run(args: argparse.Namespace, client: Client) -> int:
    return _ACTIONS[args.approvals_command](args, client)


COMMANDS["approvals"] = _run
