"""Running hermesctl's completion scripts in the real shells (bash, fish) for tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import DaemonProcess, checkout_pythonpath, run_hermesctl, short_tmpdir


def completion_env(daemon: DaemonProcess) -> dict[str, str]:
    """An environment whose `hermesctl` is this checkout's, talking to ``daemon``."""
    bin_dir = short_tmpdir("bin-")
    wrapper = bin_dir / "hermesctl"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m hermesctl "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(
        PATH=f"{bin_dir}:{env.get('PATH', '')}",
        PYTHONPATH=checkout_pythonpath(env.get("PYTHONPATH")),
        HERMES_SOCKET=str(daemon.socket),
        HERMES_HOME=str(daemon.home),
    )
    return env


def script(shell: str, env: dict[str, str]) -> Path:
    out = run_hermesctl(["completion", shell], env=env)
    assert out.returncode == 0, out.stderr
    path = short_tmpdir("comp-") / f"hermesctl.{shell}"
    path.write_text(out.stdout)
    return path


def bash_complete(env: dict[str, str], *words: str) -> list[str]:
    """What bash offers for the last of ``words`` (the word being typed)."""
    line = " ".join(("hermesctl", *words))
    quoted = " ".join(f"'{w}'" for w in ("hermesctl", *words))
    program = (
        f"source {script('bash', env)}\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words)}; COMP_LINE='{line}'; "
        f"COMP_POINT={len(line)}\n"
        f"_hermesctl_with_plugins hermesctl '{words[-1]}' '{words[-2] if len(words) > 1 else ''}'\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(
        ["bash", "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def fish_complete(env: dict[str, str], line: str) -> list[str]:
    program = f"source {script('fish', env)}; complete --do-complete '{line}'"
    out = subprocess.run(
        ["fish", "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [row.split("\t")[0] for row in out.stdout.splitlines()]
