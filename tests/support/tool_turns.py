"""A turn in which the scripted model makes tool calls: the results it was sent back."""

from __future__ import annotations

import json
from typing import Any

from hermesctl.client import Client
from tests.support.modelserver import ScriptedModelServer, ToolCall, call_tools, reply, tool_call


def wait_completed(client: Client, turn_id: str, timeout: float = 60) -> None:
    """Read ``client``'s notifications until turn ``turn_id`` finished; it must have
    completed."""
    while True:
        note = client.next_notification(timeout=timeout)
        assert note is not None, "the turn did not finish"
        event = note.params[0] if note.method == "session.event" else {}
        if event.get("type") == "turn.finished" and event.get("turn_id") == turn_id:
            assert event["status"] == "completed", event
            return


def tool_turn(
    model: ScriptedModelServer, client: Client, sid: str, *calls: tuple[str, dict[str, Any]]
) -> list[Any]:
    """One turn of session ``sid`` (``client`` attached) in which the model makes ``calls``
    then answers; each call's result, parsed from JSON."""
    model.push(call_tools(*(tool_call(n, a) for n, a in calls)), reply("done"))
    turn_id = client.call("session.send", {"session_id": sid, "message": "go"})["turn_id"]
    wait_completed(client, turn_id)
    messages = model.last_request["messages"]
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"][-len(calls) :]


def fresh_tool_turn(
    model: ScriptedModelServer, client: Client, *calls: ToolCall, message: str = "go"
) -> list[str]:
    """One turn in a new session ``client`` attaches to, the model making ``calls`` (a
    plugin's provider behind a tool, say) then answering; the tool results it was sent back,
    as text."""
    sid = client.call("session.create")["id"]
    client.call("session.attach", {"session_id": sid})
    model.push(call_tools(*calls), reply("done"))
    seen = len(model.requests)
    turn_id = client.call("session.send", {"session_id": sid, "message": message})["turn_id"]
    while True:
        note = client.next_notification(timeout=90)
        assert note is not None, "the turn did not finish"
        event = note.params[0] if note.method == "session.event" else {}
        if event.get("type") == "turn.finished" and event.get("turn_id") == turn_id:
            assert event["status"] == "completed", event
            break
    last = model.requests[seen:][-1]
    return [str(m["content"]) for m in last["messages"] if m["role"] == "tool"][-len(calls) :]
