"""The seccomp filter as libseccomp builds it, loaded by the Landlock launcher on its own (ABI 0:
no Landlock, the filter, limits and reaping only), and the launcher's command line."""

from __future__ import annotations

import os
import resource
import secrets
import subprocess
import sys
import time
from pathlib import Path

from hermesd.sandbox import landlock_exec, seccomp
from hermesd.sandbox.confine import LAUNCHER

UNIX = (
    "import socket\ntry:\n socket.socket(socket.AF_UNIX)\n print('MADE')\n"
    "except OSError as e:\n print('ERRNO', e.errno)"
)


def launch(tmp_path: Path, bpf: bytes, *options: str, program: list[str]) -> str:
    filter_file = tmp_path / "filter"
    filter_file.write_bytes(bpf)
    argv = [sys.executable, "-I", "-S", LAUNCHER, "0", "--seccomp", str(filter_file), *options]
    done = subprocess.run([*argv, "--", *program], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


def test_the_filter_is_a_bpf_program_built_once_per_policy() -> None:
    closed, open_unix = seccomp.filter_bpf(), seccomp.filter_bpf(allow_unix=True)
    assert len(closed) % 8 == 0 and len(closed) > 8 * 10
    assert seccomp.filter_bpf() is closed  # cached
    assert open_unix != closed and len(open_unix) < len(closed)


def test_loaded_it_refuses_a_unix_socket_and_the_open_variant_does_not(tmp_path: Path) -> None:
    program = [sys.executable, "-c", UNIX]
    assert "ERRNO 1" in launch(tmp_path, seccomp.filter_bpf(), program=program)
    assert "MADE" in launch(tmp_path, seccomp.filter_bpf(allow_unix=True), program=program)
    assert "MADE" in launch(tmp_path, landlock_exec.MARKER_FILTER, program=program)


def test_the_launcher_lowers_its_limits(tmp_path: Path) -> None:
    limit = f"{resource.RLIMIT_FSIZE}={1024 * 1024}"
    out = launch(
        tmp_path, seccomp.filter_bpf(), "--limit", limit, program=["/bin/sh", "-c", "ulimit -f"]
    )
    assert out.split() == ["2048"]  # 512-byte blocks


def test_the_reaping_launcher_leaves_no_detached_child_behind(tmp_path: Path) -> None:
    token = f"{30 + secrets.randbelow(1000) / 1000:.3f}"
    command = f"setsid sleep {token} > /dev/null 2>&1 < /dev/null & echo started"
    assert "started" in launch(
        tmp_path, seccomp.filter_bpf(), "--reap", program=["/bin/sh", "-c", command]
    )
    deadline = time.monotonic() + 10
    while _sleeping(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleeping(token) == []


def _sleeping(token: str) -> list[str]:
    found = []
    for name in os.listdir("/proc"):
        try:
            if (
                name.isdigit()
                and f"sleep\0{token}".encode() in Path(f"/proc/{name}/cmdline").read_bytes()
            ):
                found.append(name)
        except OSError:
            continue
    return found


def test_the_launchers_command_line_is_parsed_into_its_parts() -> None:
    spec = landlock_exec.parse_spec(
        ["6", "--no-network", "--reap", "--seccomp", "/f", "--cgroup", "/c1", "--cgroup", "/c2",
         "--limit", "1=5", "read=/", "none=/h", "--", "/bin/sh", "-c", "x"]
    )  # fmt: skip
    assert (spec.abi, spec.network, spec.reap, spec.seccomp) == (6, False, True, "/f")
    assert spec.cgroups == ["/c1", "/c2"] and spec.limits == [(1, 5)]
    assert spec.rules == [("/", "read"), ("/h", "none")]
    assert spec.program == ["/bin/sh", "-c", "x"]
