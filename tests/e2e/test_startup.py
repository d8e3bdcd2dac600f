"""Start-up as a person meets it: a slow plugin never holds the socket, an unusable --home is a
sentence and exit 73, and safe mode says so where plugins are listed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.daemon import DaemonProcess, daemon_env, run_hermesctl, short_tmpdir
from tests.support.plugin_factory import write_plugin

ENV = {"HERMES_BUNDLED_PLUGINS": "/nonexistent"}

# register() waits until the test creates HERMES_HOME/go (at most 60 s).
SLOW_INIT = """
import os, time
from pathlib import Path

def register(ctx):
    go = Path(os.environ["HERMES_HOME"]) / "go"
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
"""


def ctl(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_hermesctl(["--socket", str(daemon.socket), *args])


@pytest.fixture
def slow(start) -> DaemonProcess:
    home = short_tmpdir()
    write_plugin(home / "plugins", "slow", SLOW_INIT)
    return start(home, config="plugins:\n  load_timeout: 120\n", env=ENV)


def test_a_slow_plugin_does_not_hold_the_socket_and_status_says_plugins_are_loading(
    slow: DaemonProcess,
) -> None:
    status = slow.call("status")  # READY came, and status answers, while register() waits
    assert status["plugins_loading"] is True
    out = ctl(slow, "status")
    assert out.returncode == 0 and "plugins:     0 (loading)" in out.stdout
    (slow.home / "go").write_text("")


def test_plugins_info_and_list_wait_for_the_loading_plugins(slow: DaemonProcess) -> None:
    with slow.client() as c:
        info = c.send("plugins.info", {"name": "slow"})
        listing = c.send("plugins.list")
        (slow.home / "go").write_text("")
        assert c.wait(info, timeout=30)["state"] == "loaded"
        assert [p["state"] for p in c.wait(listing, timeout=30)["plugins"]] == ["loaded"]
    assert slow.call("status")["plugins_loading"] is False


def test_plugins_info_during_a_reload_waits_instead_of_saying_not_found(
    slow: DaemonProcess,
) -> None:
    (slow.home / "go").write_text("")
    with slow.client() as admin, slow.client() as reader:
        assert reader.call("plugins.info", {"name": "slow"})["state"] == "loaded"
        (slow.home / "go").unlink()
        reload = admin.send("plugins.reload")
        info = reader.send("plugins.info", {"name": "slow"})
        (slow.home / "go").write_text("")
        assert reader.wait(info, timeout=30)["state"] == "loaded"
        assert admin.wait(reload, timeout=30)["loaded"] == ["slow"]


def test_a_reload_summary_counts_every_plugin(start) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "fine", "def register(ctx):\n    pass\n")
    write_plugin(home / "plugins", "broken", "def register(ctx):\n    raise RuntimeError('no')\n")
    write_plugin(
        home / "plugins",
        "needy",
        "def register(ctx):\n    pass\n",
        manifest="name: needy\nrequires_env:\n  - NEEDY_TOKEN\n",
    )
    write_plugin(home / "plugins", "muted", "def register(ctx):\n    pass\n")
    daemon = start(home, config="plugins:\n  disabled: [muted]\n", env=ENV)
    out = ctl(daemon, "plugins", "reload")
    assert out.stdout.splitlines()[0] == (
        "Reloaded plugins: 4 found — 1 loaded, 1 failed, 1 missing env, 1 disabled"
    )


# --- an unusable --home --------------------------------------------------------------------------


def _hermesd(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hermesd", *args]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    return subprocess.run(
        argv, env=daemon_env(short_tmpdir()), capture_output=True, text=True, timeout=30
    )


def test_a_home_under_a_regular_file_exits_73_with_a_sentence() -> None:
    blocker = short_tmpdir() / "a-file"
    blocker.write_text("")
    out = _hermesd("--home", str(blocker / "home"))
    assert out.returncode == 73
    assert out.stderr.startswith(f"hermesd: cannot create the state directory {blocker}/home")
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1


def test_a_home_that_is_a_file_exits_73_with_a_sentence() -> None:
    blocker = short_tmpdir() / "a-file"
    blocker.write_text("")
    out = _hermesd("--home", str(blocker))
    assert (out.returncode, out.stderr) == (
        73,
        f"hermesd: the state directory {blocker} is not a directory\n",
    )


def test_a_home_that_cannot_be_created_even_by_root_exits_73() -> None:
    out = _hermesd("--home", "/proc/hermes-cannot-be-here")
    assert out.returncode == 73
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("hermesd: cannot create the state directory /proc/")


# --- safe mode -----------------------------------------------------------------------------------


def test_safe_mode_is_reported_by_plugins_list_and_status(start) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "fine", "def register(ctx):\n    pass\n")
    daemon = start(home, env={**ENV, "HERMES_SAFE_MODE": "1"})
    listing = ctl(daemon, "plugins", "list")
    assert "Safe mode (HERMES_SAFE_MODE=1): no plugins are loaded." in listing.stdout
    status = ctl(daemon, "status")
    assert "safe mode: HERMES_SAFE_MODE=1" in status.stdout
    assert daemon.call("status")["safe_mode"] is True
