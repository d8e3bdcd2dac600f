"""Background processes on a real daemon: ``terminal(background=true)`` starts an HTTP server in
the sandbox through a real turn, the ``process`` tool polls it, reads its output, writes its
stdin and kills it; deleting the session or stopping the daemon kills it too (checked in
/proc), a daemon killed outright leaves it ``gone`` after the restart; ``/ps``, ``process.list``
and ``hermesctl processes`` show them; limits and bad input."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from tests.support.approvals import tool
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer
from tests.support.tool_turns import tool_turn

Start = Callable[..., DaemonProcess]

SERVER = """\
import http.server, sys, threading
port = int(sys.argv[1])

class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from the background"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        print("request", self.path, flush=True)

server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Hello)
threading.Thread(target=server.serve_forever, daemon=True).start()
print("listening", port, flush=True)
for line in sys.stdin:
    print("got:", line.strip(), flush=True)
print("stdin closed", flush=True)
server.shutdown()
"""


def _config(model: ScriptedModelServer, extra: str = "") -> str:
    return f"model:\n  base_url: {model.url}\n  default: scripted-model\n{extra}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _server_command(daemon: DaemonProcess, marker: str) -> tuple[str, int]:
    """The command line of a test server in the daemon's workspace, and its port."""
    workspace = daemon.home / "workspace"
    workspace.mkdir(mode=0o700, exist_ok=True)
    (workspace / "server.py").write_text(SERVER)
    port = _free_port()
    return f"{sys.executable} server.py {port} {marker}", port


def _session(client: Client) -> str:
    sid: str = client.call("session.create")["id"]
    client.call("session.attach", {"session_id": sid})
    return sid


def _get(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/x", timeout=5) as answer:
        body: bytes = answer.read()
        return body.decode()


def _until(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _pids_with(marker: str) -> list[int]:
    """The pids whose command line contains ``marker`` (zombies have none)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                found.append(int(name))
        except OSError:
            continue
    return found


def _marker() -> str:
    return "bg-" + os.urandom(5).hex()


def _sleeper(model: ScriptedModelServer, client: Client) -> tuple[str, str]:
    """A new session whose model starts a long sleep in the background; the session id and
    the marker on the sleeper's command line."""
    sid, marker = _session(client), _marker()
    args = {"command": f"sleep 600; echo {marker}", "background": True}
    tool_turn(model, client, sid, ("terminal", args))
    assert _pids_with(marker)
    return sid, marker


def test_a_background_server_is_polled_read_written_and_killed(
    model: ScriptedModelServer, start: Start
) -> None:
    daemon = start(config=_config(model))
    marker = _marker()
    command, port = _server_command(daemon, marker)
    with daemon.client(timeout=60) as client:
        sid = _session(client)
        [started] = tool_turn(
            model, client, sid, ("terminal", {"command": command, "background": True})
        )
        assert started["output"] == "Background process started" and started["exit_code"] == 0
        pid = started["session_id"]
        assert pid.startswith("proc_") and isinstance(started["pid"], int)
        assert _until(lambda: _get(port), "the server") == "hello from the background"
        _until(
            lambda: (
                "request /x"
                in tool(client, "process", {"action": "log", "session_id": pid}, sid)["output"]
            ),
            "the log",
        )
        listed, polled, logged, wrote = tool_turn(
            model,
            client,
            sid,
            ("process", {"action": "list"}),
            ("process", {"action": "poll", "session_id": pid}),
            ("process", {"action": "log", "session_id": pid, "limit": 1}),
            ("process", {"action": "submit", "session_id": pid, "data": "hello there"}),
        )
        assert [p["session_id"] for p in listed["processes"]] == [pid]
        assert listed["processes"][0]["status"] == "running"
        assert polled["status"] == "running" and f"listening {port}" in polled["output_preview"]
        assert logged["output"] == "request /x" and logged["total_lines"] == 2
        assert wrote == {"status": "ok", "bytes_written": len("hello there\n")}
        _until(
            lambda: (
                "got: hello there"
                in tool(client, "process", {"action": "poll", "session_id": pid}, sid)[
                    "output_preview"
                ]
            ),
            "stdin echoed",
        )
        assert (
            "/ps"
            and pid in client.call("command.run", {"line": "/ps", "session_id": sid})["output"]
        )
        [killed] = tool_turn(model, client, sid, ("process", {"action": "kill", "session_id": pid}))
        assert killed["status"] == "killed" and killed["termination_source"] == "process.kill"
        assert "got: hello there" in killed["output"]
        with pytest.raises(OSError):
            _get(port)
        assert not _pids_with(marker)
        [again] = tool_turn(model, client, sid, ("process", {"action": "poll", "session_id": pid}))
        assert again["status"] == "exited" and again["completion_reason"] == "killed"


def test_wait_returns_on_exit_and_close_ends_stdin(
    model: ScriptedModelServer, start: Start
) -> None:
    daemon = start(config=_config(model))
    with daemon.client(timeout=60) as client:
        sid = _session(client)
        args = {"command": "read line; echo read:$line; exit 3", "background": True}
        [started] = tool_turn(model, client, sid, ("terminal", args))
        pid = started["session_id"]
        short, wrote, closed = tool_turn(
            model,
            client,
            sid,
            ("process", {"action": "wait", "session_id": pid, "timeout": 1}),
            ("process", {"action": "write", "session_id": pid, "data": "abc"}),
            ("process", {"action": "close", "session_id": pid}),
        )
        assert short["status"] == "timeout" and "still running" in short["timeout_note"]
        assert wrote["status"] == "ok" and closed["status"] == "ok"
        [waited] = tool_turn(model, client, sid, ("process", {"action": "wait", "session_id": pid}))
        assert waited["status"] == "exited" and waited["exit_code"] == 3
        assert waited["output"].strip() == "read:abc"


def test_deleting_the_session_kills_its_processes(model: ScriptedModelServer, start: Start) -> None:
    daemon = start(config=_config(model))
    with daemon.client(timeout=60) as client:
        sid, marker = _sleeper(model, client)
        client.call("session.delete", {"session_id": sid})
        _until(lambda: not _pids_with(marker), "the process to end")
        assert client.call("process.list")["processes"] == []


def test_stopping_the_daemon_kills_them_and_the_next_one_reports_them(
    model: ScriptedModelServer,
) -> None:
    home = short_tmpdir("bgs-")
    daemon = start_daemon(home, config=_config(model))
    try:
        with daemon.client(timeout=60) as client:
            sid, marker = _sleeper(model, client)
    finally:
        daemon.stop()
    assert not _pids_with(marker)  # no orphan
    again = start_daemon(home, config=_config(model))
    try:
        [record] = again.call("process.list", {"session_id": sid})["processes"]
        assert record["status"] == "exited" and record["termination_source"] == "daemon.stop"
    finally:
        again.stop()


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_a_daemon_killed_outright_leaves_its_processes_gone_after_the_restart(
    model: ScriptedModelServer, mechanism: str
) -> None:
    home = short_tmpdir("bgk-")
    daemon = start_daemon(home, config=_config(model, f"sandbox:\n  mechanism: {mechanism}\n"))
    with daemon.client(timeout=60) as client:
        sid, marker = _sleeper(model, client)
    daemon.signal(signal.SIGKILL)
    daemon.stop()
    again = start_daemon(home, config=_config(model))
    try:
        _until(lambda: not _pids_with(marker), "no survivor")
        with again.client(timeout=60) as client:
            client.call("session.attach", {"session_id": sid})
            [listed] = tool_turn(model, client, sid, ("process", {"action": "list"}))
        [record] = listed["processes"]
        assert record["status"] == "gone" and record["detached"] is True
        out = run_hermesctl(["--socket", str(again.socket), "processes", sid])
        assert out.returncode == 0 and record["session_id"] in out.stdout and "gone" in out.stdout
    finally:
        again.stop()


def test_limits_bound_processes_per_session_and_output(
    model: ScriptedModelServer, start: Start
) -> None:
    extra = "processes:\n  max_per_session: 2\n  output_chars: 1000\n"
    daemon = start(config=_config(model, extra))
    with daemon.client(timeout=60) as client:
        sid = _session(client)
        loud = {"command": "yes 0123456789 | head -c 100000; sleep 600", "background": True}
        quiet = {"command": "sleep 600", "background": True}
        first, second, third = tool_turn(
            model, client, sid, ("terminal", loud), ("terminal", quiet), ("terminal", quiet)
        )
        assert "processes.max_per_session" in third["error"]
        _until(
            lambda: (
                len(
                    tool(
                        client,
                        "process",
                        {"action": "log", "session_id": first["session_id"], "limit": 100000},
                        sid,
                    )["output"]
                )
                >= 900
            ),
            "output",
        )
        log = tool(
            client,
            "process",
            {"action": "log", "session_id": first["session_id"], "limit": 100000},
            sid,
        )
        assert len(log["output"]) <= 1000
        out = run_hermesctl(
            ["--socket", str(daemon.socket), "processes", sid, "--kill", second["session_id"]]
        )
        assert out.returncode == 0 and f"{second['session_id']}: exited" in out.stdout, out
        [fourth] = tool_turn(model, client, sid, ("terminal", quiet))
        assert fourth["session_id"].startswith("proc_")


def test_bad_input_gets_clear_errors_and_another_sessions_process_is_not_found(
    model: ScriptedModelServer, start: Start
) -> None:
    daemon = start(config=_config(model))
    with daemon.client(timeout=60) as client:
        other = _session(client)
        [theirs] = tool_turn(
            model, client, other, ("terminal", {"command": "sleep 600", "background": True})
        )
        sid = _session(client)
        results = tool_turn(
            model,
            client,
            sid,
            ("process", {"action": "explode"}),
            ("process", {"action": "poll"}),
            ("process", {"action": "poll", "session_id": theirs["session_id"]}),
            ("process", {"action": "kill", "session_id": theirs["session_id"]}),
            ("process", {"action": "wait", "session_id": theirs["session_id"], "timeout": "x"}),
            ("terminal", {"command": "sleep 1", "background": "yes"}),
        )
        assert "Unknown process action" in results[0]["error"]
        assert "required" in results[1]["error"]
        assert results[2]["status"] == results[3]["status"] == results[4]["status"] == "not_found"
        assert "'background'" in results[5]["error"]
        [mine] = tool_turn(model, client, sid, ("terminal", {"command": "cat", "background": True}))
        bad = tool_turn(
            model,
            client,
            sid,
            ("process", {"action": "write", "session_id": mine["session_id"], "data": 5}),
            (
                "process",
                {"action": "write", "session_id": mine["session_id"], "data": "x" * 70_000},
            ),
            ("process", {"action": "log", "session_id": mine["session_id"], "offset": -1}),
            ("process", {"action": "wait", "session_id": mine["session_id"], "timeout": 0}),
        )
        assert "data must be a string" in bad[0]["error"]
        assert "one write takes" in bad[1]["error"]
        assert "offset must be" in bad[2]["error"]
        assert "timeout must be" in bad[3]["error"]
        # still running and theirs untouched
        assert (
            tool(client, "process", {"action": "poll", "session_id": theirs["session_id"]}, other)[
                "status"
            ]
            == "running"
        )


def test_a_secret_in_the_output_is_redacted_for_the_model_and_for_process_list(
    model: ScriptedModelServer, start: Start
) -> None:
    daemon = start(config=_config(model))
    secret = "ghp_" + "a1b2c3d4e5" * 4  # a GitHub token's shape
    with daemon.client(timeout=60) as client:
        sid = _session(client)
        args = {"command": f"echo token {secret}; sleep 600", "background": True}
        [started] = tool_turn(model, client, sid, ("terminal", args))
        poll = {"action": "poll", "session_id": started["session_id"]}
        _until(lambda: "token" in tool(client, "process", poll, sid)["output_preview"], "output")
        [polled] = tool_turn(model, client, sid, ("process", poll))
        [listed] = client.call("process.list", {"session_id": sid})["processes"]
    assert "token [REDACTED]" in polled["output_preview"] and secret not in json.dumps(polled)
    assert secret not in json.dumps(listed) and "[REDACTED]" in listed["output_tail"]
