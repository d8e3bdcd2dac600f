"""What the model is sent of a session: stored messages in chat-completions form, trimmed to
the history budgets and repaired so every tool call has exactly one result.

Pure functions over lists of message dicts; ``hermesd.store.sessions`` calls them for
``history()``, and the crash tests use them to check what a session would send. Standard
library only.
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


def _size(msg: dict[str, Any]) -> int:
    calls = msg.get("tool_calls")
    return len(msg.get("content") or "") + (len(json.dumps(calls)) if calls else 0)


def trim_history(
    messages: list[dict[str, Any]], max_messages: int, max_chars: int
) -> list[dict[str, Any]]:
    """Keep the newest messages within both budgets, starting at a user message.

    Starting at a user message means a tool call is never separated from its results. When
    the budget ends inside the current turn, the whole turn is kept anyway.
    """
    start = max(0, len(messages) - max_messages)
    used = 0
    for i in range(len(messages) - 1, start - 1, -1):
        used += _size(messages[i])
        if used > max_chars:
            start = i + 1
            break
    for i in range(start, len(messages)):
        if messages[i].get("role") == "user":
            return messages[i:]
    for i in range(min(start, len(messages)) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return messages[i:]
    return messages[start:]


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
    return {"role": role, "content": record["content"] or ""}
