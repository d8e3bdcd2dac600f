"""hermesd's slash commands in an ACP thread: advertised with ``available_commands_update``,
run with ``command.run`` when a prompt starts with one.

A command that switches the caller to another session (``/new``, ``/reset``, ``/resume``) or
ends the client (``/quit``) has no meaning inside one editor thread: it is not advertised, and
typing it gets a sentence saying what to do in the editor instead.
"""

from __future__ import annotations

from typing import Any

from acp import schema

#: commands an editor thread does its own way
EDITOR_DOES_IT = {
    "new": "start a new thread in the editor",
    "reset": "start a new thread in the editor",
    "resume": "open the session from the editor's thread history",
    "quit": "close the thread in the editor",
}


def available(commands: list[dict[str, Any]]) -> Any:
    """``commands.list``'s answer as the update that advertises them."""
    shown = []
    for c in commands:
        if c.get("name") in EDITOR_DOES_IT:
            continue
        hint = str(c.get("args_hint") or "")
        shown.append(
            schema.AvailableCommand(
                name=str(c["name"]),
                description=str(c.get("description") or c["name"]),
                input=schema.AvailableCommandInput(root=schema.UnstructuredCommandInput(hint=hint))
                if hint
                else None,
            )
        )
    return schema.AvailableCommandsUpdate(
        session_update="available_commands_update", available_commands=shown
    )


def named(message: str, commands: list[dict[str, Any]]) -> str | None:
    """The command a prompt starts with (``/name`` or one of its aliases), else None: a prompt
    that merely starts with a slash (a path) goes to the model."""
    if not message.startswith("/"):
        return None
    word = message[1:].split(maxsplit=1)[0] if message[1:].strip() else ""
    for c in commands:
        if word == c.get("name") or word in (c.get("aliases") or ()):
            return str(c["name"])
    return None
