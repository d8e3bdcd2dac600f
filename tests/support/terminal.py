"""Run a command on a real pseudo-terminal and read what it shows, like a person would.

The child gets the pty as stdin, stdout, stderr and controlling terminal (its own session), so
``isatty()`` is true, readline is active and writing ``\\x03`` delivers SIGINT as Ctrl-C does.
``expect`` waits for a regular expression in the output with ANSI escapes removed;
``wait_reading`` waits until the child is blocked waiting for input (read from /proc), so a key
such as Ctrl-C is sent when the child is ready for it, however busy the machine is.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import re
import subprocess
import termios
import threading
import time
from collections.abc import Sequence

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|[\x01\x02]")
# a cursor moved right over blank cells shows them (prompt_toolkit skips writing plain spaces)
FORWARD = re.compile(r"\x08?\x1b\[(\d*)C")


def screen_text(raw: bytes) -> str:
    """What ``raw`` shows, roughly: escapes removed, a cursor moved right as blanks, CR-LF as LF."""
    text = raw.decode("utf-8", "replace")
    text = FORWARD.sub(lambda m: " " * min(int(m.group(1) or 1), 200), text)
    return ANSI.sub("", text).replace("\r\n", "\n")


# The system calls a line editor waits for a key in (read, select, poll and their kin).
WAITING_SYSCALLS = {
    "x86_64": {0, 7, 23, 232, 270, 271, 281},
    "aarch64": {22, 63, 72, 73},
}.get(platform.machine(), set())


def waiting_for_input(pid: int) -> bool:
    """Whether process ``pid`` is asleep in a system call that waits for input."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/syscall") as f:
            call = f.read().split()[0]
    except (OSError, IndexError):
        return False
    return state == "S" and call.isdigit() and int(call) in WAITING_SYSCALLS


class Terminal:
    """A child process on a pseudo-terminal."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], cols: int = 160) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, bytes([40, 0, cols & 0xFF, cols >> 8, 0, 0, 0, 0]))

        def controlling_tty() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=controlling_tty,
            close_fds=True,
        )
        os.close(slave)
        self.master = master
        self._raw = bytearray()
        self._lock = threading.Condition()
        self._pos = 0
        self._asked = 0  # where to look for the next cursor-position request
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                data = b""
            with self._lock:
                if not data:
                    self._lock.notify_all()
                    return
                self._raw += data
                self._answer_cursor_requests()
                self._lock.notify_all()

    def _answer_cursor_requests(self) -> None:
        """Answer ``ESC [ 6 n`` as a terminal does (prompt_toolkit asks where the cursor is,
        and prints a warning into the screen when nobody answers)."""
        while (at := self._raw.find(b"\x1b[6n", self._asked)) >= 0:
            self._asked = at + 4
            row = min(bytes(self._raw[:at]).count(b"\n") + 1, 40)
            os.write(self.master, f"\x1b[{row};1R".encode())

    @property
    def raw(self) -> str:
        """Everything shown so far, escapes and all."""
        with self._lock:
            return bytes(self._raw).decode("utf-8", "replace")

    @property
    def text(self) -> str:
        """Everything shown so far, escapes removed, CR-LF as LF."""
        with self._lock:
            raw = bytes(self._raw)
        return screen_text(raw)

    def expect(self, pattern: str, timeout: float = 15.0) -> re.Match[str]:
        """Wait until ``pattern`` appears after the previous match; return the match."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                text = screen_text(bytes(self._raw))
                match = regex.search(text, self._pos)
                if match:
                    self._pos = match.end()
                    return match
                left = deadline - time.monotonic()
                if left <= 0 or (not self._reader.is_alive() and self.proc.poll() is not None):
                    raise AssertionError(
                        f"{pattern!r} not shown within {timeout}s; screen:\n{text}"
                    )
                self._lock.wait(min(left, 0.2))

    def wait_reading(self, timeout: float = 15.0) -> None:
        """Wait until the child sleeps waiting for input (twice in a row, 10 ms apart, so a
        wait between two writes of a prompt does not count)."""
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            seen = seen + 1 if waiting_for_input(self.proc.pid) else 0
            if seen >= 2:
                return
            time.sleep(0.01)
        raise AssertionError(f"the child never waited for input within {timeout}s:\n{self.text}")

    def send(self, data: str) -> None:
        """Type ``data`` (use ``\\r`` for Enter, ``\\x03`` for Ctrl-C, ``\\x04`` for Ctrl-D)."""
        os.write(self.master, data.encode())

    def sendline(self, line: str) -> None:
        self.send(line + "\r")

    def wait(self, timeout: float = 15.0) -> int:
        """Wait for the child to exit; return its status."""
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            os.close(self.master)
