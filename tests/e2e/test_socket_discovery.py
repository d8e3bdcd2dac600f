"""How hermesctl finds the daemon without --socket, and what it says when nothing answers.

The daemon picks its socket from its own environment; the client tries every place a daemon
may have picked (hermesd.rpc.paths.client_socket_candidates), so a shell whose
XDG_RUNTIME_DIR differs from the daemon's still finds it. The "not running" hint names only
systemd units that are installed.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir

SYSTEM_UNITS = [
    os.path.join(d, u)
    for d in ("/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system")
    for u in ("hermesd.service", "hermesd.socket")
]


def test_a_daemon_in_hermes_home_is_found_from_a_shell_with_another_runtime_dir(
    start: Callable[..., DaemonProcess],
) -> None:
    home = short_tmpdir()
    daemon = start(home, socket_path=home / "hermesd.sock")  # where a daemon without XDG listens
    runtime = short_tmpdir("xdg-")
    out = run_hermesctl(["status"], env={"HERMES_HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)})
    assert out.returncode == 0, out.stderr
    assert f"pid {daemon.proc.pid}" in out.stdout


def test_a_stale_socket_file_is_passed_over_for_the_next_candidate(
    start: Callable[..., DaemonProcess],
) -> None:
    home = short_tmpdir()
    daemon = start(home, socket_path=home / "hermesd.sock")
    runtime = short_tmpdir("xdg-")
    (runtime / "hermes").mkdir()
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(runtime / "hermes" / "hermesd.sock"))
    stale.close()  # the file stays; nothing listens
    out = run_hermesctl(["status"], env={"HERMES_HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)})
    assert out.returncode == 0, out.stderr
    assert f"pid {daemon.proc.pid}" in out.stdout


def test_not_running_names_the_first_candidate_and_no_unit_that_is_not_installed() -> None:
    home, runtime, config = short_tmpdir(), short_tmpdir("xdg-"), short_tmpdir("cfg-")
    out = run_hermesctl(
        ["status"],
        env={
            "HERMES_HOME": str(home),
            "XDG_RUNTIME_DIR": str(runtime),
            "XDG_CONFIG_HOME": str(config),
            "XDG_DATA_HOME": str(config),
        },
    )
    assert out.returncode == 3
    assert f"{runtime}/hermes/hermesd.sock" in out.stderr
    assert "systemctl --user" not in out.stderr
    if not any(os.path.exists(p) for p in SYSTEM_UNITS):
        assert "systemctl" not in out.stderr
    assert "Traceback" not in out.stderr


def test_not_running_names_the_user_unit_when_it_is_installed() -> None:
    home, config = short_tmpdir(), short_tmpdir("cfg-")
    units = config / "systemd" / "user"
    units.mkdir(parents=True)
    (units / "hermesd.service").write_text("[Service]\nExecStart=hermesd\n")
    out = run_hermesctl(
        ["--socket", str(home / "none.sock"), "status"],
        env={"HERMES_HOME": str(home), "XDG_CONFIG_HOME": str(config)},
    )
    assert out.returncode == 3
    assert "`systemctl --user start hermesd`" in out.stderr
