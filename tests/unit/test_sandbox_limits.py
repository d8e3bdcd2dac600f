"""``sandbox.limits``: the keys, the rlimits a call gets, and what ``status`` says when a limit
cannot be enforced here."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest

from hermesd.daemon.config import Config
from hermesd.sandbox import limits
from hermesd.sandbox.confine import Sandbox
from hermesd.sandbox.limits import MB, Limits
from hermesd.tools.terminal import spawn, terminate


def test_the_keys_default_and_zero_turns_a_limit_off() -> None:
    assert Limits.from_config(Config({})) == Limits(512, 8192, 16384, 600)
    given = Config({"sandbox": {"limits": {"processes": 0, "memory_mb": 64}}})
    assert Limits.from_config(given) == Limits(0, 64, 16384, 600)


def test_a_call_gets_data_file_size_and_cpu_rlimits_and_a_program_no_cpu_limit() -> None:
    wanted = Limits(processes=10, memory_mb=64, file_size_mb=8, cpu_seconds=5)
    call = dict(limits.rlimits(wanted, None, cpu=True))
    assert call == {
        resource.RLIMIT_DATA: 64 * MB,
        resource.RLIMIT_FSIZE: 8 * MB,
        resource.RLIMIT_CPU: 5,
    }
    program = dict(limits.rlimits(wanted, 30, cpu=False))
    assert resource.RLIMIT_CPU not in program and program[resource.RLIMIT_NPROC] == 30


@pytest.mark.skipif(os.geteuid() != 0, reason="RLIMIT_NPROC binds every user but root")
def test_status_says_when_root_has_no_pids_cgroup_to_count_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits.CgroupHome, "find", classmethod(lambda cls: None))
    config = Config({"sandbox": {"mechanism": "landlock"}})
    status = Sandbox.for_home(tmp_path / "home", config).status()
    assert "processes: not enforced" in status["limits"], status
    off = Config({"sandbox": {"mechanism": "landlock", "limits": {"processes": 0}}})
    assert "limits" not in Sandbox.for_home(tmp_path / "home", off).status()


def test_stopping_a_call_kills_what_outlived_its_launcher_in_the_calls_cgroup(
    tmp_path: Path,
) -> None:
    """bubblewrap's inner process outlives a launcher killed while it still sets the sandbox
    up (3 in 100 immediate kills measured); it is in the call's cgroup, and stopping the call
    kills everything there. A sleeper put into the cgroup stands for it here."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    sandbox = Sandbox.for_home(tmp_path / "home", Config({}))
    launch = sandbox.prepare("sleep 600", workspace, workspace, None)
    if launch.cgroup is None:
        launch.cleanup()
        pytest.skip("no cgroup for calls on this machine")
    stray = subprocess.Popen(["sleep", "600"], start_new_session=True)

    async def stop() -> None:
        proc = await spawn(launch, stdin=asyncio.subprocess.DEVNULL, stderr=subprocess.STDOUT)
        assert launch.cgroup is not None
        for directory in launch.cgroup.directories:
            (directory / "cgroup.procs").write_text(str(stray.pid))
        await terminate(proc, launch)

    try:
        asyncio.run(stop())
        assert stray.wait(5) == -signal.SIGKILL
    finally:
        stray.kill()
        launch.cleanup()
