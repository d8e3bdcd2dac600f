"""``sandbox.limits``: the keys, the rlimits a call gets, and what ``status`` says when a limit
cannot be enforced here."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from hermesd.daemon.config import Config
from hermesd.sandbox import limits
from hermesd.sandbox.confine import Sandbox
from hermesd.sandbox.limits import MB, Limits


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
