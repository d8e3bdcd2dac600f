"""``./scripts/start`` as a new user runs it, in a copy of this checkout: the first run installs
only what running hermesd needs, a second run does not install again, the first config.yaml
takes the endpoint's only model (or leaves model.default to set, saying how), and the daemon it
starts answers hermesctl. The copy gets its own .venv (the first run builds it: about a minute)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import REPO, short_tmpdir
from tests.support.modelserver import ScriptedModelServer

# The scripts work on a git checkout and install from the package index: a source tree without
# .git (the Nix build's, whose sandbox has no network either) has neither.
pytestmark = pytest.mark.skipif(
    not (REPO / ".git").exists() or shutil.which("git") is None,
    reason="scripts/start needs a git checkout of this repository",
)


def _copy_checkout() -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    root = short_tmpdir("co-") / "hermesd"
    for name in filter(None, files):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            target = root / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return root


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HERMES_", "PYTHONPATH", "VIRTUAL_ENV", "NOTIFY_", "XDG_RUNTIME"))
    }
    env.update(
        HOME=str(home),
        HERMES_HOME=str(home / ".hermes"),
        HERMES_SKIP_APT="1",
        PYTHON=getattr(sys, "_base_executable", sys.executable),
        HERMES_MODEL_URL="http://127.0.0.1:9/v1",  # nothing listens there
    )
    env.update(extra)
    return env


def start(root: Path, home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(root / "scripts" / "start"), *args],
        env=_env(home, **extra),
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def checkout() -> Iterator[tuple[Path, subprocess.CompletedProcess[str]]]:
    root = _copy_checkout()
    first = start(root, short_tmpdir(), "--check-config")
    assert first.returncode == 0, first.stdout + first.stderr
    yield root, first


def test_the_first_run_installs_what_running_needs_and_no_test_packages(checkout) -> None:
    root, first = checkout
    assert "bootstrap: ready (runtime, hermesd " in first.stdout
    bin_dir = root / ".venv" / "bin"
    assert (bin_dir / "hermesd").exists() and (bin_dir / "hermesctl").exists()
    for tool in ("pytest", "ruff", "mypy"):
        assert not (bin_dir / tool).exists(), tool
    # (this machine's pip configuration names find-links folders that do not exist: pip's
    # own warning about them is the machine's, not the build's)
    warnings = [
        line
        for line in (first.stdout + first.stderr).splitlines()
        if "warn" in line.lower() and "WARNING: Location 'file://" not in line
    ]
    assert warnings == []


def test_a_second_run_does_not_install_again(checkout) -> None:
    root, _ = checkout
    installed = next((root / ".venv" / "lib").glob("python3*/site-packages/hermesd/__init__.py"))
    before = installed.stat().st_mtime_ns
    again = start(root, short_tmpdir(), "--check-config")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("bootstrap: up to date (runtime)\n")
    assert installed.stat().st_mtime_ns == before


def test_start_links_hermesctl_and_hermesd_into_local_bin(checkout) -> None:
    root, _ = checkout
    home = short_tmpdir()
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "hermesd").write_text("#!/bin/sh\n")  # someone else's: kept
    again = start(root, home, "--check-config", PATH="/usr/bin:/bin")
    assert again.returncode == 0, again.stderr
    link = home / ".local" / "bin" / "hermesctl"
    assert link.is_symlink() and link.resolve() == (root / ".venv" / "bin" / "hermesctl").resolve()
    assert not (home / ".local" / "bin" / "hermesd").is_symlink()
    assert f"{home / '.local' / 'bin'} is not on PATH" in again.stderr
    version = subprocess.run([str(link), "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("hermesctl ")


def test_a_changed_source_is_installed_on_the_next_run(checkout) -> None:
    root, _ = checkout
    marker = root / "hermesd" / "daemon" / "doctor.py"
    marker.write_text(marker.read_text() + "\n# changed\n")
    changed = start(root, short_tmpdir(), "--check-config")
    assert changed.returncode == 0, changed.stderr
    assert "bootstrap: ready (runtime, " in changed.stdout
    installed = next((root / ".venv" / "lib").glob("python3*/site-packages/hermesd/daemon"))
    assert (installed / "doctor.py").read_text().endswith("# changed\n")


def test_the_first_config_takes_the_endpoints_only_model(checkout) -> None:
    root, _ = checkout
    home = short_tmpdir()
    with ScriptedModelServer() as model:
        out = start(root, home, "--check-config", HERMES_MODEL_URL=model.url)
    assert out.returncode == 0, out.stderr
    text = (home / ".hermes" / "config.yaml").read_text()
    assert f"  base_url: {model.url}\n  default: scripted-model" in text
    assert "model.default is scripted-model, the only model" in out.stdout


def test_without_a_model_list_the_first_config_leaves_model_default_to_set(checkout) -> None:
    root, _ = checkout
    home = short_tmpdir()
    out = start(root, home, "--check-config")
    assert out.returncode == 0, out.stderr
    text = (home / ".hermes" / "config.yaml").read_text()
    assert "\n  # default: NAME" in text and "hermesctl config set model.default NAME" in text
    assert "set the model with:" in out.stdout


def test_scripts_start_runs_a_daemon_that_hermesctl_talks_to(checkout) -> None:
    root, _ = checkout
    home, runtime = short_tmpdir(), short_tmpdir()
    env = _env(home, XDG_RUNTIME_DIR=str(runtime))
    proc = subprocess.Popen(
        [str(root / "scripts" / "start")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        sock = runtime / "hermes" / "hermesd.sock"
        deadline = time.monotonic() + 60
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.returncode
            time.sleep(0.05)
        status = subprocess.run(
            [str(root / ".venv" / "bin" / "hermesctl"), "status"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        assert f"home:        {home / '.hermes'}" in status.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def _packages(name: str) -> set[str]:
    text = (REPO / "scripts" / "bootstrap").read_text()
    block = text.split(f"{name}=(", 1)[1].split(")", 1)[0]
    return set(block.split())


def test_running_hermesd_needs_no_test_or_nix_packages() -> None:
    runtime, tests = _packages("runtime_packages"), _packages("test_packages")
    assert {"nix-bin", "tmux", "openssl"} <= tests
    assert not ({"nix-bin", "tmux", "openssl"} & runtime)
    assert {"python3-venv", "libsystemd-dev", "git", "bubblewrap"} <= runtime
