"""An attacker's thread for race tests: swap a path between two things, atomically, non-stop.

`Flipper` exchanges a path with a prepared twin (a real directory and a symlink to something
protected, say) with ``renameat2(RENAME_EXCHANGE)``, so the path always exists and is, at any
instant, one or the other; a tool resolving, checking and opening it sees whichever the
scheduler gives it.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from types import TracebackType

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> None:
    """Swap the directory entries ``a`` and ``b`` in one step."""
    if _libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


class Flipper:
    """``with Flipper(path, twin):`` swaps them continuously until the block ends."""

    def __init__(self, path: Path, twin: Path) -> None:
        self.path, self.twin = path, twin
        self.flips = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flipper", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            exchange(self.path, self.twin)
            self.flips += 1

    def __enter__(self) -> Flipper:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        if self.flips % 2:  # leave things as they were found
            exchange(self.path, self.twin)
