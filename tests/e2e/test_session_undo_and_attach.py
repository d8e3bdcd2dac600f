"""``session.undo``, ``session.attach`` with ``after_seq`` and the chat commands built on them,
at their edges: wrong input gets a structured error and the daemon keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.daemon import (
    DaemonProcess,
    follow_turn,
    send_and_follow,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import ScriptedModelServer, calculator_rules, model_config, reply


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=calculator_rules) as server:
        yield server


@pytest.fixture(scope="module")
def d(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    daemon = start_daemon(short_tmpdir(), config=model_config(model.url))
    yield daemon
    daemon.stop()


def command(d: DaemonProcess, line: str, sid: str) -> dict[str, Any]:
    result: dict[str, Any] = d.call("command.run", {"line": line, "session_id": sid})
    return result


def test_undo_of_an_unknown_session_is_not_found(d: DaemonProcess) -> None:
    with pytest.raises(RpcError) as err:
        d.call("session.undo", {"session_id": "no-such-session"})
    assert err.value.code == Codes.NOT_FOUND
    assert d.call("ping")["pong"] is True


def test_undo_with_nothing_left_undoes_nothing(d: DaemonProcess) -> None:
    sid = d.call("session.create")["id"]
    assert d.call("session.undo", {"session_id": sid}) == {
        "undone": [],
        "user_message": None,
        "user_images": [],
    }
    result = command(d, "/undo", sid)
    assert result["ok"] is False and "Nothing to undo" in result["output"]
    assert command(d, "/retry", sid)["ok"] is False


def test_undo_while_a_turn_runs_is_session_busy(
    d: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("slowly", delay=1.0))
    with d.client() as c:
        sid = c.call("session.create")["id"]
        started = c.call("session.send", {"session_id": sid, "message": "wait for me"})
        with pytest.raises(RpcError) as err:
            c.call("session.undo", {"session_id": sid})
        assert err.value.code == Codes.SESSION_BUSY
        follow_turn(c, started["turn_id"])
    history = d.call("session.history", {"session_id": sid})["messages"]
    assert [m["undone"] for m in history] == [False, False]


def test_undo_twice_takes_two_turns_back_and_a_fork_keeps_the_marks(d: DaemonProcess) -> None:
    with d.client() as c:
        sid = c.call("session.create")["id"]
        for text in ("one", "two", "three"):
            send_and_follow(c, sid, text)
    assert d.call("session.undo", {"session_id": sid})["user_message"] == "three"
    assert d.call("session.undo", {"session_id": sid})["user_message"] == "two"
    fork = d.call("session.fork", {"session_id": sid})["id"]
    marks = [
        (m["content"], m["undone"])
        for m in d.call("session.history", {"session_id": fork})["messages"]
        if m["role"] == "user"
    ]
    assert marks == [("one", False), ("two", True), ("three", True)]


@pytest.mark.parametrize("after_seq", ["ten", [1], {"a": 1}])
def test_attach_with_an_after_seq_that_is_not_an_int_is_invalid_params(
    d: DaemonProcess, after_seq: Any
) -> None:
    sid = d.call("session.create")["id"]
    with pytest.raises(RpcError) as err:
        d.call("session.attach", {"session_id": sid, "after_seq": after_seq})
    assert err.value.code == Codes.INVALID_PARAMS
    assert d.call("ping")["pong"] is True


def test_attach_with_a_negative_after_seq_replays_what_is_kept_and_says_it_is_not_all(
    d: DaemonProcess,
) -> None:
    with d.client() as c:
        sid = c.call("session.create")["id"]
        events = send_and_follow(c, sid, "count me")
    attached = d.call("session.attach", {"session_id": sid, "after_seq": -5})
    assert [e["seq"] for e in attached["missed"]] == [e["seq"] for e in events]
    assert attached["missed_complete"] is False


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("/history many", "usage: /history [N]"),
        ("/config no.such.setting", "No setting 'no.such.setting'"),
    ],
)
def test_chat_commands_with_bad_arguments_say_what_is_wrong(
    d: DaemonProcess, line: str, says: str
) -> None:
    sid = d.call("session.create")["id"]
    result = command(d, line, sid)
    assert result["ok"] is False and says in result["output"]


def test_resume_of_an_unknown_session_is_not_found(d: DaemonProcess) -> None:
    sid = d.call("session.create")["id"]
    with pytest.raises(RpcError) as err:
        command(d, "/resume zzz-not-a-session", sid)
    assert err.value.code == Codes.NOT_FOUND
    assert d.call("ping")["pong"] is True


def test_undo_needs_a_session(d: DaemonProcess) -> None:
    result = d.call("command.run", {"line": "/undo"})
    assert result["ok"] is False and "needs a session" in result["output"]
