"""Start a real hermesd process for a test and talk to it.

Readiness is observed the way systemd observes it: the test binds a datagram ``NOTIFY_SOCKET``
and waits for ``READY=1``. Every message the daemon sends there is kept for assertions.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from hermesctl.client import Client

REPO = Path(__file__).resolve().parents[2]


def checkout_pythonpath(existing: str | None = None) -> str:
    """``PYTHONPATH`` that puts this checkout first: a child ``python -m hermesd`` then runs the
    code under test, not whatever copy was last installed into the virtualenv."""
    parts = [str(REPO)] + [p for p in (existing or "").split(os.pathsep) if p and p != str(REPO)]
    return os.pathsep.join(parts)


class NotifyListener:
    """A datagram socket standing in for systemd's notification socket."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[str] = []
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._cond:
                self.messages.append(data.decode())
                self._cond.notify_all()

    def wait_for(self, needle: str, timeout: float = 15.0) -> str:
        """Wait until a message containing ``needle`` arrives; return it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for msg in self.messages:
                    if needle in msg:
                        return msg
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {needle!r} on NOTIFY_SOCKET; got {self.messages}")
                self._cond.wait(left)

    def count(self, needle: str) -> int:
        with self._cond:
            return sum(needle in m for m in self.messages)

    def close(self) -> None:
        self._stop = True
        self.sock.close()


_SCRATCH: list[str] = []


def short_tmpdir(prefix: str = "hd-") -> Path:
    """A short private temp dir (Unix socket paths are limited to 107 bytes).

    Removed when the test session ends (see ``remove_scratch_dirs``).
    """
    path = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    _SCRATCH.append(path)
    return Path(path)


def remove_scratch_dirs() -> None:
    """Remove every directory ``short_tmpdir`` made, unless HERMES_KEEP_TMP=1 asks to keep them."""
    if os.environ.get("HERMES_KEEP_TMP") == "1":
        return
    while _SCRATCH:
        shutil.rmtree(_SCRATCH.pop(), ignore_errors=True)


def daemon_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment for a test daemon."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("HERMES_", "OPENAI_", "NOTIFY_", "LISTEN_", "WATCHDOG_", "JOURNAL_", "XDG_RUNTIME")
        )
    }
    env["HERMES_HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = checkout_pythonpath(env.get("PYTHONPATH"))
    # The test process has no terminal to confirm plugin installs and sandbox changes on, as
    # the person would (docs/sandbox.md); tests of that rule turn it back on.
    env["HERMESD_CONFIRM_WIDENING"] = "off"
    env.update(extra or {})
    return env


def child_pids(pid: int) -> list[int]:
    """The child processes of ``pid``."""
    return [int(kid) for kid in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


class DaemonProcess:
    """A running hermesd with its home, socket, log and notify messages."""

    def __init__(
        self,
        home: Path,
        socket_path: Path,
        proc: subprocess.Popen[bytes],
        notify: NotifyListener,
        log_path: Path,
    ) -> None:
        self.home = home
        self.socket = socket_path
        self.proc = proc
        self.notify = notify
        self.log_path = log_path
        self._clients: list[Client] = []  # closed by stop(), once the daemon is gone
        #: our end of the test-clock channel (tests/support/cron.py), when one was handed over
        self.test_clock: socket.socket | None = None

    def client(self, hello: bool = True, timeout: float = 15.0) -> Client:
        """A connected client (hello already sent)."""
        client = Client.connect(self.socket, timeout=timeout, hello=hello)
        self._clients.append(client)
        return client

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        with Client.connect(self.socket, timeout=15.0, hello=True) as c:
            return c.call(method, params)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(
                    f"hermesd did not stop within {timeout}s:\n{self.log()}"
                ) from None
        self.notify.close()
        while self._clients:
            self._clients.pop().close()
        if self.test_clock is not None:
            self.test_clock.close()
        return self.proc.returncode


def start_daemon(
    home: Path | None = None,
    *,
    config: str | None = None,
    env: dict[str, str] | None = None,
    args: list[str] | None = None,
    socket_path: Path | None = None,
    wait_ready: bool = True,
    argv_prefix: list[str] | None = None,
    create_home: bool = True,
    timeout: float = 30.0,
    pass_fds: tuple[int, ...] = (),
) -> DaemonProcess:
    """Start ``python -m hermesd`` with a temporary HERMES_HOME and wait for READY=1;
    ``pass_fds`` are inherited by the daemon."""
    home = home or short_tmpdir()
    if create_home:
        home.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (home / "config.yaml").write_text(config)
    run = short_tmpdir("hr-")
    sock = socket_path or (run / "hermesd.sock")
    notify = NotifyListener(run / "notify.sock")
    log_path = run / "hermesd.log"
    full_env = daemon_env(home, env)
    full_env["NOTIFY_SOCKET"] = str(notify.path)
    argv = (argv_prefix or []) + [sys.executable, "-m", "hermesd", "--socket", str(sock)]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    argv += args or []
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            argv,
            env=full_env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=str(run),
            pass_fds=pass_fds,
        )
    daemon = DaemonProcess(home, sock, proc, notify, log_path)
    if wait_ready:
        deadline = time.monotonic() + timeout
        while True:
            try:
                notify.wait_for("READY=1", timeout=0.2)
                break
            except TimeoutError:
                if proc.poll() is not None:
                    notify.close()
                    raise AssertionError(
                        f"hermesd exited with {proc.returncode} before READY:\n{daemon.log()}"
                    ) from None
                if time.monotonic() > deadline:
                    proc.kill()
                    raise AssertionError(
                        f"hermesd not ready in {timeout}s:\n{daemon.log()}"
                    ) from None
    return daemon


def run_hermesctl(
    args: list[str],
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run the hermesctl CLI as a separate process."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    full_env["PYTHONPATH"] = checkout_pythonpath(full_env.get("PYTHONPATH"))
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "hermesctl", *args],
        env=full_env,
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
    )


def follow_turn(c: Client, turn_id: str, timeout: float = 20) -> list[dict[str, Any]]:
    """The ``session.event`` notifications of one turn, up to and including turn.finished."""
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        note = c.next_notification(timeout=deadline - time.monotonic())
        if note is None:
            break
        if note.method == "session.event" and note.params[0].get("turn_id") == turn_id:
            events.append(note.params[0])
            if events[-1]["type"] == "turn.finished":
                return events
    raise AssertionError(f"turn {turn_id} did not finish; events: {events}")


def send_and_follow(c: Client, sid: str, message: str, timeout: float = 20) -> list[dict[str, Any]]:
    """Start a turn with ``session.send`` and return its events (see ``follow_turn``)."""
    turn_id = c.call("session.send", {"session_id": sid, "message": message})["turn_id"]
    return follow_turn(c, turn_id, timeout)
