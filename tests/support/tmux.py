"""A command in a detached tmux window, read back as the screen a person would see.

Where ``tests.support.terminal`` gives the byte stream, this gives the final screen
(``tmux capture-pane``): text that was drawn and then erased or redrawn is gone, as on a real
terminal. Each window has its own tmux server (a socket in a temporary directory).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path


class TmuxWindow:
    """One command running in its own tmux server, ``cols`` × ``rows`` cells."""

    def __init__(
        self, argv: Sequence[str], env: dict[str, str], cols: int = 100, rows: int = 50
    ) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="tmux-")
        self.socket = Path(self._dir.name) / "s"
        command = " ".join(shlex.quote(a) for a in argv)
        self._tmux(
            "new-session",
            "-d",
            "-x",
            str(cols),
            "-y",
            str(rows),
            "-s",
            "t",
            "-e",
            "TERM=xterm-256color",
            *(a for k, v in env.items() for a in ("-e", f"{k}={v}")),
            f"{command}; echo '[exit '$?']'; sleep 600",
            env=env,
        )

    def _tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
        )
        if done.returncode != 0:
            raise AssertionError(f"tmux {args[0]} failed: {done.stderr}")
        return done.stdout

    def screen(self, escapes: bool = False) -> str:
        """What the window shows now (with colour escapes when ``escapes``)."""
        return self._tmux("capture-pane", "-p", "-J", *(["-e"] if escapes else []), "-t", "t")

    def wait_for(self, pattern: str, timeout: float = 20.0) -> str:
        """Wait until the screen matches ``pattern``; return the screen."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            if re.search(pattern, shown):
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not on the screen within {timeout}s:\n{shown}")
            time.sleep(0.1)

    def type(self, text: str, enter: bool = True) -> None:
        """Type ``text`` (literally), then Enter when ``enter``."""
        self._tmux("send-keys", "-t", "t", "-l", text)
        if enter:
            self._tmux("send-keys", "-t", "t", "Enter")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True)
        self._dir.cleanup()
