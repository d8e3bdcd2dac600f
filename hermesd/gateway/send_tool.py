"""The ``send_message`` tool (toolset ``messaging``): the model sends to a chat platform.

``action: send`` with ``target`` (``telegram``: its home channel, ``telegram:CHAT_ID``,
``telegram:CHAT_ID:THREAD_ID``, ``matrix:!room:server``) and ``message`` (``MEDIA:/path`` lines
send files); ``action: list`` names the running platforms and the chats seen. Only a turn of the
daemon's owner may send (a member's turn, or a tool's process, gets an error): a chat reaches
people the member may not speak to. Offered while at least one platform is connected; never in
cron runs or sub-agents (``messaging`` is off there).
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

from hermesd.caller import current_caller
from hermesd.gateway.core import Gateway
from hermesd.tools.registry import ToolRegistry

TOOLSET = "messaging"
SCHEMA = {
    "name": "send_message",
    "description": (
        "Send a message to a connected messaging platform, or list available targets. "
        "Target 'telegram' alone sends to its home channel."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["send", "list"]},
            "target": {
                "type": "string",
                "description": "'platform', 'platform:chat_id' or 'platform:chat_id:thread_id'",
            },
            "message": {
                "type": "string",
                "description": "The text; a line MEDIA:/path sends that file",
            },
        },
        "required": [],
    },
}

#: the owner uid of a session (None: the daemon's owner's)
OwnerOf = Callable[[str], Awaitable["int | None"]]


def register_send_message(tools: ToolRegistry, gateway: Gateway, owner_of: OwnerOf) -> None:
    """Register ``send_message`` over ``gateway``."""

    async def handler(args: dict[str, Any], session_id: str = "", **_: Any) -> str:
        if args.get("action") == "list":
            return json.dumps({"targets": _targets(gateway)})
        if not await _owners_turn(session_id, owner_of):
            return json.dumps({"error": "send_message is for the daemon owner's sessions only"})
        target, message = str(args.get("target") or ""), str(args.get("message") or "")
        if not target or not message.strip():
            return json.dumps({"error": "send_message needs a target and a message"})
        problem = await gateway.deliver(target, message)
        if problem:
            return json.dumps({"error": problem})
        return json.dumps({"success": True, "target": target})

    tools.register(
        "send_message",
        TOOLSET,
        SCHEMA,
        handler,
        check_fn=lambda: any(a.is_connected for a in gateway.platforms.adapters.values()),
        emoji="📨",
        check_arguments=False,
    )


async def _owners_turn(session_id: str, owner_of: OwnerOf) -> bool:
    caller = current_caller.get()
    if caller is not None:
        return caller.is_owner
    if not session_id:
        return False
    try:
        owner = await owner_of(session_id)
    except Exception:
        return False  # the session is unknown: nobody's
    return owner is None or owner in (os.geteuid(), 0)


def _targets(gateway: Gateway) -> list[str]:
    """The running platforms, then the chats seen since start (``platform:chat_id``)."""
    running = sorted(gateway.platforms.adapters)
    chats = {f"{c.source.platform.value}:{c.source.chat_id}" for c in gateway.chats.values()}
    return running + sorted(chats)
