"""A memory provider follows the conversation: ``/new``, ``/resume``, ``/undo`` and forks tell
the session's provider instance ``on_session_switch`` with the reference's arguments, and the
instance serves the session the conversation went on in. Drives the recorder provider
(tests/data/memory_providers/recorder) on a real daemon; see test_memory_providers.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hermesctl.client import Client
from tests.e2e.test_memory_providers import _calls, _home_with_recorder, _send, _wait_for
from tests.support.daemon import DaemonProcess, start_daemon
from tests.support.modelserver import ScriptedModelServer, model_config, reply


@pytest.fixture(scope="module")
def daemon(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = _home_with_recorder("recorder")
    process = start_daemon(home, config=model_config(model.url) + "memory:\n  provider: recorder\n")
    yield process
    process.stop()


@pytest.fixture
def client(daemon: DaemonProcess) -> Iterator[Client]:
    with daemon.client() as c:
        yield c


def _instance_calls(daemon: DaemonProcess, session_id: str) -> list[dict[str, Any]]:
    """Every call of the instance initialized for ``session_id``, wherever it moved."""
    return _calls(daemon, session_id)


def _switches(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in calls if c["method"] == "on_session_switch"]


def _turn(client: Client, model: ScriptedModelServer, sid: str, text: str) -> None:
    model.push(reply(f"ok: {text}"))
    _send(client, sid, text)


def test_new_ends_the_old_session_then_moves_the_instance_to_the_new_one(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    sid = client.call("session.create")["id"]
    client.call("session.attach", {"session_id": sid})
    _turn(client, model, sid, "before new")
    out = client.call("command.run", {"line": "/new", "session_id": sid})
    fresh = out["session"]["id"]
    calls = _wait_for(lambda: _switches(c := _instance_calls(daemon, sid)) and c, "the switch")
    methods = [c["method"] for c in calls]
    assert methods.index("queue_prefetch") < methods.index("on_session_end")
    assert methods.index("on_session_end") < methods.index("on_session_switch")
    [switch] = _switches(calls)
    assert switch["args"] == [fresh]
    assert switch["kwargs"] == {"parent_session_id": sid, "reset": True, "reason": "new_session"}
    assert "shutdown" not in methods  # the provider goes on, as the reference's does
    end = next(c for c in calls if c["method"] == "on_session_end")
    assert [m["content"] for m in end["args"][0]] == ["before new", "ok: before new"]

    _turn(client, model, fresh, "after new")
    later = _instance_calls(daemon, sid)[len(calls) :]
    assert "initialize" not in [c["method"] for c in later]  # the same instance, moved
    start = next(c for c in later if c["method"] == "on_turn_start")
    assert start["args"] == [1, "after new"]  # a new conversation counts its turns anew
    prefetch = next(c for c in later if c["method"] == "prefetch")
    assert prefetch["kwargs"] == {"session_id": fresh}


def test_resume_moves_the_instance_to_the_resumed_session(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    other = client.call("session.create")["id"]
    sid = client.call("session.create")["id"]
    _turn(client, model, sid, "first here")
    out = client.call("command.run", {"line": f"/resume {other}", "session_id": sid})
    assert out["session"]["id"] == other
    calls = _wait_for(lambda: _switches(c := _instance_calls(daemon, sid)) and c, "the switch")
    [switch] = _switches(calls)
    assert switch["args"] == [other]
    assert switch["kwargs"] == {"parent_session_id": sid, "reset": False, "reason": "resume"}
    assert "on_session_end" not in [c["method"] for c in calls]
    _turn(client, model, other, "now there")
    later = _wait_for(
        lambda: (
            (c := _instance_calls(daemon, sid)[len(calls) :])
            and "sync_turn" in [x["method"] for x in c]
            and c
        ),
        "the sync",
    )
    assert next(c for c in later if c["method"] == "on_turn_start")["args"] == [2, "now there"]
    assert next(c for c in later if c["method"] == "sync_turn")["kwargs"]["session_id"] == other


def test_undo_tells_the_provider_the_transcript_was_rewound(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    sid = client.call("session.create")["id"]
    _turn(client, model, sid, "to be undone")
    _wait_for(lambda: "queue_prefetch" in [c["method"] for c in _calls(daemon, sid)], "sync")
    client.call("command.run", {"line": "/undo", "session_id": sid})
    calls = _wait_for(lambda: _switches(c := _instance_calls(daemon, sid)) and c, "the switch")
    [switch] = _switches(calls)
    assert switch["args"] == [sid]
    assert switch["kwargs"] == {"parent_session_id": "", "reset": False, "rewound": True}


def test_a_fork_gets_an_instance_told_it_branched_from_its_parent(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    parent = client.call("session.create")["id"]
    _turn(client, model, parent, "the trunk")
    fork = client.call("session.fork", {"session_id": parent})["id"]
    _turn(client, model, fork, "the branch")
    calls = _instance_calls(daemon, fork)
    methods = [c["method"] for c in calls]
    assert methods[:2] == ["initialize", "on_session_switch"]
    assert calls[0]["kwargs"]["parent_session_id"] == parent
    assert calls[1]["args"] == [fork]
    assert calls[1]["kwargs"] == {"parent_session_id": parent, "reset": False, "reason": "branch"}
    assert methods.index("on_session_switch") < methods.index("on_turn_start")
    # the parent's own instance stays with the parent, untold
    assert not _switches(_instance_calls(daemon, parent))


def test_a_switch_of_a_session_without_a_provider_instance_tells_nobody(
    client: Client, daemon: DaemonProcess
) -> None:
    sid = client.call("session.create")["id"]
    client.call("session.attach", {"session_id": sid})
    before = len(_calls(daemon))
    fresh = client.call("session.reset", {"session_id": sid})["id"]
    client.call("session.delete", {"session_id": fresh})
    assert [c["method"] for c in _calls(daemon)[before:]] == []


def test_provider_threads_started_with_spawn_context_thread_keep_the_session(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    sid = client.call("session.create")["id"]
    _turn(client, model, sid, "which session am I in?")
    seen = {
        c["args"][0]: c["args"][1] for c in _calls(daemon, sid) if c["method"] == "thread_context"
    }
    assert seen["spawn_context_thread"] == sid
    assert seen["threading.Thread"] == ""  # a plain thread does not inherit the context


def test_a_provider_failing_at_a_switch_leaves_the_new_sessions_turn_whole(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    mode = daemon.home / "recorder-mode.json"
    sid = client.call("session.create")["id"]
    client.call("session.attach", {"session_id": sid})
    _turn(client, model, sid, "before")
    mode.write_text(json.dumps({"raise": ["on_session_end", "on_session_switch"]}))
    try:
        fresh = client.call("session.reset", {"session_id": sid})["id"]
        model.push(reply("Still fine."))
        assert _send(client, fresh, "after")["final_text"] == "Still fine."
        log = _wait_for(
            lambda: "'recorder' on_session_switch() failed" in (t := daemon.log()) and t, "log"
        )
        assert "Memory provider 'recorder' on_session_end() failed: RuntimeError" in log
    finally:
        mode.unlink()


def test_a_provider_hanging_at_a_switch_holds_the_next_turn_only_briefly(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    mode = daemon.home / "recorder-mode.json"
    sid = client.call("session.create")["id"]
    client.call("session.attach", {"session_id": sid})
    _turn(client, model, sid, "before")
    mode.write_text(json.dumps({"hang": ["on_session_end"]}))
    try:
        fresh = client.call("session.reset", {"session_id": sid})["id"]
        model.push(reply("Not held."))
        assert _send(client, fresh, "after")["final_text"] == "Not held."
        assert (
            f"Memory provider 'recorder' is still being told of the switch to session {fresh}"
            in daemon.log()
        )
    finally:
        mode.unlink()
