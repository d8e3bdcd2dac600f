"""Background processes that wake their session, and ``pty``, on a real daemon.

``notify_on_complete``: a process ending while its session is idle starts a turn whose request
carries the notice (marked as the process's, its output untrusted; ``hermesctl sessions show``
lists it with the answer); one ending while a turn runs is told in a turn of its own once that
turn is over; a ``wait`` that read the ending leaves nothing to tell; a kill by a person
(``hermesctl processes --kill``) is told, naming it. ``watch_patterns``: a matching line of
output wakes the session. ``pty``: the command sees a terminal, under bubblewrap and under
Landlock, and is as confined as ever (no ``~/.ssh``, no Unix socket to the daemon). Bad
arguments get clear errors.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from tests.support.approvals import tool
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, Step, reply
from tests.support.tool_turns import tool_turn

Start = Callable[..., DaemonProcess]
MECHANISMS = ["bwrap", "landlock"]
KEY = f"ssh-private-{secrets.token_hex(8)}"


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    """A model of this test's own (some tests give it rules)."""
    with ScriptedModelServer() as server:
        yield server


def _daemon(start: Start, model: ScriptedModelServer, mechanism: str = "bwrap") -> DaemonProcess:
    config = (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        f"sandbox:\n  mechanism: {mechanism}\n"
    )
    daemon = start(config=config)
    assert daemon.call("status")["sandbox"]["mechanism"] == mechanism
    return daemon


def _session(client: Client) -> str:
    sid: str = client.call("session.create")["id"]
    client.call("session.attach", {"session_id": sid})
    return sid


def _next_turn(client: Client, sid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The turn.started and turn.finished events of the next turn of ``sid``."""
    started: dict[str, Any] | None = None
    while True:
        note = client.next_notification(timeout=60)
        assert note is not None, "no turn started"
        event = note.params[0] if note.method == "session.event" else {}
        if event.get("session_id") != sid:
            continue
        if event.get("type") == "turn.started" and started is None:
            started = event
        elif started is not None and event == {**event, "type": "turn.finished", **same(started)}:
            return started, event


def same(started: dict[str, Any]) -> dict[str, Any]:
    """The fields another event of the same turn shares with its turn.started."""
    return {"turn_id": started["turn_id"]}


def _user_text(request: dict[str, Any]) -> str:
    """The last user message of a model request."""
    return str([m for m in request["messages"] if m["role"] == "user"][-1]["content"])


def _submit(client: Client, sid: str, pid: str, data: str) -> None:
    args = {"action": "submit", "session_id": pid, "data": data}
    assert tool(client, "process", args, sid)["status"] == "ok"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_process_ending_while_the_session_is_idle_starts_a_turn_with_its_notice(
    model: ScriptedModelServer, start: Start, mechanism: str
) -> None:
    daemon = _daemon(start, model, mechanism)
    with daemon.client(timeout=60) as client:
        sid = _session(client)
        args = {
            "command": "read x; echo got:$x; exit 3",
            "background": True,
            "notify_on_complete": True,
        }
        [started] = tool_turn(model, client, sid, ("terminal", args))
        pid = started["session_id"]
        assert started["notify_on_complete"] is True and "hint" not in started
        model.push(reply("noted"))
        _submit(client, sid, pid, "hello")
        began, finished = _next_turn(client, sid)
    notice = _user_text(model.last_request)
    assert began["user_message"] == notice and finished["status"] == "completed"
    assert notice.startswith(f"[Notice from background process {pid}, not from the user")
    assert "exit code 3" in notice and "Command: read x" in notice
    assert f'<untrusted-data source="process:{pid}">' in notice and "got:hello" in notice
    shown = run_hermesctl(["--socket", str(daemon.socket), "sessions", "show", sid]).stdout
    assert f"Notice from background process {pid}" in shown and "noted" in shown


def test_a_process_ending_during_a_turn_is_told_after_that_turn(
    model: ScriptedModelServer, start: Start
) -> None:
    daemon = _daemon(start, model)
    ended = threading.Event()

    def after_the_exit(request: dict[str, Any]) -> Step:
        ended.wait(60)  # the turn's last answer waits until the process has ended
        return reply("answered")

    with daemon.client(timeout=60) as client:
        sid = _session(client)
        args = {"command": "read x; echo bye", "background": True, "notify_on_complete": True}
        [started] = tool_turn(model, client, sid, ("terminal", args))
        pid = started["session_id"]
        model.rules = after_the_exit
        seen = len(model.requests)
        turn = client.call("session.send", {"session_id": sid, "message": "carry on"})
        _submit(client, sid, pid, "now")
        with daemon.client(timeout=60) as other:
            listed = lambda: other.call("process.list", {"session_id": sid})["processes"]  # noqa: E731
            while listed()[0]["status"] == "running":
                other.call("status")  # a round trip: no sleep, no timing
        ended.set()
        first, first_end = _next_turn(client, sid)
        assert first["turn_id"] == turn["turn_id"] and first_end["status"] == "completed"
        assert _user_text(model.requests[seen]) == "carry on"  # no notice inside the turn
        second, _ = _next_turn(client, sid)
    assert second["user_message"].startswith(f"[Notice from background process {pid}")
    assert "bye" in second["user_message"] and "exit code 0" in second["user_message"]
    assert _user_text(model.last_request) == second["user_message"]


def test_a_wait_that_read_the_ending_leaves_no_notice(
    model: ScriptedModelServer, start: Start
) -> None:
    daemon = _daemon(start, model)
    with daemon.client(timeout=60) as client:
        sid = _session(client)
        args = {"command": "read x; echo bye", "background": True, "notify_on_complete": True}
        [started] = tool_turn(model, client, sid, ("terminal", args))
        pid = started["session_id"]
        [_, waited] = tool_turn(
            model,
            client,
            sid,
            ("process", {"action": "submit", "session_id": pid, "data": "x"}),
            ("process", {"action": "wait", "session_id": pid}),
        )
        assert waited["status"] == "exited" and "bye" in waited["output"]
        seen = len(model.requests)
        [listed] = tool_turn(model, client, sid, ("process", {"action": "list"}))
    assert listed["processes"][0]["notify_on_complete"] is True
    assert all("Notice from background" not in _user_text(r) for r in model.requests[seen:])


def test_a_watch_pattern_match_wakes_the_session(model: ScriptedModelServer, start: Start) -> None:
    daemon = _daemon(start, model)
    with daemon.client(timeout=60) as client:
        sid = _session(client)
        args = {
            "command": "echo starting; read x; echo server READY on 8080; read y",
            "background": True,
            "watch_patterns": ["READY", "FAILED"],
        }
        [started] = tool_turn(model, client, sid, ("terminal", args))
        pid = started["session_id"]
        assert started["watch_patterns"] == ["READY", "FAILED"]
        model.push(reply("it is up"))
        _submit(client, sid, pid, "go")
        began, _ = _next_turn(client, sid)
        notice = began["user_message"]
        assert notice.startswith(f"[Notice from background process {pid}, not from the user")
        assert 'watch pattern "READY"' in notice and "server READY on 8080" in notice
        lines = notice.split("Matching lines:")[1]
        assert "starting" not in lines and f'source="process:{pid}"' in lines
        [listed] = tool_turn(model, client, sid, ("process", {"action": "list"}))
        assert listed["processes"][0]["watch_hit"] is True
        tool(client, "process", {"action": "kill", "session_id": pid}, sid)


def _fake_home() -> Path:
    home = short_tmpdir("pty-") / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "id_ed25519").write_text(f"{KEY}\n")
    return home


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_pty_process_sees_a_terminal_and_stays_confined(
    model: ScriptedModelServer, start: Start, mechanism: str
) -> None:
    home = _fake_home()
    config = (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        f"sandbox:\n  mechanism: {mechanism}\napprovals:\n  mode: 'off'\n"
    )
    daemon = start(config=config, env={"HOME": str(home)})
    reach = (
        "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); "
        f's.connect(sys.argv[1]); print("REACHED")\' {daemon.socket}'
    )
    command = (
        "tty && echo tty-ok; test -t 0 && test -t 1 && echo is-a-terminal; "
        f"cat ~/.ssh/id_ed25519; {reach}; read line; echo got:$line"
    )
    with daemon.client(timeout=60) as client:
        sid = _session(client)
        args = {"command": command, "background": True, "pty": True}
        [started] = tool_turn(model, client, sid, ("terminal", args))
        pid = started["session_id"]
        [wrote, waited] = tool_turn(
            model,
            client,
            sid,
            ("process", {"action": "submit", "session_id": pid, "data": "typed"}),
            ("process", {"action": "wait", "session_id": pid, "timeout": 60}),
        )
        [listed] = tool_turn(model, client, sid, ("process", {"action": "list"}))
    assert wrote["status"] == "ok" and waited["status"] == "exited"
    output = waited["output"]
    assert "tty-ok" in output and "is-a-terminal" in output and "got:typed" in output
    assert KEY not in output and "REACHED" not in output
    assert listed["processes"][0]["pty"] is True


def test_close_on_a_pty_types_end_of_file(model: ScriptedModelServer, start: Start) -> None:
    daemon = _daemon(start, model)
    with daemon.client(timeout=60) as client:
        sid = _session(client)
        args = {"command": "cat >/dev/null; echo input-ended", "background": True, "pty": True}
        [started] = tool_turn(model, client, sid, ("terminal", args))
        pid = started["session_id"]
        closed, waited = tool_turn(
            model,
            client,
            sid,
            ("process", {"action": "close", "session_id": pid}),
            ("process", {"action": "wait", "session_id": pid, "timeout": 60}),
        )
    assert closed == {"status": "ok", "message": "EOF sent"}
    assert waited["status"] == "exited" and "input-ended" in waited["output"]


def test_bad_notice_and_pty_arguments_get_clear_errors(
    model: ScriptedModelServer, start: Start
) -> None:
    daemon = _daemon(start, model)
    background = {"command": "sleep 600", "background": True}
    with daemon.client(timeout=60) as client:
        sid = _session(client)
        results = tool_turn(
            model,
            client,
            sid,
            ("terminal", {**background, "watch_patterns": "READY"}),
            ("terminal", {**background, "watch_patterns": ["ok", ""]}),
            ("terminal", {**background, "watch_patterns": ["x"] * 17}),
            ("terminal", {**background, "notify_on_complete": "yes"}),
            ("terminal", {**background, "pty": 1}),
            ("terminal", {**background, "notify_on_complete": True, "watch_patterns": ["a"]}),
        )
        for result in results[5:]:
            tool(client, "process", {"action": "kill", "session_id": result["session_id"]}, sid)
    assert "'watch_patterns' must be array" in results[0]["error"]  # the schema's check
    assert "empty string" in results[1]["error"]
    assert "at most 16 patterns" in results[2]["error"]
    assert "'notify_on_complete'" in results[3]["error"]
    assert "'pty'" in results[4]["error"]
    assert "watch_patterns are ignored" in results[5]["watch_patterns_ignored"]
    assert results[5]["notify_on_complete"] is True and "watch_patterns" not in results[5]


def test_a_process_a_person_kills_tells_the_session_who_did(
    model: ScriptedModelServer, start: Start
) -> None:
    daemon = _daemon(start, model)
    with daemon.client(timeout=60) as client:
        sid = _session(client)
        args = {
            "command": "echo working; sleep 600",
            "background": True,
            "notify_on_complete": True,
        }
        [started] = tool_turn(model, client, sid, ("terminal", args))
        pid = started["session_id"]
        model.push(reply("it was stopped"))
        socket = ["--socket", str(daemon.socket)]
        assert run_hermesctl([*socket, "processes", sid, "--kill", pid]).returncode == 0
        began, _ = _next_turn(client, sid)
    notice = began["user_message"]
    assert notice.startswith(f"[Notice from background process {pid}")
    assert "was killed by process.kill (client)" in notice and "working" in notice
