"""Lists as ``docker ps`` prints them (headers, relative times, ``--json``), ``sessions prune``
and an MCP server that cannot start, against real hermesd processes."""

from __future__ import annotations

import grp
import json
import os
import pwd
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir, start_daemon
from tests.support.mcp_helpers import config, settle, stdio
from tests.support.modelserver import ScriptedModelServer, model_config
from tests.support.otheruser import talk_as

NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid)
BROKEN = "import sys; sys.stderr.write('cannot open /nope/db: no such file\\n'); sys.exit(3)"
KILLED = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def d(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    daemon = start_daemon(
        short_tmpdir(), config=model_config(model.url) + f"socket:\n  group: {NOGROUP.gr_name}\n"
    )
    yield daemon
    daemon.stop()


def ctl(d: DaemonProcess, *args: str) -> Any:
    return run_hermesctl(
        ["--socket", str(d.socket), *args], env={"HERMES_HOME": str(d.home)}, input=""
    )


def test_sessions_list_has_headers_and_relative_times(d: DaemonProcess) -> None:
    used = d.call("session.create", {"title": "a used one"})["id"]
    with d.client() as c:
        c.call("session.send", {"session_id": used, "message": "hello"})
    out = ctl(d, "sessions", "list")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split() == ["SESSION", "ID", "UPDATED", "MESSAGES", "STATE", "MODEL", "TITLE"]
    row = next(r for r in rows if r.startswith(used))
    assert row.endswith("a used one")
    assert " ago " in row or "just now" in row
    listed = json.loads(ctl(d, "sessions", "list", "--json").stdout)
    assert used in [s["id"] for s in listed]


def test_prune_empty_deletes_only_sessions_without_messages(d: DaemonProcess) -> None:
    empty = d.call("session.create")["id"]
    used = d.call("session.create")["id"]
    with d.client() as c:
        c.call("session.send", {"session_id": used, "message": "keep me"})
    seen = ctl(d, "sessions", "prune", "--empty", "--dry-run")
    assert seen.returncode == 0, seen.stderr
    assert "Would delete 1 session." in seen.stdout and empty in seen.stdout
    assert d.call("session.get", {"session_id": empty})["id"] == empty  # a dry run keeps it
    done = ctl(d, "sessions", "prune", "--empty")
    assert done.returncode == 0 and empty in done.stdout and used not in done.stdout
    left = [s["id"] for s in d.call("session.list")["sessions"]]
    assert empty not in left and used in left


def test_prune_older_than_keeps_recent_sessions(d: DaemonProcess) -> None:
    sid = d.call("session.create")["id"]
    recent = json.loads(ctl(d, "sessions", "prune", "--older-than", "30d", "--json").stdout)
    assert recent == {"deleted": [], "dry_run": False}
    everything = ctl(d, "sessions", "prune", "--older-than", "0s", "--dry-run").stdout
    assert sid in everything


def test_prune_needs_a_criterion_and_a_valid_age(d: DaemonProcess) -> None:
    bare = ctl(d, "sessions", "prune")
    assert bare.returncode == 2 and "--older-than AGE and/or --empty" in bare.stderr
    bad = ctl(d, "sessions", "prune", "--older-than", "30x")
    assert bad.returncode == 2 and "invalid age '30x'" in bad.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")
def test_a_member_prunes_only_their_own_sessions(d: DaemonProcess) -> None:
    owners = d.call("session.create")["id"]  # empty, but not the member's
    os.chmod(d.socket.parent, 0o755)
    out = talk_as(
        NOBODY.pw_uid,
        NOBODY.pw_gid,
        d.socket,
        [[0, 1, "session.create", [{}]], [0, 2, "session.prune", [{"empty": True}]]],
    )
    replies = {m[1]: m for m in out["received"] if m[0] == 1}
    mine = replies[1][3]["id"]
    assert replies[2][3]["deleted"] == [mine]
    assert d.call("session.get", {"session_id": owners})["id"] == owners


# --- MCP servers that cannot start ----------------------------------------------------------


@pytest.fixture(scope="module")
def mcpd() -> Iterator[DaemonProcess]:
    servers = {
        "fine": stdio("echo"),
        "broken": {"command": sys.executable, "args": ["-c", BROKEN], "trusted": True},
        "killed": {"command": sys.executable, "args": ["-c", KILLED], "trusted": True},
    }
    daemon = start_daemon(short_tmpdir(), config=config(servers))
    settle(daemon)
    yield daemon
    daemon.stop()


def test_mcp_list_has_headers_and_says_why_a_server_is_not_running(mcpd: DaemonProcess) -> None:
    out = ctl(mcpd, "mcp", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "KIND", "TOOLS", "TOOLSET"]
    assert next(x for x in lines if x.startswith("fine ")).split()[1] == "ready"
    assert any(x.startswith("  broken: error: ") for x in lines)
    assert "cannot open /nope/db: no such file" in out.stdout  # its stderr's tail


def test_mcp_list_shows_how_a_failing_servers_process_ended(mcpd: DaemonProcess) -> None:
    out = ctl(mcpd, "mcp", "list").stdout
    assert "  broken: error: server process exited with status 3 (" in out
    assert "  killed: error: server process killed by signal SIGKILL (" in out
    rows = {r["name"]: r for r in json.loads(ctl(mcpd, "mcp", "list", "--json").stdout)}
    assert rows["broken"]["exit"] == "exited with status 3"
    assert rows["killed"]["exit"] == "killed by signal SIGKILL"
    assert rows["fine"]["exit"] is None


def test_mcp_restart_of_a_failing_server_exits_non_zero(mcpd: DaemonProcess) -> None:
    failed = ctl(mcpd, "mcp", "restart", "broken")
    assert failed.returncode == 1
    assert failed.stdout.startswith("broken: ")
    assert ctl(mcpd, "mcp", "restart", "fine").returncode == 0


def test_cron_list_has_headers_and_when_the_next_run_is(d: DaemonProcess) -> None:
    added = ctl(d, "cron", "add", "every 2h", "summarise the logs", "--name", "logs digest")
    assert added.returncode == 0, added.stderr
    out = ctl(d, "cron", "list")
    header, row = out.stdout.splitlines()
    assert header.split() == [
        "JOB",
        "ID",
        "STATE",
        "SCHEDULE",
        "NEXT",
        "RUN",
        "LAST",
        "RUN",
        "NAME",
    ]
    assert " in 1h 59m " in row or " in 2h 0m " in row
    assert "never ran" in row and row.endswith("logs digest")
    assert json.loads(ctl(d, "cron", "list", "--json").stdout)[0]["name"] == "logs digest"


def test_doctor_and_status_say_why_an_mcp_server_is_not_running(mcpd: DaemonProcess) -> None:
    out = ctl(mcpd, "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["mcp fine"]["status"] == "ok"
    assert checks["mcp broken"]["status"] == "fail"
    assert "cannot open /nope/db: no such file" in checks["mcp broken"]["detail"]
    assert "exited with status 3" in checks["mcp broken"]["detail"]
    assert "killed by signal SIGKILL" in checks["mcp killed"]["detail"]
    assert out.returncode == 1
    # `status` explains servers that are "failed" (after 5 attempts, about 8 s), not "retrying"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = {r["name"]: r["state"] for r in mcpd.call("mcp.list")["servers"]}
        if states["broken"] == states["killed"] == "failed":
            break
        time.sleep(0.5)
    status = ctl(mcpd, "status").stdout
    assert "broken: error: " in status and "cannot open /nope/db" in status
    assert "exited with status 3" in status and "killed by signal SIGKILL" in status


def test_doctor_reports_an_endpoint_that_answers_with_a_web_page(start: Any) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><html><body>Welcome to the web UI</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Page) as web:
        threading.Thread(target=web.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{web.server_address[1]}"
        daemon = start(config=model_config(url))
        out = ctl(daemon, "doctor")
        web.shutdown()
    assert out.returncode == 1, out.stderr
    assert "internal error" not in out.stdout + out.stderr
    assert "answered with text/html, not an OpenAI model list" in out.stdout
