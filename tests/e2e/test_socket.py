"""The socket file and who may use it: modes, stale files, live daemons, peer credentials."""

from __future__ import annotations

import errno
import grp
import os
import pwd
import socket
import stat
import subprocess
import sys

import pytest

from hermesd.rpc.protocol import Codes
from tests.support.daemon import DaemonProcess, daemon_env, short_tmpdir
from tests.support.otheruser import talk_as
from tests.support.raw import RawPeer

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")
NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid)


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_socket_is_private_to_the_owner_by_default(daemon: DaemonProcess) -> None:
    assert stat.S_ISSOCK(os.lstat(daemon.socket).st_mode)
    assert _mode(daemon.socket) == 0o600


def test_socket_parent_directory_is_created_private(start) -> None:
    base = short_tmpdir()
    sock = base / "run" / "hermes" / "hermesd.sock"
    daemon = start(socket_path=sock)
    assert _mode(sock.parent) == 0o700
    assert daemon.call("ping")["pong"]


def test_group_socket_is_0660_and_owned_by_the_group(start) -> None:
    daemon = start(config=f"socket:\n  group: {NOGROUP.gr_name}\n")
    st = os.lstat(daemon.socket)
    assert stat.S_IMODE(st.st_mode) == 0o660
    assert st.st_gid == NOGROUP.gr_gid


def test_stale_socket_file_is_replaced(start) -> None:
    run = short_tmpdir()
    path = run / "hermesd.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    daemon = start(socket_path=path)
    assert daemon.call("ping")["pong"]
    assert "removing stale socket" in daemon.log()


def test_second_daemon_on_a_live_socket_refuses_to_start(daemon: DaemonProcess) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hermesd", "--socket", str(daemon.socket), "--allow-root"],
        env=daemon_env(daemon.home),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 69
    assert "already listening" in proc.stdout + proc.stderr
    assert daemon.call("ping")["pong"]  # the first one is untouched


def test_a_regular_file_at_the_socket_path_is_not_deleted(home) -> None:
    path = home / "not-a-socket"
    path.write_text("precious")
    proc = subprocess.run(
        [sys.executable, "-m", "hermesd", "--socket", str(path), "--allow-root"],
        env=daemon_env(home),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 69
    assert "is not a socket" in proc.stdout + proc.stderr
    assert path.read_text() == "precious"


def test_socket_file_is_removed_on_graceful_stop(daemon: DaemonProcess) -> None:
    assert daemon.stop() == 0
    assert not os.path.lexists(daemon.socket)


def test_connection_limit_answers_with_a_clear_error(start) -> None:
    daemon = start(config="limits:\n  max_connections: 3\n")
    held = [daemon.client() for _ in range(3)]
    extra = RawPeer(daemon.socket)
    note = extra.recv()
    assert note[1] == "hermes.error" and note[2][0]["code"] == Codes.TOO_MANY_CONNECTIONS
    assert extra.closed_by_peer()
    held[0].close()
    for c in held[1:]:
        assert c.call("ping")["pong"]


@needs_root
def test_other_uid_is_stopped_by_file_permissions(daemon: DaemonProcess) -> None:
    os.chmod(daemon.socket.parent, 0o755)
    out = talk_as(NOBODY.pw_uid, NOBODY.pw_gid, daemon.socket, [[0, 1, "ping", []]])
    assert out == {"connect_error": errno.EACCES}


@needs_root
def test_other_uid_is_refused_by_peer_credentials_even_if_the_socket_is_open(
    daemon: DaemonProcess,
) -> None:
    os.chmod(daemon.socket.parent, 0o755)
    os.chmod(daemon.socket, 0o666)  # a misconfigured socket: SO_PEERCRED still guards it
    out = talk_as(NOBODY.pw_uid, NOBODY.pw_gid, daemon.socket, [[0, 1, "ping", []]])
    assert out["closed"] is True
    assert [m for m in out["received"] if m[0] == 1 and m[2] is None] == []
    notes = [m for m in out["received"] if m[0] == 2]
    assert notes and notes[0][2][0]["code"] == Codes.PERMISSION_DENIED
    assert f"refused connection from uid {NOBODY.pw_uid}" in daemon.log()
    assert daemon.call("ping")["pong"]


@needs_root
def test_group_member_may_call_methods_but_not_shutdown(start) -> None:
    daemon = start(config=f"socket:\n  group: {NOGROUP.gr_name}\n")
    os.chmod(daemon.socket.parent, 0o755)
    out = talk_as(
        NOBODY.pw_uid,
        NOBODY.pw_gid,
        daemon.socket,
        [[0, 1, "ping", [{"data": "hi"}]], [0, 2, "shutdown", []]],
    )
    responses = {m[1]: m for m in out["received"] if m[0] == 1}
    assert responses[1][3] == {"pong": True, "data": "hi"}
    assert responses[2][2]["code"] == Codes.PERMISSION_DENIED
    assert daemon.alive() and daemon.call("ping")["pong"]


@needs_root
def test_uid_outside_the_group_is_refused_when_a_group_is_configured(start) -> None:
    other = pwd.getpwnam("daemon")
    daemon = start(config=f"socket:\n  group: {NOGROUP.gr_name}\n  mode: '0666'\n")
    os.chmod(daemon.socket.parent, 0o755)
    assert _mode(daemon.socket) == 0o666
    out = talk_as(other.pw_uid, other.pw_gid, daemon.socket, [[0, 1, "ping", []]])
    notes = [m for m in out["received"] if m[0] == 2]
    assert notes and notes[0][2][0]["code"] == Codes.PERMISSION_DENIED
    assert out["closed"]
