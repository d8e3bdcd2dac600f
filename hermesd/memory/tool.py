"""The ``memory`` tool (toolset ``memory``): its schema, its argument checks, its registration.

Registered through `ToolRegistry.register` like any plugin tool, with ``check_arguments=False``:
the reference answers a bad target or a missing ``old_text`` with its own sentences, which the
model is used to, so `read_call` checks the arguments and words the errors that way; arguments
of the wrong JSON type get the registry's usual message. What a valid call does is the
built-in memory's business (`hermesd.memory.builtin.BuiltinMemory.tool_call`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hermesd.tools.registry import BUILTIN, ToolRegistry
from hermesd.tools.schema import check_args

if TYPE_CHECKING:
    from hermesd.memory.builtin import BuiltinMemory

TOOLSET = "memory"
ACTIONS = ("add", "replace", "remove")
UNAVAILABLE = "Memory is not available. It may be disabled in config or this environment."

_OP_ITEM = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "content": {"type": "string", "description": "The entry's text, for add and replace."},
        "old_text": {
            "type": "string",
            "description": "A short piece of the existing entry's text, for replace and remove.",
        },
    },
    "required": ["action"],
}

MEMORY_SCHEMA: dict[str, Any] = {
    "name": "memory",
    "description": (
        "Keep facts that should still be known in later sessions. Saved entries are shown to "
        "you at the start of every new session, so keep each one short and worth its space.\n\n"
        "Prefer one call with an 'operations' list ({action, content?, old_text?} each): the "
        "list is applied all at once and the size limit is checked only after the last "
        "operation, so stale entries can be removed or shortened and new ones added in the "
        "same call. The result reports the size used and says when the change is complete; "
        "do not send it again. The plain action/content/old_text fields are for a single "
        "change.\n\n"
        "Save without being asked when the user states a preference, corrects you or tells "
        "you about themselves, or when you learn a lasting fact about their environment or "
        "conventions. Preferences and corrections matter most.\n\n"
        "Targets: 'user' for who the user is (name, role, preferences, style); 'memory' for "
        "your own notes (environment, conventions, tool quirks, lessons).\n\n"
        "Do not save trivia, facts that are easy to look up again, task progress, logs of "
        "finished work or temporary to-dos."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": list(ACTIONS),
                "description": "What to do, for a single change; leave out with 'operations'.",
            },
            "target": {
                "type": "string",
                "enum": ["memory", "user"],
                "description": "'memory' for your notes, 'user' for the user's profile.",
            },
            "content": {
                "type": "string",
                "description": "The entry's text; needed by 'add' and 'replace'.",
            },
            "old_text": {
                "type": "string",
                "description": "Needed by 'replace' and 'remove': a short piece of text found "
                "in exactly one existing entry, naming the entry to change.",
            },
            "operations": {
                "type": "array",
                "description": "Several changes applied together, all or none, checked "
                "against the size limit once at the end. Each item is {action, content?, "
                "old_text?}.",
                "items": _OP_ITEM,
            },
        },
        "required": ["target"],
    },
}

# The types alone: a value outside an enum is answered in the reference's words, not here.
_TYPES_ONLY: dict[str, Any] = {
    "type": "object",
    "properties": {
        name: {"type": spec["type"]}
        for name, spec in MEMORY_SCHEMA["parameters"]["properties"].items()
        if name not in ("target", "operations")
    },
}


def tool_error(message: str) -> dict[str, Any]:
    """An error result shaped as the reference's ``tool_error(message, success=False)``."""
    return {"error": message, "success": False}


@dataclass
class MemoryCall:
    """A checked call: a single change, a batch, or a replace/remove lacking ``old_text``."""

    target: str
    action: str  # add | replace | remove | batch
    content: str = ""
    old_text: str = ""
    operations: list[Any] = field(default_factory=list)
    missing_old_text: bool = False

    def payload(self) -> dict[str, Any]:
        """What a staged write keeps (the reference's payload shape)."""
        if self.action == "batch":
            return {"action": "batch", "target": self.target, "operations": self.operations}
        return {
            "action": self.action,
            "target": self.target,
            "content": self.content or None,
            "old_text": self.old_text or None,
        }


def read_call(args: dict[str, Any]) -> MemoryCall | dict[str, Any]:
    """The call ``args`` ask for, or the error result to return, in the reference's order."""
    target = args.get("target")
    if target is None:  # strict providers send null for "not given"
        target = "memory"
    if target not in ("memory", "user"):
        return tool_error(f"Invalid target '{target}'. Use 'memory' or 'user'.")
    operations = args.get("operations")
    if operations:
        if not isinstance(operations, list):
            return tool_error("operations must be a list of {action, content?, old_text?} objects.")
        return MemoryCall(target, "batch", operations=operations)
    problem = check_args(_TYPES_ONLY, args)
    if problem is not None:
        return {"error": f"Invalid arguments for tool 'memory': {problem}"}
    action = args.get("action") or ""
    content = args.get("content") or ""
    old_text = args.get("old_text") or ""
    if action == "add" and not content:
        return tool_error("Content is required for 'add' action.")
    if action in ("replace", "remove") and not old_text:
        return MemoryCall(target, action, missing_old_text=True)
    if action == "replace" and not content:
        return tool_error("content is required for 'replace' action.")
    if action not in ACTIONS:
        return tool_error(f"Unknown action '{action}'. Use: add, replace, remove")
    return MemoryCall(target, action, content=content, old_text=old_text)


def register_memory_tool(registry: ToolRegistry, service: BuiltinMemory) -> None:
    """Register ``memory`` backed by ``service``; hidden while both stores are switched off."""

    async def memory(
        args: dict[str, Any],
        session_id: str = "",
        task_id: str = "",
        tool_call_id: str = "",
        **_: Any,
    ) -> str:
        result = await service.tool_call(
            args, session_id=session_id, task_id=task_id, tool_call_id=tool_call_id
        )
        return json.dumps(result, ensure_ascii=False)

    registry.register(
        "memory",
        TOOLSET,
        MEMORY_SCHEMA,
        memory,
        check_fn=service.available,
        emoji="🧠",
        owner=BUILTIN,
        check_arguments=False,
    )
