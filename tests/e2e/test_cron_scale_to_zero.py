"""Scale to zero under socket activation, as far as it runs without systemd as PID 1.

hermesd is started by ``systemd-socket-activate`` (as a socket unit would) with
``cron.scale_to_zero``. ``systemd-run`` and ``systemctl`` are stand-in scripts on PATH that
record their arguments (systemctl cannot work here). Once idle, the daemon arms the timer and
exits; the test then plays systemd's part: it listens again and runs the command the timer
would run at the recorded time, and the daemon that starts runs the job due then.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hermesctl.client import Client
from tests.support.cron import T0, cron_config, prompts_seen
from tests.support.daemon import NotifyListener, daemon_env, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, reply

RECORDER = """#!{python}
import json, os, sys
with open(os.environ["CRON_WAKE_LOG"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
"""


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=lambda request: reply("done")) as server:
        yield server


def _activate(home: Path, sock: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    tool = shutil.which("systemd-socket-activate")
    if tool is None:
        pytest.skip("systemd-socket-activate not installed")
    argv = [tool, "-l", str(sock)]
    for name, value in env.items():
        if name in ("HERMES_HOME", "NOTIFY_SOCKET", "PYTHONPATH", "PATH", "HOME", "CRON_WAKE_LOG"):
            argv += ["-E", f"{name}={value}"]
        if name == "HERMESD_TEST_CLOCK":
            argv += ["-E", f"{name}={value}"]
    argv += [sys.executable, "-m", "hermesd"]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(100):
        if sock.exists():
            break
        time.sleep(0.05)
    return proc


def _recorded(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_an_idle_daemon_arms_a_wake_timer_exits_and_the_wake_runs_the_job(model, home) -> None:
    run = short_tmpdir("stz-")
    bin_dir = run / "bin"
    bin_dir.mkdir()
    for name in ("systemd-run", "systemctl"):
        (bin_dir / name).write_text(RECORDER.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    wake_log = run / "wake.log"
    (home / "config.yaml").write_text(cron_config(model, "  scale_to_zero: true\n  idle_exit: 1\n"))
    sock = run / "hermesd.sock"
    notify = NotifyListener(run / "notify.sock")
    env = daemon_env(
        home,
        {
            "NOTIFY_SOCKET": str(notify.path),
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "CRON_WAKE_LOG": str(wake_log),
            "HERMESD_TEST_CLOCK": str(T0),
        },
    )
    first = _activate(home, sock, env)
    try:
        with Client.connect(sock, timeout=30) as c:
            assert c.call("status")["scale_to_zero"] is True
            job = c.call("cron.create", {"schedule": "every 1h", "prompt": "WAKE-1 report"})
        out = first.communicate(timeout=60)[0].decode()  # it exits once idle
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGTERM)
            first.wait(20)
    assert first.returncode == 0, out
    assert "scale to zero: idle" in out
    recorded = _recorded(wake_log)
    assert recorded[0] == [
        "systemctl",
        "--user",
        "stop",
        "hermesd-cron-wake.timer",
        "hermesd-cron-wake.service",
    ]
    armed = recorded[1]
    assert armed[:3] == ["systemd-run", "--user", "--unit=hermesd-cron-wake"]
    assert "--on-calendar=2026-03-02 09:00:00 UTC" in armed
    wake_command = armed[armed.index("--") + 1 :]
    assert wake_command[-3:] == ["--socket", str(sock), "ping"]
    assert prompts_seen(model, "WAKE-1") == 0

    # systemd's part: the socket unit listens again; at 09:00 the timer runs its command
    wake_at = datetime(2026, 3, 2, 9, 0, tzinfo=UTC).timestamp()
    env["HERMESD_TEST_CLOCK"] = str(wake_at)
    notify2 = NotifyListener(run / "notify2.sock")
    env["NOTIFY_SOCKET"] = str(notify2.path)
    if sock.exists():
        sock.unlink()
    second = _activate(home, sock, env)
    try:
        woke = subprocess.run(wake_command, env=env, capture_output=True, text=True, timeout=60)
        assert woke.returncode == 0, woke.stderr
        deadline = time.monotonic() + 30
        while prompts_seen(model, "WAKE-1") == 0:
            assert time.monotonic() < deadline, "the woken daemon did not run the job"
            time.sleep(0.1)
        with Client.connect(sock, timeout=30) as c:
            deadline = time.monotonic() + 30
            while (runs := c.call("cron.runs", {"job_id": job["id"]})["runs"])[0][
                "status"
            ] == "running":
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert runs[0]["status"] == "ok"
    finally:
        if second.poll() is None:
            second.send_signal(signal.SIGTERM)
            second.wait(30)
        notify.close()
        notify2.close()
