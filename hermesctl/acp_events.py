"""hermesd's session events and stored messages as ACP ``session/update`` payloads.

`EventTranslator` turns the live ``session.event`` notifications into agent message chunks,
tool calls with their status, and the plan (from ``todo.updated``); `history_updates` turns
``session.history`` messages into the same updates for ``session/load``. The only state kept is
which tool calls of a session are still open, so that an approval can name the call it is about.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import acp
from acp import schema

Send = Callable[[str, Any], None]

#: hermes tool names by the ACP tool kind an editor shows them as
_KINDS: dict[str, tuple[str, ...]] = {
    "read": ("read_file", "skill_view", "skills_list", "session_search", "process"),
    "edit": ("write_file", "patch", "memory", "todo"),
    "search": ("search_files", "web_search"),
    "execute": ("terminal", "execute_code"),
    "fetch": ("web_extract", "browser_navigate"),
    "think": ("clarify",),
}
_KIND_OF = {name: kind for kind, names in _KINDS.items() for name in names}
#: todo statuses as plan entry statuses (a plan entry has no "cancelled")
_PLAN_STATUS = {"pending": "pending", "in_progress": "in_progress", "completed": "completed"}


def tool_kind(name: str) -> Any:
    """The ACP tool kind of a hermes tool (``other`` when it has none)."""
    return _KIND_OF.get(name, "other")


def tool_title(name: str, arguments: Any) -> str:
    """A short title: the tool and its main argument."""
    args = arguments
    if isinstance(arguments, str):
        try:
            args = json.loads(arguments)
        except ValueError:
            args = {}
    if isinstance(args, dict):
        for key in ("command", "path", "query", "url", "code", "name"):
            value = args.get(key)
            if isinstance(value, str) and value:
                first = value.strip().splitlines()[0] if value.strip() else value
                return f"{name}: {first[:120]}"
    return name


def _parsed(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def edit_content(name: str, arguments: Any) -> tuple[list[Any] | None, list[Any] | None]:
    """A ``write_file`` or ``patch`` (replace mode) call as the diff an editor shows, and the
    file it touches; (None, None) for other calls. A V4A ``patch`` text is shown as it is."""
    args = _parsed(arguments)
    if not isinstance(args, dict) or not isinstance(args.get("path"), str):
        return None, None
    path = args["path"]
    where = [schema.ToolCallLocation(path=path)]
    if name == "write_file" and isinstance(args.get("content"), str):
        return [acp.tool_diff_content(path, args["content"])], where
    old, new = args.get("old_string"), args.get("new_string")
    if name == "patch" and isinstance(old, str) and isinstance(new, str):
        return [acp.tool_diff_content(path, new, old)], where
    return None, None


def _text_content(text: str) -> list[Any]:
    return [acp.tool_content(acp.text_block(text))] if text else []


def start_call(call_id: str, name: str, arguments: Any) -> Any:
    """The ``tool_call`` update that opens one call (with its diff for a file edit)."""
    content, locations = edit_content(name, arguments)
    return acp.start_tool_call(
        call_id,
        tool_title(name, arguments),
        kind=tool_kind(name),
        status="in_progress",
        content=content,
        locations=locations,
        raw_input=_parsed(arguments),
    )


def finish_call(call_id: str, name: str, ok: bool, preview: str) -> Any:
    """The ``tool_call_update`` that closes one call; a file edit that worked keeps its diff
    as the content shown (an update's content replaces the call's)."""
    keep_diff = ok and name in ("write_file", "patch")
    return acp.update_tool_call(
        call_id,
        status="completed" if ok else "failed",
        content=None if keep_diff else _text_content(preview),
        raw_output=preview,
    )


def plan_update(todos: list[dict[str, Any]]) -> Any:
    """A ``todo.updated`` list as an ACP plan (cancelled items say so in their text)."""
    entries = []
    for todo in todos:
        status = str(todo.get("status") or "pending")
        content = str(todo.get("content") or "")
        if status == "cancelled":
            content, status = f"(cancelled) {content}", "completed"
        entries.append(
            acp.plan_entry(content, priority="medium", status=_PLAN_STATUS.get(status, "pending"))  # type: ignore[arg-type]
        )
    return acp.update_plan(entries)


class EventTranslator:
    """Live ``session.event`` notifications to ``session/update``, handed to ``send``."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._open: dict[str, dict[str, str]] = {}  # session -> open tool call id -> tool name

    def open_call_for(self, session_id: str, tool: str) -> str | None:
        """The newest open tool call of the session running ``tool`` (else the newest one)."""
        calls = self._open.get(session_id) or {}
        named = [cid for cid, name in calls.items() if name == tool]
        found = named or list(calls)
        return found[-1] if found else None

    def translate(self, event: dict[str, Any]) -> None:
        """Send what one event means to the editor (nothing for bookkeeping events)."""
        sid = str(event.get("session_id") or "")
        kind = event.get("type")
        if kind == "text.delta" and event.get("text"):
            self._send(sid, acp.update_agent_message_text(str(event["text"])))
        elif kind == "turn.started" and event.get("user_message"):
            self._send(sid, acp.update_user_message_text(str(event["user_message"])))
        elif kind == "tool.started":
            call_id, name = str(event.get("tool_call_id")), str(event.get("name") or "")
            self._open.setdefault(sid, {})[call_id] = name
            self._send(sid, start_call(call_id, name, event.get("arguments")))
        elif kind == "tool.finished":
            call_id = str(event.get("tool_call_id"))
            name = (self._open.get(sid) or {}).pop(call_id, "")
            preview = str(event.get("preview") or "")
            ok = event.get("status") == "ok"
            self._send(sid, finish_call(call_id, name, ok, preview))
        elif kind == "todo.updated":
            self._send(sid, plan_update(list(event.get("todos") or [])))
        elif kind == "message" and event.get("injected") and event.get("content"):
            self._send(sid, acp.update_agent_message_text(str(event["content"])))
        elif kind == "turn.finished":
            self._open.pop(sid, None)  # a cancelled turn's calls end with it
        elif kind == "session.deleted":
            self._open.pop(sid, None)


def history_updates(messages: list[dict[str, Any]]) -> Iterator[Any]:
    """Stored messages (``session.history``) as the updates that replay the conversation."""
    names: dict[str, str] = {}
    for msg in messages:
        if msg.get("undone"):
            continue
        role, content = msg.get("role"), _message_text(msg.get("content"))
        if role == "user":
            if content:
                yield acp.update_user_message_text(content)
            for image in msg.get("images") or ():
                url = str(image.get("url") or "")
                if url.startswith("data:") and "," in url:
                    data = url.split(",", 1)[1]
                    block = acp.image_block(data, str(image.get("mime") or "image/png"))
                    yield acp.update_user_message(block)
        elif role == "assistant":
            if content:
                yield acp.update_agent_message_text(content)
            for call in msg.get("tool_calls") or ():
                function = call.get("function") or {}
                name = str(function.get("name") or call.get("name") or "")
                call_id = str(call.get("id"))
                names[call_id] = name
                yield start_call(call_id, name, function.get("arguments", call.get("arguments")))
        elif role == "tool":
            call_id = str(msg.get("tool_call_id"))
            name = names.get(call_id, str(msg.get("tool_name") or ""))
            yield finish_call(call_id, name, not _looks_failed(content), content[:2000])


def _looks_failed(content: str) -> bool:
    """A stored tool result that is a JSON object with an ``error`` (the live event says
    ok/error; the stored message only has the text)."""
    try:
        parsed = json.loads(content)
    except ValueError:
        return False
    return isinstance(parsed, dict) and bool(parsed.get("error"))


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""
