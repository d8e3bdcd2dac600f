"""``hermesctl sessions list|show|search|rename|delete|fork|export|compress``: stored
conversations.

Thin wrappers over the ``session.*`` methods: each prints for people, or JSON with ``--json``
(list commands print a JSON array of objects). ``export`` writes a session as JSON (the session
map and its stored messages) or Markdown.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from hermesctl.client import Client
from hermesctl.subcommands.base import (
    EXIT_OK,
    UsageError,
    command,
    emit_json,
    positive_int,
    relative_time,
    table,
)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sessions", help="list, show, search and manage stored sessions")
    s = p.add_subparsers(dest="sessions_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        a = s.add_parser(name, help=help_text)
        a.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
        )
        return a

    a = action("list", "sessions, most recently updated first")
    a.add_argument("-n", "--limit", type=positive_int, default=20, help="page size (default 20)")
    a.add_argument("--before", metavar="CURSOR", help="the next page (cursor printed by list)")
    a = action("prune", "delete old and/or empty sessions (your own; root: everyone's)")
    a.add_argument(
        "--older-than",
        type=age,
        metavar="AGE",
        help="not updated for this long: 30d, 12h, 45m, 90s",
    )
    a.add_argument("--empty", action="store_true", help="only sessions without messages")
    a.add_argument("--dry-run", action="store_true", help="only list what would be deleted")
    a = action("show", "a session and its history")
    a.add_argument("id")
    a = action("search", "full-text search over every message")
    a.add_argument("query", nargs="+", help="words to find (several words: all of them)")
    a.add_argument("-n", "--limit", type=positive_int, default=20, help="most hits (default 20)")
    a.add_argument("--session", metavar="ID", help="only this session")
    a = action("rename", "set a session's title")
    a.add_argument("id")
    a.add_argument("title")
    a = action("cancel", "stop the turn a session (a sub-agent's too) is running")
    a.add_argument("id")
    a = action("delete", "delete a session and its messages")
    a.add_argument("id")
    a = action("fork", "copy a session (up to a message) into a new one")
    a.add_argument("id")
    a.add_argument(
        "--upto",
        type=positive_int,
        metavar="MESSAGE_ID",
        help="last message to copy (default: all)",
    )
    a.add_argument("--title", help="title of the new session")
    a = action("compress", "compact what the model is sent of a session now (nothing deleted)")
    a.add_argument("id")
    a.add_argument("--focus", metavar="TEXT", help="what the summary should keep most of")
    a = action("export", "write a session as JSON or Markdown")
    a.add_argument("id")
    a.add_argument("--format", choices=("json", "markdown"), default="markdown")
    a.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")


AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def age(text: str) -> float:
    """argparse type: ``30d``, ``12h``, ``45m``, ``90s``, ``2w`` as seconds."""
    number, unit = text.strip()[:-1], text.strip()[-1:].lower()
    try:
        value = float(number) * AGE_UNITS[unit]
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(
            f"invalid age '{text}': a number and a unit, s m h d or w (30d, 12h)"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError("an age cannot be negative")
    return value


def _when(ts: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(float(ts)))
    except (TypeError, ValueError):
        return "?"


def _summary(s: dict[str, Any]) -> str:
    title = s.get("title") or "(untitled)"
    extra = " running" if s.get("running") else ""
    when = _when(s.get("updated_at"))
    return f"{s['id']}  {when}  {s.get('message_count', 0):>4} msgs{extra}  {title}"


@command("sessions")
def cmd_sessions(args: argparse.Namespace, client: Client) -> int:
    handler = _ACTIONS[args.sessions_command]
    return handler(args, client)


def _list(args: argparse.Namespace, client: Client) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.before:
        params["before"] = args.before
    page = client.call("session.list", params)
    sessions = page.get("sessions") or []
    if args.json:
        emit_json(sessions)
        return EXIT_OK
    if not sessions:
        print("No sessions." if not args.before else "No more sessions.")
    else:
        rows = [
            [
                _indent(s, sessions) + s["id"],
                relative_time(s.get("updated_at")),
                str(s.get("message_count", 0)),
                "running" if s.get("running") else "idle",
                s.get("model") or "(default)",
                s.get("title") or "(untitled)",
            ]
            for s in _tree(sessions)
        ]
        print(table(["SESSION ID", "UPDATED", "MESSAGES", "STATE", "MODEL", "TITLE"], rows))
    if page.get("next_cursor"):
        print(f"more: hermesctl sessions list --before {page['next_cursor']}")
    return EXIT_OK


def _prune(args: argparse.Namespace, client: Client) -> int:
    if args.older_than is None and not args.empty:
        raise UsageError("say which sessions: --older-than AGE and/or --empty")
    params: dict[str, Any] = {"dry_run": args.dry_run}
    if args.older_than is not None:
        params["older_than_s"] = args.older_than
    if args.empty:
        params["empty"] = True
    result = client.call("session.prune", params)
    if args.json:
        emit_json(result)
        return EXIT_OK
    ids = result.get("deleted") or []
    verb = "Would delete" if args.dry_run else "Deleted"
    print(f"{verb} {len(ids)} session{'s' if len(ids) != 1 else ''}.")
    for sid in ids:
        print(f"  {sid}")
    return EXIT_OK


def _show(args: argparse.Namespace, client: Client) -> int:
    from hermesctl.chat_ui import render_history

    session = client.call("session.get", {"session_id": args.id})
    messages = client.call("session.history", {"session_id": args.id}).get("messages") or []
    if args.json:
        emit_json({"session": session, "messages": messages})
        return EXIT_OK
    print(_summary(session))
    print(
        f"  model: {session.get('model') or '(default)'}  created: "
        f"{_when(session.get('created_at'))}"
        + (f"  forked from: {session['parent_id']}" if session.get("parent_id") else "")
    )
    print()
    for block in render_history(messages, ids=True):
        print(block)
    return EXIT_OK


def _search(args: argparse.Namespace, client: Client) -> int:
    query = " ".join(args.query)
    params: dict[str, Any] = {"query": query, "limit": args.limit}
    if args.session:
        params["session_id"] = args.session
    hits = client.call("session.search", params).get("hits") or []
    if args.json:
        emit_json(hits)
        return EXIT_OK
    if not hits:
        print(f"No messages match '{query}'.")
    for h in hits:
        title = h.get("session_title") or "(untitled)"
        print(f"{h['session_id']}  {title}  [{h.get('role')}] {h.get('snippet')}")
    return EXIT_OK


def _rename(args: argparse.Namespace, client: Client) -> int:
    session = client.call("session.rename", {"session_id": args.id, "title": args.title})
    if args.json:
        emit_json(session)
    else:
        print(f"Renamed {session['id']}: {session.get('title') or '(untitled)'}")
    return EXIT_OK


def _tree(sessions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page in its order, each sub-agent session right under the session that delegated
    to it (when that one is on the page)."""
    shown = {s["id"] for s in sessions}
    children: dict[str, list[dict[str, Any]]] = {}
    roots = []
    for s in sessions:
        parent = s.get("parent_id")
        if s.get("platform") == "subagent" and isinstance(parent, str) and parent in shown:
            children.setdefault(parent, []).append(s)
        else:
            roots.append(s)
    out: list[dict[str, Any]] = []

    def add(s: dict[str, Any]) -> None:
        out.append(s)
        for child in children.get(s["id"], []):
            add(child)

    for s in roots:
        add(s)
    return out


def _indent(s: dict[str, Any], sessions: list[dict[str, Any]]) -> str:
    """``└ `` per level of delegation above ``s`` that is on the page."""
    by_id = {x["id"]: x for x in sessions}
    depth, current = 0, s
    while current.get("platform") == "subagent" and current.get("parent_id") in by_id:
        depth += 1
        current = by_id[current["parent_id"]]
        if depth > 16:
            break
    return "  " * (depth - 1) + "└ " if depth else ""


def _cancel(args: argparse.Namespace, client: Client) -> int:
    result = client.call("session.cancel", {"session_id": args.id})
    if args.json:
        emit_json(result)
    elif result.get("cancelled"):
        print(f"Cancelled turn {result['turn_id']} of session {args.id}.")
    else:
        print(f"Session {args.id} is not running a turn.")
    return EXIT_OK


def _delete(args: argparse.Namespace, client: Client) -> int:
    result = client.call("session.delete", {"session_id": args.id})
    if args.json:
        emit_json(result)
    else:
        print(f"Deleted session {args.id}.")
    return EXIT_OK


def _fork(args: argparse.Namespace, client: Client) -> int:
    params: dict[str, Any] = {"session_id": args.id}
    if args.upto:
        params["upto_message_id"] = args.upto
    if args.title:
        params["title"] = args.title
    session = client.call("session.fork", params)
    if args.json:
        emit_json(session)
    else:
        print(
            f"Forked {args.id} into {session['id']} ({session.get('message_count', 0)} messages)."
        )
    return EXIT_OK


def _export(args: argparse.Namespace, client: Client) -> int:
    import json

    session = client.call("session.get", {"session_id": args.id})
    messages = client.call("session.history", {"session_id": args.id}).get("messages") or []
    for key in ("running", "turn_id", "attached"):  # live state, not part of the record
        session.pop(key, None)
    if args.format == "json":
        text = (
            json.dumps(
                {"session": session, "messages": messages},
                indent=2,
                ensure_ascii=False,
                default=str,
            )
            + "\n"
        )
    else:
        text = to_markdown(session, messages)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"Wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def to_markdown(session: dict[str, Any], messages: list[dict[str, Any]]) -> str:
    """A session as a Markdown document."""
    out = [
        f"# {session.get('title') or 'Session ' + session['id']}",
        "",
        f"- session: `{session['id']}`",
        f"- created: {_when(session.get('created_at'))}",
        f"- model: {session.get('model') or '(default)'}",
    ]
    if session.get("parent_id"):
        out.append(f"- forked from: `{session['parent_id']}`")
    fence = "```"
    for m in messages:
        role = m.get("role")
        out.append("")
        if role == "tool":
            out += [
                f"### Tool result ({m.get('tool_name') or '?'})",
                "",
                fence,
                str(m.get("content") or ""),
                fence,
            ]
            continue
        out += [f"## {str(role).capitalize()}", ""]
        if m.get("content"):
            out.append(str(m["content"]))
        for n, image in enumerate(m.get("images") or [], 1):  # attached images, inline
            out += [
                "",
                f"![image {n} ({image.get('mime')}, {image.get('bytes')} bytes)]"
                f"({image.get('url')})",
            ]
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            out += [
                "",
                f"Tool call `{fn.get('name')}`:",
                "",
                fence + "json",
                str(fn.get("arguments") or "{}"),
                fence,
            ]
    return "\n".join(out) + "\n"


def _compress(args: argparse.Namespace, client: Client) -> int:
    params: dict[str, Any] = {"session_id": args.id}
    if args.focus:
        params["focus"] = args.focus
    result = client.call("session.compress", params)
    if args.json:
        emit_json(result)
        return EXIT_OK
    if not result.get("compacted"):
        print(f"Nothing compacted: {result.get('why_not') or 'no change'}.")
        return EXIT_OK
    note = (
        " (mechanical summary: the summary model failed)" if result.get("summary_fallback") else ""
    )
    print(
        f"Compacted {result['session_id']} with {result['engine']}: {result['replaced']} messages"
        f" summarised{note}; the model now gets {result['messages_after']} messages instead of"
        f" {result['messages_before']}. Every message stays stored."
    )
    return EXIT_OK


_ACTIONS = {
    "list": _list,
    "show": _show,
    "search": _search,
    "rename": _rename,
    "delete": _delete,
    "cancel": _cancel,
    "prune": _prune,
    "fork": _fork,
    "export": _export,
    "compress": _compress,
}
