"""``hermesctl memory show|add|replace|remove|edit|pending|approve|reject|setup``: memory.

Thin wrappers over the ``memory.*`` methods. ``edit`` opens the file's entries in ``$VISUAL``
or ``$EDITOR`` (entries separated by a line holding only ``§``) and saves them with
``memory.set``, refused when the file changed meanwhile. A write that fails (no match, over the
limit) prints the daemon's sentence and exits 1. ``setup`` (a memory provider's settings) is
`hermesctl.subcommands.memory_setup`.
"""

from __future__ import annotations

import argparse
import os
import sys

from hermesctl.client import Client
from hermesctl.subcommands.base import COMMANDS, EXIT_ERROR, EXIT_OK, emit_json

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up
    from typing import Any

DELIMITER = "\n§\n"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("memory", help="show and change MEMORY.md and USER.md, review writes")
    s = p.add_subparsers(dest="memory_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str, target: bool = True) -> argparse.ArgumentParser:
        a = s.add_parser(name, help=help_text)
        a.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
        )
        if target:
            a.add_argument(
                "--user",
                dest="target",
                action="store_const",
                const="user",
                default="memory",
                help="USER.md (the user profile) instead of MEMORY.md (the agent's notes)",
            )
        return a

    a = action("show", "the entries as they are on disk", target=False)
    a.add_argument("--user", dest="target", action="store_const", const="user", help="only USER.md")
    a.add_argument(
        "--notes", dest="target", action="store_const", const="memory", help="only MEMORY.md"
    )
    a = action("add", "add an entry")
    a.add_argument("text", nargs="+")
    a = action("replace", "replace the one entry containing OLD")
    a.add_argument("old")
    a.add_argument("text", nargs="+")
    a = action("remove", "remove the one entry containing OLD")
    a.add_argument("old")
    action("edit", "edit the whole file in $EDITOR")
    action("pending", "agent writes waiting for approval (memory.write_approval)", target=False)
    a = action("approve", "apply a staged write", target=False)
    a.add_argument("id")
    a = action("reject", "drop a staged write", target=False)
    a.add_argument("id")
    a = action("setup", "configure and select a memory provider", target=False)
    a.add_argument("provider", help="the provider's name (hermesctl plugins list shows them)")
    a.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a setting without prompting (repeatable; for scripts)",
    )


def _outcome(args: argparse.Namespace, result: dict[str, Any]) -> int:
    if args.json:
        emit_json(result)
    elif result.get("success"):
        print(f"{result.get('message', 'done')} ({result.get('usage', '')})")
    else:
        print(f"hermesctl: {result.get('error', 'memory write failed')}", file=sys.stderr)
        for entry in result.get("current_entries") or result.get("matches") or []:
            print(f"  - {entry}", file=sys.stderr)
    return EXIT_OK if result.get("success") else EXIT_ERROR


def cmd_show(args: argparse.Namespace, client: Client) -> int:
    params = {"target": args.target} if args.target else {}
    shown = client.call("memory.show", params)
    if args.json:
        emit_json(shown)
        return EXIT_OK
    for i, t in enumerate(shown["targets"]):
        state = "" if t["enabled"] else ", disabled"
        print(("\n" if i else "") + f"{t['path']} ({t['usage']} chars{state})")
        if not t["entries"]:
            print("  (empty)")
        for entry in t["entries"]:
            lines = entry.splitlines() or [""]
            print(f"  - {lines[0]}")
            for line in lines[1:]:
                print(f"    {line}")
    return EXIT_OK


def cmd_add(args: argparse.Namespace, client: Client) -> int:
    params = {"target": args.target, "action": "add", "content": " ".join(args.text)}
    return _outcome(args, client.call("memory.write", params))


def cmd_replace(args: argparse.Namespace, client: Client) -> int:
    params = {
        "target": args.target,
        "action": "replace",
        "old_text": args.old,
        "content": " ".join(args.text),
    }
    return _outcome(args, client.call("memory.write", params))


def cmd_remove(args: argparse.Namespace, client: Client) -> int:
    params = {"target": args.target, "action": "remove", "old_text": args.old}
    return _outcome(args, client.call("memory.write", params))


def cmd_edit(args: argparse.Namespace, client: Client) -> int:
    import shlex
    import subprocess
    import tempfile

    [shown] = client.call("memory.show", {"target": args.target})["targets"]
    before = DELIMITER.join(shown["entries"])
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.TemporaryDirectory(prefix="hermesctl-memory-") as tmp:
        path = os.path.join(tmp, os.path.basename(shown["path"]))
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(before + ("\n" if before else ""))
        status = subprocess.call([*shlex.split(editor), path])
        if status != 0:
            message = f"hermesctl: {editor} exited with status {status}; nothing saved"
            print(message, file=sys.stderr)
            return EXIT_ERROR
        with open(path, encoding="utf-8") as handle:
            after = handle.read()
    entries = [e.strip() for e in after.split(DELIMITER) if e.strip()]
    if entries == shown["entries"]:
        print("no changes")
        return EXIT_OK
    params = {"target": args.target, "entries": entries, "base": shown["digest"]}
    return _outcome(args, client.call("memory.set", params))


def cmd_pending(args: argparse.Namespace, client: Client) -> int:
    pending: list[dict[str, Any]] = client.call("memory.pending")["pending"]
    if args.json:
        emit_json(pending)
        return EXIT_OK
    if not pending:
        print("no pending memory writes")
    for p in pending:
        session = f"  session {p['session_id']}" if p.get("session_id") else ""
        print(f"{p['id']}  {p.get('summary', '')}{session}")
    return EXIT_OK


def cmd_approve(args: argparse.Namespace, client: Client) -> int:
    result = client.call("memory.approve", {"id": args.id})
    if args.json:
        emit_json(result)
        return EXIT_OK if result.get("applied") else EXIT_ERROR
    if result.get("applied"):
        print(f"approved {args.id}: {result.get('message', '')} ({result.get('usage', '')})")
        return EXIT_OK
    print(f"hermesctl: {args.id} not applied: {result.get('error', '')}", file=sys.stderr)
    return EXIT_ERROR


def cmd_reject(args: argparse.Namespace, client: Client) -> int:
    result = client.call("memory.reject", {"id": args.id})
    if args.json:
        emit_json(result)
    else:
        print(f"rejected {args.id}")
    return EXIT_OK


_ACTIONS = {
    "show": cmd_show,
    "add": cmd_add,
    "replace": cmd_replace,
    "remove": cmd_remove,
    "edit": cmd_edit,
    "pending": cmd_pending,
    "approve": cmd_approve,
    "reject": cmd_reject,
}


def _run(args: argparse.Namespace, client: Client) -> int:
    if args.memory_command == "setup":
        from hermesctl.subcommands.memory_setup import cmd_setup

        return cmd_setup(args, client)
    return _ACTIONS[args.memory_command](args, client)


COMMANDS["memory"] = _run
