"""``execute_code`` on a real daemon through real turns: the scripted model sends a Python script,
the script runs in the tool sandbox and calls tools over its channel (through the same pipeline
as the model's calls: approvals asked of the session's client), and each bound holds: tool
calls, time, output. Bad input: a syntax error, an unknown tool, malformed frames on the
channel, the daemon's socket, a write outside the workspace, arguments of the wrong type."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from tests.support.approvals import Background, client_answering, tool, wait_pending
from tests.support.cron import HOUR, advance, start_cron
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.tool_turns import tool_turn

TIMEOUT = 8  # code_execution.timeout of this module's daemon
MAX_CALLS = 4


@pytest.fixture(scope="module")
def daemon(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    config = (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        f"code_execution:\n  timeout: {TIMEOUT}\n  max_tool_calls: {MAX_CALLS}\n"
        "  max_output_bytes: 2000\n"
    )
    process = start_daemon(short_tmpdir("xc-"), config=config)
    yield process
    process.stop()


def _workspace(daemon: DaemonProcess) -> Path:
    return Path(os.path.realpath(daemon.home / "workspace"))


def _turn(model: ScriptedModelServer, client: Client, sid: str, args: dict[str, Any]) -> Any:
    """One turn in which the model calls execute_code with ``args``; the result it got."""
    return tool_turn(model, client, sid, ("execute_code", args))[0]


def _run(model: ScriptedModelServer, daemon: DaemonProcess, code: str, **kw: Any) -> Any:
    with daemon.client(timeout=60) as client:
        sid = client.call("session.create")["id"]
        client.call("session.attach", {"session_id": sid})
        return _turn(model, client, sid, {"code": textwrap.dedent(code), **kw})


def test_a_script_calls_tools_and_prints_its_result(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    result = _run(
        model,
        daemon,
        """
        import hermes_tools
        from hermes_tools import read_file, terminal, write_file
        print(sorted(n for n in dir(hermes_tools) if not n.startswith("_") and n.islower()))
        write_file(path="notes.txt", content="alpha\\nbeta\\n")
        seen = read_file(path="notes.txt")
        ran = terminal(command="wc -l < notes.txt")
        print("lines", seen["total_lines"], ran["output"].strip(), ran["exit_code"])
        """,
    )
    assert result["status"] == "success", result
    assert result["exit_code"] == 0 and result["tool_calls_made"] == 3
    names, counted = result["output"].splitlines()
    for name in ("read_file", "write_file", "search_files", "terminal", "json_parse", "retry"):
        assert name in names
    assert "memory" not in names and "todo" not in names  # only the sandbox's list
    assert counted == "lines 2 2 0"
    assert (_workspace(daemon) / "notes.txt").read_text() == "alpha\nbeta\n"
    assert {"duration_seconds", "stdout_truncated", "stdout_bytes_total"} <= result.keys()


def test_the_tool_call_limit_refuses_calls_past_it(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    result = _run(
        model,
        daemon,
        f"""
        from hermes_tools import terminal
        for n in range({MAX_CALLS + 2}):
            print(n, terminal(command="echo ok").get("error", "ran"))
        """,
    )
    assert result["status"] == "success" and result["tool_calls_made"] == MAX_CALLS
    lines = result["output"].splitlines()
    assert all(line.endswith("ran") for line in lines[:MAX_CALLS])
    assert f"Tool call limit reached ({MAX_CALLS})" in lines[MAX_CALLS]


def test_a_script_past_its_time_is_killed_and_leaves_nothing_running(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    marker = "spin-" + os.urandom(4).hex()
    result = _run(
        model,
        daemon,
        f"""
        import subprocess
        subprocess.Popen(["/bin/sh", "-c", "sleep 600; echo {marker}"])  # a child left behind
        print("{marker}", flush=True)
        while True:
            pass
        """,
    )
    assert result["status"] == "timeout", result
    assert f"timed out after {TIMEOUT}s" in result["error"]
    assert result["output"].startswith(marker)
    assert not _processes_with(f"{marker}")


def test_huge_output_is_cut_to_its_head_and_tail(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    result = _run(model, daemon, "print('H' * 100 + 'x' * 1_000_000 + 'T' * 100)")
    assert result["status"] == "success"
    assert result["stdout_truncated"] is True
    assert result["stdout_bytes_total"] == 1_000_201
    assert result["stdout_bytes_captured"] == 2000
    assert result["output"].startswith("H" * 100) and result["output"].rstrip().endswith("T" * 100)
    assert "bytes of output left out" in result["output"]


def test_a_syntax_error_is_reported_with_its_line(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    result = _run(model, daemon, "x = 1\ndef broken(:\n    pass\n")
    assert result["status"] == "error" and result["exit_code"] == 1
    assert "SyntaxError" in result["error"] and 'File "script.py", line 2' in result["error"]


def test_a_tool_outside_the_list_is_refused(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    result = _run(
        model,
        daemon,
        """
        import hermes_tools
        print(hermes_tools._channel.call("memory", {"action": "add", "content": "x"}))
        """,
    )
    assert result["status"] == "success" and result["tool_calls_made"] == 0
    assert "Tool 'memory' is not available in execute_code" in result["output"]


def test_malformed_frames_get_errors_and_an_oversized_one_closes_the_channel(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    result = _run(
        model,
        daemon,
        """
        import os, struct
        from hermes_tools import _channel, terminal
        for body in (b"not json", b"[1, 2]", b'{"id": 7, "tool": 3, "args": {}}'):
            os.write(_channel.out_fd, struct.pack(">I", len(body)) + body)
            print(_channel.receive())
        print(terminal(command="echo still-served")["output"].strip())
        os.write(_channel.out_fd, struct.pack(">I", 2**31))
        try:
            terminal(command="echo after")
        except Exception as exc:
            print("closed:", type(exc).__name__)
        """,
    )
    lines = result["output"].splitlines()
    assert "not UTF-8 JSON" in lines[0]
    assert "not a JSON object" in lines[1]
    assert "'id': 7" in lines[2] and "needs 'tool'" in lines[2]
    assert lines[3] == "still-served"
    assert lines[4] == "closed: ChannelClosed"
    assert result["tool_calls_made"] == 1
    assert "over the" in result["tool_channel_error"]


def test_the_script_cannot_reach_the_daemon_socket_or_write_outside_the_workspace(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    outside = short_tmpdir("xco-")
    result = _run(
        model,
        daemon,
        f"""
        import socket
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect({str(daemon.socket)!r})
            print("connected")
        except OSError as exc:
            print("socket:", type(exc).__name__)
        try:
            open({str(Path.home() / ".hermesd-xc-escape")!r}, "w").write("x")
            print("wrote home")
        except OSError:
            print("home: refused")
        try:
            open({str(outside / "escaped")!r}, "w").write("x")
        except OSError:
            pass  # bubblewrap: not even there (a /tmp of its own); Landlock: refused
        """,
    )
    assert result["output"].splitlines() == ["socket: PermissionError", "home: refused"]
    assert not (Path.home() / ".hermesd-xc-escape").exists()
    assert not (outside / "escaped").exists()  # the sandbox's /tmp is its own


def test_an_approval_asked_inside_a_script_reaches_the_person(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    for choice, kept in (("deny", True), ("once", False)):
        victim = _workspace(daemon) / f"victim-{choice}"
        (victim / "inner").mkdir(parents=True)
        client, answering = client_answering(daemon, choice)
        with client:
            sid = client.call("session.create")["id"]
            client.call("session.attach", {"session_id": sid})
            code = f"from hermes_tools import terminal\nprint(terminal(command='rm -r {victim}'))"
            result = _turn(model, client, sid, {"code": code})
        [asked] = [r for r in answering.requests if r["method"] == "approval.request"]
        assert f"rm -r {victim}" in json.dumps(asked)
        assert victim.exists() is kept, (choice, result)
        assert result["status"] == "success"
        if kept:
            assert "BLOCKED" in result["output"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "'code' is required"),
        ({"code": "   "}, "'code' is required"),
        ({"code": 42}, "'code' is required"),
        ({"code": "x" * 200_001}, "the limit is 200000"),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_error(
    model: ScriptedModelServer, daemon: DaemonProcess, args: dict[str, Any], message: str
) -> None:
    with daemon.client(timeout=60) as client:
        sid = client.call("session.create")["id"]
        client.call("session.attach", {"session_id": sid})
        result = _turn(model, client, sid, args)
    assert message in result["error"]


def _processes_with(marker: str) -> list[int]:
    """The pids whose command line contains ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(name))
    return found


@pytest.mark.parametrize(("mechanism", "network"), [("landlock", "on"), ("bwrap", "allowlist")])
def test_the_channel_works_under_landlock_and_through_the_egress_bridge(
    model: ScriptedModelServer, start: Callable[..., DaemonProcess], mechanism: str, network: str
) -> None:
    config = f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
    sandbox = f"sandbox:\n  mechanism: {mechanism}\n  network: {network}\n"
    landlocked = start(config=config + sandbox)
    assert landlocked.call("status")["sandbox"]["mechanism"] == mechanism
    result = _run(
        model,
        landlocked,
        """
        import socket
        from hermes_tools import terminal
        print(terminal(command="echo through-the-channel")["output"].strip())
        try:
            socket.socket(socket.AF_UNIX)
        except OSError as exc:
            print("socket:", type(exc).__name__)
        """,
    )
    assert result["output"].splitlines() == ["through-the-channel", "socket: PermissionError"]
    assert result["tool_calls_made"] == 1


def test_a_script_timing_out_while_a_call_awaits_approval_leaves_nothing_pending(
    daemon: DaemonProcess,
) -> None:
    victim = _workspace(daemon) / "victim-unanswered"
    (victim / "inner").mkdir(parents=True)
    code = f"from hermes_tools import terminal\nprint(terminal(command='rm -r {victim}'))"
    with daemon.client(timeout=60) as client:
        sid = client.call("session.create")["id"]
        waiting = Background(tool, client, "execute_code", {"code": code}, sid, 60)
        [pending] = wait_pending(daemon)
        assert f"rm -r {victim}" in json.dumps(pending)
        result = waiting.result()
        assert result["status"] == "timeout" and result["tool_calls_made"] == 0
        assert client.call("approvals.pending")["pending"] == []
    assert victim.exists()


def test_a_scheduled_run_with_terminal_off_cannot_reach_it_through_a_script(
    model: ScriptedModelServer, start: Callable[..., DaemonProcess]
) -> None:
    daemon = start_cron(start, model, "  disabled_toolsets: [terminal]\n")
    daemon.call("cron.create", {"schedule": "every 1h", "prompt": "SCRIPTED-RUN"})
    code = (
        "import hermes_tools\n"
        "print('terminal' in dir(hermes_tools))\n"
        "print(hermes_tools._channel.call('terminal', {'command': 'echo ran'}))\n"
    )
    model.push(call_tools(tool_call("execute_code", {"code": code})), reply("ok"))
    advance(daemon, HOUR)
    requests = [r for r in model.requests if "SCRIPTED-RUN" in str(r["messages"])]
    result = json.loads(next(m for m in requests[1]["messages"] if m["role"] == "tool")["content"])
    lines = result["output"].splitlines()
    assert lines[0] == "False"
    assert "Tool 'terminal' is not available in execute_code" in lines[1]
    assert result["tool_calls_made"] == 0


def test_a_toolset_disabled_in_the_config_is_not_callable_from_a_script(
    model: ScriptedModelServer, start: Callable[..., DaemonProcess]
) -> None:
    config = (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        "agent:\n  disabled_toolsets: [terminal]\n"  # the reference's spelling
    )
    daemon = start(config=config)
    code = (
        "import hermes_tools\n"
        "print('terminal' in dir(hermes_tools), 'read_file' in dir(hermes_tools))\n"
        "print(hermes_tools._channel.call('terminal', {'command': 'echo ran'}))\n"
    )
    result = _run(model, daemon, code)
    lines = result["output"].splitlines()
    assert lines[0] == "False True"
    assert "Tool 'terminal' is not available in execute_code" in lines[1]
    assert result["tool_calls_made"] == 0
