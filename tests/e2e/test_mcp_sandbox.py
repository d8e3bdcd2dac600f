"""Stdio MCP servers inside the tool sandbox, on a real daemon, under both mechanisms.

The test server ``files`` (tests/support/mcp_server.py) tries what a hostile or careless server
might: write hermesd's state, read ``.env``, write outside its workspace, read its environment.
Each aims inside this test's temporary directories.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.rpc.protocol import Codes
from hermesd.sandbox.confine import TEST_ABI_VARIABLE
from tests.support.approvals import tool
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.mcp_helpers import (
    SERVER,
    config,
    server_row,
    settle,
    stdio,
    unmarked,
    wait_state,
)

SECRET = "mcp-sandbox-dotenv-secret-value"


class Box:
    """A daemon whose servers run in the sandbox, and the folders around it."""

    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self.home = short_tmpdir("msh-")
        self.workspace = short_tmpdir("msw-")
        self.outside = short_tmpdir("mso-")
        self.allowed = short_tmpdir("msa-")
        self.denied = short_tmpdir("msd-")
        (self.denied / "note").write_text("denied note")
        (self.home / ".env").write_text(f"MCP_SANDBOX_SECRET={SECRET}\n")
        servers = {
            "box": stdio(
                "files",
                sandbox={"writable": [str(self.allowed)], "readable": [str(self.denied)]},
                env={"MCP_SANDBOX_MINE": "mine"},
            ),
            "plain": stdio("files"),
            "inside": stdio("files", sandbox={"writable": [str(self.home / "plugins")]}),
        }
        self.daemon = start_daemon(
            self.home,
            config=config(
                servers,
                sandbox={"mechanism": mechanism, "readable_deny": [str(self.denied)]},
                terminal={"cwd": str(self.workspace)},
            ),
        )
        assert self.daemon.call("status")["sandbox"]["mechanism"] == mechanism

    def call(self, server: str, name: str, args: dict[str, Any] | None = None) -> str:
        settle(self.daemon)
        with self.daemon.client() as c:
            result = unmarked(tool(c, f"mcp__{server}__{name}", args or {}, timeout=60))
        return str(result["result"] if isinstance(result, dict) else result)


@pytest.fixture(scope="module", params=["bwrap", "landlock"])
def box(request: pytest.FixtureRequest) -> Iterator[Box]:
    made = Box(request.param)
    yield made
    made.daemon.stop()


def test_a_server_cannot_write_into_hermes_home(box: Box) -> None:
    assert box.call("box", "write", {"path": f"{box.home}/planted", "text": "x"}).startswith(
        "error"
    )
    assert not (box.home / "planted").exists()


def test_a_server_cannot_read_the_dotenv_file(box: Box) -> None:
    answer = box.call("box", "read", {"path": f"{box.home}/.env"})
    assert answer.startswith("error") and SECRET not in answer


def test_a_server_cannot_write_outside_its_workspace(box: Box) -> None:
    answer = box.call("box", "write", {"path": f"{box.outside}/written", "text": "x"})
    assert answer.startswith("error")
    assert not (box.outside / "written").exists()


def test_a_server_writes_its_workspace_which_is_its_default_directory(box: Box) -> None:
    assert box.call("box", "cwd") == str(box.workspace.resolve())
    assert box.call("box", "write", {"path": "in-workspace", "text": "w"}) == "ok"
    assert (box.workspace / "in-workspace").read_text() == "w"


def test_a_path_in_the_servers_sandbox_writable_is_writable(box: Box) -> None:
    assert box.call("box", "write", {"path": f"{box.allowed}/ok", "text": "y"}) == "ok"
    assert (box.allowed / "ok").read_text() == "y"


def test_another_servers_writable_path_stays_closed(box: Box) -> None:
    answer = box.call("plain", "write", {"path": f"{box.allowed}/plain", "text": "y"})
    assert answer.startswith("error")
    assert not (box.allowed / "plain").exists()


def test_sandbox_readable_lifts_readable_deny_for_that_server_only(box: Box) -> None:
    assert box.call("box", "read", {"path": f"{box.denied}/note"}) == "denied note"
    assert box.call("plain", "read", {"path": f"{box.denied}/note"}).startswith("error")


def test_a_servers_environment_lacks_the_dotenv_secret(box: Box) -> None:
    assert box.call("box", "env", {"name": "MCP_SANDBOX_SECRET"}) == "<unset>"
    assert box.call("box", "env", {"name": "PATH"}) != "<unset>"


def test_a_servers_configured_env_is_added_to_the_allow_list(box: Box) -> None:
    assert box.call("box", "env", {"name": "MCP_SANDBOX_MINE"}) == "mine"
    assert box.call("plain", "env", {"name": "MCP_SANDBOX_MINE"}) == "<unset>"


def test_a_server_carries_the_marker_so_its_connections_are_a_tools(box: Box) -> None:
    status = Path(f"/proc/{box.daemon.proc.pid}/status").read_text()
    daemon_filters = int(status.split("Seccomp_filters:")[1].split()[0])
    assert int(box.call("box", "seccomp_filters")) == daemon_filters + 1


def test_a_servers_owner_only_call_on_the_socket_is_refused(box: Box) -> None:
    answer = json.loads(
        box.call("box", "owner_call", {"socket": str(box.daemon.socket), "method": "shutdown"})
    )
    # no Unix socket can be made in the sandbox (issue 29); under bubblewrap the socket's
    # folder is not there either
    assert "Operation not permitted" in answer["unreachable"], answer
    assert box.daemon.call("ping")["pong"] is True


def test_the_private_tmp_lives_as_long_as_the_server_and_goes_with_it(box: Box) -> None:
    tmp = box.call("plain", "tmpdir")
    assert box.call("plain", "write", {"path": f"{tmp}/kept", "text": "t"}) == "ok"
    assert box.call("plain", "read", {"path": f"{tmp}/kept"}) == "t"
    box.daemon.call("mcp.restart", {"name": "plain"})
    wait_state(box.daemon, "plain", "ready", timeout=60)
    assert box.call("plain", "read", {"path": f"{tmp}/kept"}).startswith("error")
    assert not Path(tmp, "kept").exists()
    if box.mechanism == "landlock":  # a folder of its own; under bwrap a tmpfs over scratch
        assert not Path(tmp).exists()


def test_a_writable_path_inside_hermes_home_is_refused_by_name(box: Box) -> None:
    row = not_starting(box.daemon, "inside")
    assert "mcp_servers.inside.sandbox" in str(row["error"])
    assert "plugins" in str(row["error"])
    assert box.daemon.call("ping")["pong"] is True


def test_without_a_sandbox_a_server_fails_to_start_with_the_sandboxs_error() -> None:
    home = short_tmpdir("msh-")
    entry = stdio("files")
    daemon = start_daemon(
        home,
        config=config(
            {"box": entry}, sandbox={"mechanism": "bwrap", "bwrap": "/nonexistent/bwrap"}
        ),
        env={TEST_ABI_VARIABLE: "0"},
    )
    try:
        row = not_starting(daemon, "box")
        assert "sandbox.mode" in str(row["error"]) and "bubblewrap" in str(row["error"])
        assert not [t for t in daemon.call("tools.list")["tools"] if t["toolset"] == "mcp-box"]
        assert daemon.call("ping")["pong"] is True
    finally:
        daemon.stop()


def test_with_sandbox_mode_off_a_server_runs_unconfined_as_before() -> None:
    outside = short_tmpdir("mso-")
    home = short_tmpdir("msh-")
    daemon = start_daemon(home, config=config({"box": stdio("files")}, sandbox={"mode": "off"}))
    try:
        settle(daemon)
        with daemon.client() as c:
            args = {"path": f"{outside}/written", "text": "z"}
            assert unmarked(tool(c, "mcp__box__write", args, timeout=60))["result"] == "ok"
        assert (outside / "written").read_text() == "z"
    finally:
        daemon.stop()


def test_with_sandbox_mode_off_the_exit_status_and_signal_are_the_processs_own() -> None:
    # no bwrap in between: a status above 128 is the program's own, a signal is seen as one
    servers = {
        "high": {"command": sys.executable, "args": ["-c", "raise SystemExit(130)"]},
        "termed": {
            "command": sys.executable,
            "args": ["-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
        },
    }
    daemon = start_daemon(short_tmpdir("msx-"), config=config(servers, sandbox={"mode": "off"}))
    try:
        settle(daemon)
        rows = {r["name"]: r for r in daemon.call("mcp.list")["servers"]}
        assert rows["high"]["exit"] == "exited with status 130", rows["high"]
        assert rows["termed"]["exit"] == "killed by signal SIGTERM", rows["termed"]
        assert str(rows["termed"]["error"]).startswith("server process killed by signal SIGTERM")
    finally:
        daemon.stop()


def test_with_sandbox_mode_off_a_servers_connection_back_is_still_a_tools() -> None:
    daemon = start_daemon(
        short_tmpdir("msh-"), config=config({"box": stdio("files")}, sandbox={"mode": "off"})
    )
    try:
        settle(daemon)
        args = {"socket": str(daemon.socket), "method": "shutdown"}
        with daemon.client() as c:
            answer = json.loads(
                unmarked(tool(c, "mcp__box__owner_call", args, timeout=60))["result"]
            )
        assert answer == {"error": Codes.PERMISSION_DENIED, "owner": False}
        assert daemon.call("ping")["pong"] is True
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def found() -> Iterator[DaemonProcess]:
    """A daemon whose servers name their command by a bare name."""
    bin_dir = short_tmpdir("msb-")
    script = bin_dir / "files-server"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {SERVER} files\n")
    script.chmod(0o755)
    servers = {
        "onpath": {
            "command": "files-server",
            "env": {"PATH": f"{bin_dir}:/usr/bin:/bin"},
            "trusted": True,
        },
        "missing": {"command": "no-such-mcp-server-anywhere", "trusted": True},
    }
    daemon = start_daemon(short_tmpdir("msh-"), config=config(servers))
    yield daemon
    daemon.stop()


def test_a_bare_command_is_found_on_the_servers_configured_path(found: DaemonProcess) -> None:
    settle(found)
    with found.client() as c:
        assert unmarked(tool(c, "mcp__onpath__env", {"name": "MCP_NONE"}, timeout=60)) == {
            "result": "<unset>",
            "structuredContent": {"result": "<unset>"},
        }


def not_starting(daemon: DaemonProcess, name: str) -> dict[str, Any]:
    """The row of server ``name`` once its first attempt has failed."""
    daemon.call("tools.list")
    deadline = time.monotonic() + 60
    row = server_row(daemon, name)
    while row["state"] in ("stopped", "connecting") and time.monotonic() < deadline:
        time.sleep(0.1)
        row = server_row(daemon, name)
    assert row["state"] in ("retrying", "failed")
    return row


def test_a_command_not_found_is_the_servers_error(found: DaemonProcess) -> None:
    row = not_starting(found, "missing")
    assert "no-such-mcp-server-anywhere" in str(row["error"]) and "not found" in str(row["error"])
    assert found.call("ping")["pong"] is True
