"""The ``todo`` tool and ``/todo`` on a real daemon: the scripted model plans, updates one
step by id, the list is shown by ``/todo``, sent to attached clients as ``todo.updated``, kept
across a restart, refused whole when the model sends garbage, and private to its session's
owner."""

from __future__ import annotations

import grp
import json
import os
import pwd
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from hermesd.rpc.protocol import Codes
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.otheruser import talk_as

NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid)

PLAN = [
    {"id": "1", "content": "Read the failing test", "status": "in_progress"},
    {"id": "2", "content": "Fix the parser", "status": "pending"},
    {"id": "3", "content": "Run the suite", "status": "pending"},
]


def _config(model: ScriptedModelServer) -> str:
    return (
        f"socket:\n  group: {NOGROUP.gr_name}\n"
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
    )


@pytest.fixture(scope="module")
def home() -> Path:
    return short_tmpdir("todo-")


@pytest.fixture(scope="module")
def daemon(model: ScriptedModelServer, home: Path) -> Iterator[DaemonProcess]:
    process = start_daemon(home, config=_config(model))
    yield process
    process.stop()


def _turn(
    model: ScriptedModelServer, client: Client, sid: str, *steps: Any
) -> tuple[list[str], list[dict[str, Any]]]:
    """One turn whose model answers with ``steps``: the tool results it was sent, and the
    turn's events (the client is attached to ``sid``)."""
    model.push(*steps)
    seen = len(model.requests)
    turn_id = client.call("session.send", {"session_id": sid, "message": "plan it"})["turn_id"]
    events = _events(client, turn_id)
    assert events[-1]["status"] == "completed", events[-1]
    last = model.requests[seen:][-1]
    return [m["content"] for m in last["messages"] if m["role"] == "tool"][-1:], events


def _events(client: Client, turn_id: str) -> list[dict[str, Any]]:
    """The session events a client attached to the turn's session received until the turn
    finished."""
    events: list[dict[str, Any]] = []
    while True:
        note = client.next_notification(timeout=60)
        assert note is not None, events
        if note.method != "session.event":
            continue
        events.append(note.params[0])
        if events[-1]["type"] == "turn.finished" and events[-1]["turn_id"] == turn_id:
            return events


def _todo(client: Client, sid: str) -> str:
    output: str = client.call("command.run", {"line": "/todo", "session_id": sid})["output"]
    return output


def _session(client: Client) -> str:
    sid: str = client.call("session.create")["id"]
    client.call("session.attach", {"session_id": sid})
    return sid


def test_the_model_plans_updates_by_id_and_todo_shows_it_after_a_restart(
    model: ScriptedModelServer, home: Path, daemon: DaemonProcess
) -> None:
    with daemon.client() as client:
        sid = _session(client)
        [written], events = _turn(
            model, client, sid, call_tools(tool_call("todo", {"todos": PLAN})), reply("planned")
        )
        assert json.loads(written) == {
            "todos": PLAN,
            "summary": {
                "total": 3,
                "pending": 2,
                "in_progress": 1,
                "completed": 0,
                "cancelled": 0,
            },
        }
        [event] = [e for e in events if e["type"] == "todo.updated"]
        assert event["todos"] == PLAN and event["summary"]["total"] == 3
        assert event["turn_id"] == events[-1]["turn_id"]  # a client following the turn sees it
        step = {"todos": [{"id": "1", "status": "completed"}], "merge": True}
        [merged], events = _turn(
            model, client, sid, call_tools(tool_call("todo", step)), reply("one done")
        )
        after = json.loads(merged)["todos"]
        assert after[0] == {"id": "1", "content": "Read the failing test", "status": "completed"}
        assert after[1:] == PLAN[1:]
        [event] = [e for e in events if e["type"] == "todo.updated"]
        assert event["todos"] == after
        [read], events = _turn(model, client, sid, call_tools(tool_call("todo", {})), reply("ok"))
        assert json.loads(read)["todos"] == after
        assert not [e for e in events if e["type"] == "todo.updated"]  # a read changes nothing
        shown = _todo(client, sid)
    assert "[x] 1. Read the failing test (completed)" in shown
    assert "[ ] 2. Fix the parser (pending)" in shown
    assert "3 items: 2 pending, 0 in progress, 1 completed, 0 cancelled" in shown
    daemon.stop()
    again = start_daemon(home, config=_config(model))
    try:
        with again.client() as client:
            assert _todo(client, sid) == shown
            fork = client.call("session.fork", {"session_id": sid})["id"]
            assert _todo(client, fork) == shown
            client.call("session.delete", {"session_id": sid})
            assert _todo(client, fork) == shown  # the fork's copy stays
    finally:
        again.stop()


@pytest.fixture(scope="module")
def live(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    process = start_daemon(config=_config(model))
    os.chmod(process.socket.parent, 0o755)
    yield process
    process.stop()


BAD = [
    ({"todos": "not a list"}, "todos must be a list"),
    ({"todos": {"id": "1"}}, "todos must be a list, not dict"),
    ({"todos": ["first"]}, "todos[0] must be an object, not str"),
    ({"todos": [{"content": "no id", "status": "pending"}]}, "todos[0] needs a non-empty"),
    ({"todos": [{"id": 7, "content": "x", "status": "pending"}]}, "todos[0].id must be a string"),
    ({"todos": [{"id": "9", "content": "x", "status": "done"}]}, "is not one of pending"),
    ({"todos": [{"id": "9", "content": "x" * 5000, "status": "pending"}]}, "the limit is 4000"),
    (
        {"todos": [{"id": str(n), "content": "x", "status": "pending"} for n in range(300)]},
        "todos has 300 items; the limit is 256",
    ),
    (
        {"todos": [{"id": "new", "status": "pending"}], "merge": True},
        "not in the list, so it needs",
    ),
    ({"todos": [{"id": "1", "status": "pending"}]}, "item '1' needs its content"),
    ({"todos": [], "merge": "yes"}, "merge must be true or false"),
]


def test_bad_input_is_refused_whole_and_loses_nothing(
    model: ScriptedModelServer, live: DaemonProcess
) -> None:
    with live.client() as client:
        sid = _session(client)
        _turn(model, client, sid, call_tools(tool_call("todo", {"todos": PLAN})), reply("ok"))
        before = _todo(client, sid)
        for args, message in BAD:
            [result], events = _turn(
                model, client, sid, call_tools(tool_call("todo", args)), reply("hm")
            )
            error = json.loads(result)
            assert message in error["error"] and error["success"] is False, (args, error)
            assert not [e for e in events if e["type"] == "todo.updated"]
            assert _todo(client, sid) == before


def test_another_users_session_list_is_not_reachable(
    model: ScriptedModelServer, live: DaemonProcess
) -> None:
    if os.geteuid() != 0:
        pytest.skip("switching uid needs root")
    with live.client() as client:
        sid = _session(client)
        _turn(model, client, sid, call_tools(tool_call("todo", {"todos": PLAN})), reply("ok"))
    frames = [
        [0, 0, "command.run", [{"line": "/todo", "session_id": sid}]],
        [0, 1, "tools.call", [{"name": "todo", "args": {}, "session_id": sid}]],
        [0, 2, "tools.call", [{"name": "todo", "args": {"todos": []}, "session_id": sid}]],
    ]
    out = talk_as(NOBODY.pw_uid, NOBODY.pw_gid, live.socket, frames)
    replies = {m[1]: (m[2], m[3]) for m in out["received"] if m[0] == 1}
    for n in range(3):
        assert replies[n][0]["code"] == Codes.NOT_FOUND, replies[n]
    with live.client() as client:
        assert "Read the failing test" in _todo(client, sid)  # the wipe did not happen
    own = talk_as(
        NOBODY.pw_uid, NOBODY.pw_gid, live.socket, [[0, 0, "command.run", [{"line": "/todo"}]]]
    )
    [(error, result)] = [(m[2], m[3]) for m in own["received"] if m[0] == 1]
    assert error is None and "needs a session" in result["output"]


def test_todo_outside_a_session_is_a_clear_error(live: DaemonProcess) -> None:
    with live.client() as client:
        result = json.loads(client.call("tools.call", {"name": "todo", "args": {}})["result"])
    assert "no session was given" in result["error"]


def test_hermesctl_chat_shows_the_plan_the_model_wrote(
    model: ScriptedModelServer, live: DaemonProcess
) -> None:
    evil = {"id": "4", "content": "Clean up\x1b[2J the screen", "status": "cancelled"}
    model.push(call_tools(tool_call("todo", {"todos": [*PLAN, evil]})), reply("planned"))
    result = run_hermesctl(["--socket", str(live.socket), "chat", "-m", "plan the fix"])
    assert result.returncode == 0, result.stderr
    assert "📋 plan" in result.stderr
    assert "  [>] Read the failing test\n  [ ] Fix the parser\n" in result.stderr
    assert "  [~] Clean up[2J the screen" in result.stderr  # the escape's ESC is dropped
    assert "\x1b[2J" not in result.stderr
