"""Stored messages in chat-completions form, repaired so every tool call has exactly one result.

Pure functions over lists of message dicts; ``hermesd.store.compactions`` calls them to build
what the model is sent (``store.messages.history()``), and the crash tests use them to check what
a session would send. Nothing here drops a turn to save space: a session is made to fit its
model's window by a context engine (docs/sessions.md, "The view model"). Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

INTERRUPTED_RESULT = "Tool call interrupted (daemon restarted before it finished)"


def _tool_result(tool_call_id: str, reason: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": tool_call_id, "content": json.dumps({"error": reason})}


def repair_history(
    messages: list[dict[str, Any]], reason: str = INTERRUPTED_RESULT
) -> list[dict[str, Any]]:
    """Make an OpenAI message list valid: every tool call answered, no stray tool results.

    A tool call without a result (crash or cancel mid-tool) gets a synthetic error result right
    after the results it does have; a tool result that answers no pending call is dropped.
    """
    out: list[dict[str, Any]] = []
    pending: dict[str, None] = {}

    def close_pending() -> None:
        out.extend(_tool_result(call_id, reason) for call_id in pending)
        pending.clear()

    for msg in messages:
        if msg.get("role") == "tool":
            call_id = msg.get("tool_call_id")
            if call_id in pending:
                del pending[call_id]
                out.append(msg)
            continue
        close_pending()
        out.append(msg)
        if msg.get("role") == "assistant":
            for call in msg.get("tool_calls") or ():
                pending[str(call.get("id"))] = None
    close_pending()
    return out


def to_openai(record: Mapping[str, Any]) -> dict[str, Any]:
    """Only the fields a chat-completions request accepts."""
    role = record["role"]
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": record["tool_call_id"],
            "content": record["content"] or "",
        }
    if role == "assistant" and record["tool_calls"]:
        return {
            "role": "assistant",
            "content": record["content"] or None,
            "tool_calls": record["tool_calls"],
        }
    pictures = record.get("images")
    if role == "user" and pictures:  # OpenAI content parts: the text, then each image
        return {
            "role": role,
            "content": [
                {"type": "text", "text": record["content"] or ""},
                *({"type": "image_url", "image_url": {"url": i["url"]}} for i in pictures),
            ],
        }
    return {"role": role, "content": record["content"] or ""}
