"""hermesd as a systemd service: notify protocol, watchdog, socket activation, journald, units."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermesd.daemon import logs
from tests.support.daemon import REPO, NotifyListener, daemon_env, short_tmpdir
from tests.support.waiting import wait_until

UNITS = REPO / "contrib" / "systemd"


def test_ready_is_sent_only_once_the_socket_accepts(daemon) -> None:
    msg = daemon.notify.wait_for("READY=1")
    assert "STATUS=Listening on" in msg
    assert f"MAINPID={daemon.proc.pid}" in msg
    # READY=1 arrived before this line ran, so the socket must already answer.
    assert daemon.call("ping")["pong"]
    assert daemon.notify.messages.index(msg) > 0  # a STATUS=Starting line came first


def test_stopping_is_sent_on_sigterm(daemon) -> None:
    daemon.signal(signal.SIGTERM)
    assert daemon.proc.wait(15) == 0
    assert "STOPPING=1" in daemon.notify.wait_for("STOPPING=1")


def test_watchdog_is_pinged_when_armed(start) -> None:
    daemon = start(env={"WATCHDOG_USEC": "200000"})
    wait_until(lambda: daemon.notify.count("WATCHDOG=1") >= 5, 15, "five watchdog pings")


def test_watchdog_for_another_pid_is_ignored(start) -> None:
    daemon = start(env={"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"})
    time.sleep(0.6)
    assert daemon.notify.count("WATCHDOG=1") == 0


def _activate(home: Path, sock: Path, notify: NotifyListener) -> subprocess.Popen:
    tool = shutil.which("systemd-socket-activate")
    if tool is None:
        pytest.skip("systemd-socket-activate not installed")
    env = daemon_env(home, {"NOTIFY_SOCKET": str(notify.path)})
    argv = [tool, "-l", str(sock)]
    for name in ("HERMES_HOME", "NOTIFY_SOCKET", "PYTHONPATH", "PATH", "HOME"):
        if name in env:
            argv += ["-E", f"{name}={env[name]}"]
    argv += [sys.executable, "-m", "hermesd"]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(100):
        if sock.exists():
            break
        time.sleep(0.05)
    return proc


def _stop(proc: subprocess.Popen, notify: NotifyListener) -> str:
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=20)[0].decode()
    notify.close()
    assert proc.returncode == 0, out
    return out


def test_socket_activation_uses_the_passed_socket(home) -> None:
    run = short_tmpdir()
    sock = run / "activated.sock"
    notify = NotifyListener(run / "notify.sock")
    proc = _activate(home, sock, notify)
    try:
        from hermesctl.client import Client

        # The daemon starts on the first connection; the call waits for it.
        with Client.connect(sock, timeout=30) as c:
            info = c.call("status")
        assert info["socket_activated"] is True
        assert info["socket"] == str(sock)
        notify.wait_for("READY=1")
        assert not (home / "hermesd.sock").exists()  # it did not create its own
    finally:
        _stop(proc, notify)
    assert sock.exists()  # the socket belongs to the manager, not to hermesd


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")
def test_activated_group_socket_admits_its_group_without_socket_group_config(home) -> None:
    import grp
    import pwd

    from tests.support.otheruser import talk_as

    nobody = pwd.getpwnam("nobody")
    run = short_tmpdir()
    os.chmod(run, 0o755)
    sock = run / "activated.sock"
    notify = NotifyListener(run / "notify.sock")
    proc = _activate(home, sock, notify)
    try:
        os.chown(sock, -1, nobody.pw_gid)  # what SocketGroup= and SocketMode=0660 produce
        os.chmod(sock, 0o660)
        out = talk_as(nobody.pw_uid, nobody.pw_gid, sock, [[0, 1, "ping", []]])
        replies = [m for m in out.get("received", []) if m[0] == 1]
        assert replies and replies[0][2] is None, out
    finally:
        log = _stop(proc, notify)
    assert f"admitting members of gid {grp.getgrgid(nobody.pw_gid).gr_gid}" in log


def test_journal_stream_detection_follows_journal_stream(monkeypatch) -> None:
    st = os.fstat(sys.stderr.fileno())
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    assert logs.stderr_is_journal()
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")
    assert not logs.stderr_is_journal()
    monkeypatch.setenv("JOURNAL_STREAM", "garbage")
    assert not logs.stderr_is_journal()


def test_logs_are_plain_lines_on_stderr_outside_the_journal(daemon) -> None:
    assert "INFO hermesd.daemon.main: hermesd" in daemon.log()


def _verify_env() -> dict[str, str]:
    return {**os.environ, "SYSTEMD_LOG_LEVEL": "warning"}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_shipped_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify needs ExecStart's binary to exist: point it at a stand-in hermesd.
    fake = tmp_path / "bin" / "hermesd"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    for name in ("hermesd.service", "hermesd.socket"):
        text = (UNITS / name).read_text().replace("ExecStart=hermesd", f"ExecStart={fake}")
        (tmp_path / name).write_text(text)
    proc = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--man=no",
            str(tmp_path / "hermesd.socket"),
            str(tmp_path / "hermesd.service"),
        ],
        capture_output=True,
        text=True,
        env=_verify_env(),
        timeout=60,
    )
    problems = [
        line
        for line in (proc.stdout + proc.stderr).splitlines()
        if "hermesd" in line and "Failed to" not in line.split(":")[0]
    ]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert problems == [], problems


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_shipped_service_exposure_is_at_most_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            "systemd-analyze",
            "security",
            "--offline=true",
            "--no-pager",
            str(UNITS / "hermesd.service"),
        ],
        capture_output=True,
        text=True,
        env=_verify_env(),
        timeout=60,
    )
    line = [x for x in proc.stdout.splitlines() if "Overall exposure level" in x]
    assert line, proc.stdout + proc.stderr
    score = float(line[0].split("level for")[1].split(":")[1].split()[0])
    assert score <= 2.0, line[0]


# --- where ExecStart= finds hermesd, what Documentation= names -------------------------------


def _system_root(root: Path) -> Path:
    """A root directory with the host's targets and slices and the shipped units installed."""
    units = root / "usr" / "lib" / "systemd" / "system"
    units.mkdir(parents=True)
    for host in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")):
        for path in host.glob("*.target") if host.is_dir() else []:
            shutil.copy(path, units / path.name)
        for path in host.glob("*.slice") if host.is_dir() else []:
            shutil.copy(path, units / path.name)
    etc = root / "etc" / "systemd" / "system"
    etc.mkdir(parents=True)
    for name in ("hermesd.service", "hermesd.socket"):
        shutil.copy(UNITS / name, etc / name)
    (root / "bin").mkdir()
    shutil.copy("/bin/kill", root / "bin" / "kill")
    return etc


def _verify_in(root: Path, etc: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--man=no",
            f"--root={root}",
            str(etc / "hermesd.service"),
            str(etc / "hermesd.socket"),
        ],
        capture_output=True,
        text=True,
        env=_verify_env(),
        timeout=60,
    )


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
@pytest.mark.parametrize("where", ["usr/local/bin", "usr/bin"], ids=["pip-as-root", "package"])
def test_the_system_unit_finds_hermesd_where_pip_or_a_package_put_it(
    tmp_path: Path, where: str
) -> None:
    etc = _system_root(tmp_path)
    program = tmp_path / where / "hermesd"
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    proc = _verify_in(tmp_path, etc)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_without_hermesd_installed_verify_says_so(tmp_path: Path) -> None:
    # the counterpart of the test above: the lookup is real
    proc = _verify_in(tmp_path, _system_root(tmp_path))
    assert "Command hermesd is not executable" in proc.stdout + proc.stderr


def test_documentation_names_a_file_the_documented_install_puts_there() -> None:
    guide = (REPO / "docs" / "systemd.md").read_text()
    for path in [*UNITS.glob("hermesd.*"), *(UNITS / "user").glob("hermesd.*")]:
        docs = [x for x in path.read_text().splitlines() if x.startswith("Documentation=")]
        assert docs == ["Documentation=file:///usr/share/doc/hermesd/systemd.md"], path
    assert "install -Dm644 docs/systemd.md /usr/share/doc/hermesd/systemd.md" in guide


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_shipped_user_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "hermesd"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    for name in ("hermesd.service", "hermesd.socket"):
        text = (UNITS / "user" / name).read_text().replace("ExecStart=hermesd", f"ExecStart={fake}")
        (tmp_path / name).write_text(text)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    proc = subprocess.run(
        [
            "systemd-analyze",
            "--user",
            "verify",
            "--man=no",
            str(tmp_path / "hermesd.socket"),
            str(tmp_path / "hermesd.service"),
        ],
        capture_output=True,
        text=True,
        env={**_verify_env(), "XDG_RUNTIME_DIR": str(runtime)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [x for x in (proc.stdout + proc.stderr).splitlines() if "hermesd" in x] == []


def _unit(path: Path) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


def test_the_user_units_run_a_daemon_hermesctl_finds_without_being_told(home: Path) -> None:
    tool = shutil.which("systemd-socket-activate")
    if tool is None:
        pytest.skip("systemd-socket-activate not installed")
    user_home, runtime = short_tmpdir(), short_tmpdir()
    os.chmod(runtime, 0o700)

    def expand(value: str) -> str:  # the specifiers a user manager fills in
        return value.replace("%h", str(user_home)).replace("%t", str(runtime))

    socket_unit, service_unit = (
        _unit(UNITS / "user" / f"hermesd.{k}") for k in ("socket", "service")
    )
    sock = Path(expand(socket_unit["ListenStream"][0]))
    sock.parent.mkdir(mode=0o700)
    env = daemon_env(home)
    del env["HERMES_HOME"]
    for assignment in service_unit["Environment"]:
        name, _, value = assignment.partition("=")
        env[name] = expand(value)
    notify = NotifyListener(runtime / "notify.sock")
    env["NOTIFY_SOCKET"] = str(notify.path)
    argv = [tool, "-l", str(sock)]
    for name in ("HERMES_HOME", "NOTIFY_SOCKET", "PYTHONPATH", "PATH"):
        argv += ["-E", f"{name}={env[name]}"]
    argv += [sys.executable, "-m", "hermesd"]  # ExecStart=hermesd, from this checkout
    if os.geteuid() == 0:
        argv.append("--allow-root")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        from tests.support.daemon import run_hermesctl

        out = run_hermesctl(
            ["--json", "status"], env={"XDG_RUNTIME_DIR": str(runtime), "HOME": str(user_home)}
        )
        assert out.returncode == 0, out.stderr
        status = json.loads(out.stdout)
        assert status["socket_activated"] is True
        assert status["home"] == str(user_home / ".hermes")
        assert (user_home / ".hermes").is_dir()
    finally:
        _stop(proc, notify)
