"""`hermesd.rpc.peer_trust` on real processes: a marked child is a tool's, a plain one is not,
another uid is never examined, and a peer that cannot be examined counts as a tool's."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hermesd.rpc.peer_trust import PeerTrust
from hermesd.rpc.server import peer_credentials
from hermesd.sandbox.confine import LAUNCHER

CONNECT = (
    "import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
    "time.sleep(30)"
)


def _origin_of(argv_prefix: list[str], tmp_path: Path) -> str | None:
    path = str(tmp_path / "s.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    child = subprocess.Popen([*argv_prefix, sys.executable, "-c", CONNECT, path])
    try:
        conn, _ = server.accept()
        with conn:
            peer = peer_credentials(conn)  # the pid as the daemon sees it, not bwrap's
            return PeerTrust().tool_origin(conn, peer.pid, peer.uid)
    finally:
        child.kill()
        child.wait()
        server.close()


def test_a_plain_child_is_not_a_tools_process(tmp_path: Path) -> None:
    assert _origin_of([], tmp_path) is None


def test_a_plain_child_is_not_a_tools_process_when_descriptors_pass_1024(tmp_path: Path) -> None:
    """With a thousand connections open the peer's pidfd is numbered above 1024 (select's limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard open-files limit ({hard}) is below 1200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    spare = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert _origin_of([], tmp_path) is None
    finally:
        for fd in spare:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_child_with_the_seccomp_marker_is_a_tools_process(tmp_path: Path) -> None:
    marked = [sys.executable, "-I", "-S", LAUNCHER, "0", "--"]
    assert "seccomp marker" in str(_origin_of(marked, tmp_path))


def test_a_child_in_another_pid_namespace_is_a_tools_process(tmp_path: Path) -> None:
    nested = ["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--"]
    assert "pid namespace" in str(_origin_of(nested, tmp_path))


def test_another_uid_is_not_examined_and_a_vanished_peer_counts_as_a_tools() -> None:
    trust = PeerTrust()
    a, b = socket.socketpair()
    with a, b:
        assert trust.tool_origin(a, os.getpid(), os.geteuid() + 1) is None
        gone = subprocess.Popen(["true"])
        gone.wait()
        assert trust.tool_origin(a, gone.pid, os.geteuid()) is not None
