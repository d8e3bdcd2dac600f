"""The ``todo`` tool (toolset ``todo``) and the ``/todo`` command: each session's task list.

The model plans a multi-step task as a list of ``{id, content, status}`` items: ``todos``
replaces the list, with ``merge: true`` it updates items by id and appends new ones, and a call
without ``todos`` reads it. Every call answers with the whole list and a count per status, in
the reference's shape. The list is kept in the store (`hermesd.store.todos`), so it survives a
restart, is copied by a fork and deleted with its session; every change is sent to the clients
attached to the session as a ``todo.updated`` event, and ``/todo`` prints it.

The model is untrusted: a call with arguments of the wrong type, too many items or an item too
long is refused whole, with a message saying what is wrong, and the stored list is untouched.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hermesd.runtime.session import current_session
from hermesd.tools.registry import BUILTIN

if TYPE_CHECKING:
    from hermesd.commands.registry import CommandRegistry
    from hermesd.store.facade import SessionStore
    from hermesd.tools.registry import ToolRegistry

TOOLSET = "todo"
STATUSES = ("pending", "in_progress", "completed", "cancelled")
MAX_ITEMS = 256  # a plan is a handful of steps; this bounds what the model is sent back
MAX_CONTENT = 4000  # characters of one item's description
MAX_ID = 200  # characters of one item's id
EVENT = "todo.updated"

Items = list[dict[str, Any]]
Emit = Callable[[dict[str, Any]], None]
RunningTurn = Callable[[str], str | None]  # session id -> the id of its running turn, if any

_ITEM = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The item's id, unique in the list"},
        "content": {"type": "string", "description": "What the step is"},
        "status": {"type": "string", "enum": list(STATUSES), "description": "Where it stands"},
    },
    "required": ["id", "content", "status"],
}

SCHEMA: dict[str, Any] = {
    "name": "todo",
    "description": (
        "Keep a task list for this session: plan work of three steps or more, or several "
        "tasks the user gave, and track it. Call without parameters to read the list.\n\n"
        "To write, pass 'todos': with merge=false (the default) it becomes the whole list; "
        "with merge=true items are updated by id (only the fields given) and new ids are "
        "appended.\n"
        "Each item is {id, content, status}; status is pending, in_progress, completed or "
        "cancelled. The order is the priority. Keep one item in_progress at a time, mark an "
        "item completed as soon as it is done, and when a step fails cancel it and add a "
        "revised one.\n\nEvery call returns the whole list."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "description": "Items to write; leave out to read the list.",
                "items": _ITEM,
            },
            "merge": {
                "type": "boolean",
                "description": "true: update items by id and add new ones; false (default): "
                "replace the whole list.",
                "default": False,
            },
        },
        "required": [],
    },
}


class TodoError(ValueError):
    """A call the tool refuses; its text is what the model reads."""


def tool_error(message: str) -> dict[str, Any]:
    """An error result in the reference's shape."""
    return {"error": message, "success": False}


def summary(items: Items) -> dict[str, Any]:
    """The list and its count per status: the tool's result."""
    counts = {s: sum(1 for i in items if i["status"] == s) for s in STATUSES}
    return {"todos": items, "summary": {"total": len(items), **counts}}


def _text(item: dict[str, Any], key: str, limit: int, n: int) -> str | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise TodoError(f"todos[{n}].{key} must be a string, not {type(value).__name__}")
    value = value.strip()
    if len(value) > limit:
        raise TodoError(f"todos[{n}].{key} is {len(value)} characters; the limit is {limit}")
    return value


def read_items(raw: Any, merge: bool) -> Items:
    """The items of a write, checked: each ``{id, content?, status?}`` (content and status are
    required unless ``merge``); raises `TodoError` naming the first thing wrong."""
    if isinstance(raw, str):  # some models send the list as a JSON string
        try:
            raw = json.loads(raw)
        except ValueError:
            raise TodoError("todos must be a list of {id, content, status} objects") from None
    if not isinstance(raw, list):
        raise TodoError(f"todos must be a list, not {type(raw).__name__}")
    if len(raw) > MAX_ITEMS:
        raise TodoError(f"todos has {len(raw)} items; the limit is {MAX_ITEMS}")
    items: Items = []
    for n, item in enumerate(raw):
        if not isinstance(item, dict):
            raise TodoError(f"todos[{n}] must be an object, not {type(item).__name__}")
        item_id = _text(item, "id", MAX_ID, n)
        if not item_id:
            raise TodoError(f"todos[{n}] needs a non-empty string id")
        content = _text(item, "content", MAX_CONTENT, n)
        status = _text(item, "status", 32, n)
        if status is not None:
            status = status.lower()
            if status not in STATUSES:
                raise TodoError(f"todos[{n}].status '{status}' is not one of {', '.join(STATUSES)}")
        checked: dict[str, Any] = {"id": item_id}
        if content:
            checked["content"] = content
        if status:
            checked["status"] = status
        items.append(checked)
    return items


def apply(current: Items, items: Items, merge: bool) -> Items:
    """The list after a write of checked ``items`` (a later duplicate id wins)."""
    result: Items = [dict(i) for i in current] if merge else []
    where = {item["id"]: n for n, item in enumerate(result)}
    for item in items:
        if item["id"] in where:
            result[where[item["id"]]].update(item)
            continue
        if "content" not in item:
            why = " is not in the list, so it" if merge else ""
            raise TodoError(f"item '{item['id']}'{why} needs its content")
        where[item["id"]] = len(result)
        result.append({"id": item["id"], "content": item["content"], "status": "pending"})
        result[-1].update(item)
    if len(result) > MAX_ITEMS:
        raise TodoError(f"the list would have {len(result)} items; the limit is {MAX_ITEMS}")
    return result


def render(items: Items) -> str:
    """The list as ``/todo`` prints it."""
    if not items:
        return "No todo list in this session."
    marks = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]", "cancelled": "[~]"}
    lines = [f"{marks[i['status']]} {i['id']}. {i['content']} ({i['status']})" for i in items]
    counts = summary(items)["summary"]
    lines.append(
        f"{counts['total']} items: {counts['pending']} pending, {counts['in_progress']} in "
        f"progress, {counts['completed']} completed, {counts['cancelled']} cancelled"
    )
    return "\n".join(lines)


class TodoTool:
    """The ``todo`` tool and ``/todo`` over the store; ``emit`` sends ``todo.updated``, with
    the session's running turn (``running_turn``) as its ``turn_id`` so a client following that
    turn sees it."""

    def __init__(
        self,
        store: SessionStore,
        emit: Emit | None = None,
        running_turn: RunningTurn | None = None,
    ) -> None:
        self.store = store
        self.emit = emit
        self.running_turn = running_turn

    async def call(self, args: dict[str, Any], session_id: str) -> dict[str, Any]:
        """One ``todo`` call for ``session_id``: its result (or error) as a dict."""
        if not session_id:
            return tool_error("the todo tool keeps a session's list and no session was given")
        merge = args.get("merge", False)
        if merge is None:
            merge = False
        if not isinstance(merge, bool):
            return tool_error(f"merge must be true or false, not {type(merge).__name__}")
        store = self.store
        raw = args.get("todos")
        if raw is None:
            return summary(await store.run(store.todos.get, session_id))
        try:
            items = read_items(raw, merge)
            before, after = await store.run(
                store.todos.change, session_id, lambda current: apply(current, items, merge)
            )
        except TodoError as exc:
            return tool_error(str(exc))
        result = summary(after)
        if after != before and self.emit is not None:
            turn = self.running_turn(session_id) if self.running_turn is not None else None
            self.emit({"type": EVENT, "session_id": session_id, "turn_id": turn, **result})
        return result

    async def slash(self, raw_args: str) -> str:
        """``/todo``: the calling session's list."""
        sid = current_session.get()
        if not sid:
            return "/todo needs a session: use it inside hermesctl chat, or pass session_id."
        return render(await self.store.run(self.store.todos.get, sid))


def register_todo(
    tools: ToolRegistry,
    commands: CommandRegistry,
    store: SessionStore,
    emit: Emit | None = None,
    running_turn: RunningTurn | None = None,
) -> TodoTool:
    """Register the ``todo`` tool and ``/todo`` (anyone who may use the session may read it)."""
    todo = TodoTool(store, emit, running_turn)

    async def handler(args: dict[str, Any], session_id: str = "", **_: Any) -> str:
        return json.dumps(await todo.call(args, session_id), ensure_ascii=False)

    tools.register(
        "todo", TOOLSET, SCHEMA, handler, emoji="📋", owner=BUILTIN, check_arguments=False
    )
    commands.register("todo", todo.slash, description="Show this session's task list", access="any")
    return todo
