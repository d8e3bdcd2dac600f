"""A scripted model that runs hostile terminal commands: what a prompt injection amounts to.

``hostile_turn`` makes the model call ``terminal`` once per command (all in one assistant turn)
and returns each tool result exactly as the model received it in its next request.
"""

from __future__ import annotations

import json
from typing import Any

from tests.support.approvals import Answering
from tests.support.daemon import DaemonProcess
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call


def hostile_turn(
    daemon: DaemonProcess,
    model: ScriptedModelServer,
    commands: list[str],
    *,
    timeout: float = 120.0,
    tool_timeout: int = 60,
    approve: str | None = None,
) -> list[str]:
    """Run ``commands`` through the model's terminal calls; their results as the model saw them.

    With ``approve`` the client that sends the turn answers every approval it is asked with it
    (the owner, attached to the session: it is asked only about the session's own calls)."""
    calls = [
        tool_call("terminal", {"command": c, "timeout": tool_timeout}, call_id=f"call_{i}")
        for i, c in enumerate(commands)
    ]
    seen = len(model.requests)
    model.push(call_tools(*calls), reply("done"))
    with daemon.client(timeout=timeout) as c:
        if approve is not None:
            c.on_request = Answering(approve)
        sid = c.call("session.create")["id"]
        done = c.call(
            "session.send", {"session_id": sid, "message": "go", "wait": True}, timeout=timeout
        )
    assert done["status"] == "completed", done
    request: dict[str, Any] = model.requests[seen + 1]
    results = {
        m["tool_call_id"]: m["content"]
        for m in request["messages"]
        if m.get("role") == "tool" and isinstance(m.get("content"), str)
    }
    return [results[f"call_{i}"] for i in range(len(commands))]


def output_of(result: str) -> str:
    """The ``output`` (or ``error``) text of a terminal result."""
    try:
        parsed = json.loads(result)
    except ValueError:
        return result
    if not isinstance(parsed, dict):
        return result
    return str(parsed.get("output") or "") + str(parsed.get("error") or "")
