"""`MemoryFiles`: the two memory files on disk and the only code that reads or writes them.

``$HERMES_HOME/memories/MEMORY.md`` (target ``memory``) and ``USER.md`` (target ``user``) hold
entries separated by ``"\\n§\\n"``. A change is a read-modify-write under `locked`: a lock in
this process (threads of the daemon) and an ``fcntl`` lock on ``<file>.lock`` (other processes,
such as the reference's CLI on the same home). A file is replaced by writing a temporary file
in the same directory, fsyncing it and renaming it over the old one, so a reader or a crash
sees the old file or the new one, never half of either. The files are created 0600 (the
temporary file's mode) in a 0700 folder: they describe a person. Blocking: call from a worker
thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ENTRY_DELIMITER = "\n§\n"
TARGETS = ("memory", "user")
FILE_NAMES = {"memory": "MEMORY.md", "user": "USER.md"}
DEFAULT_LIMITS = {"memory": 2200, "user": 1375}
_TEMP_PREFIX = ".mem_"
_TEMP_SUFFIX = ".tmp"


def parse(raw: str) -> list[str]:
    """The entries of a file's text: split on the delimiter, stripped, empties dropped."""
    if not raw.strip():
        return []
    return [e.strip() for e in raw.split(ENTRY_DELIMITER) if e.strip()]


def dedupe(entries: list[str]) -> list[str]:
    """``entries`` without repeats, first occurrence kept."""
    return list(dict.fromkeys(entries))


def joined_length(entries: list[str]) -> int:
    """Characters the entries take once joined: what the limits count."""
    return len(ENTRY_DELIMITER.join(entries)) if entries else 0


@dataclass
class Limits:
    """Character limits per target (``memory.memory_char_limit``, ``memory.user_char_limit``)."""

    memory: int = DEFAULT_LIMITS["memory"]
    user: int = DEFAULT_LIMITS["user"]

    def of(self, target: str) -> int:
        return self.user if target == "user" else self.memory


class MemoryFiles:
    """The memory directory of one HERMES_HOME."""

    def __init__(self, home: Path, limits: Limits | None = None) -> None:
        self.dir = home / "memories"
        self.limits = limits or Limits()
        self._locks = {t: threading.Lock() for t in TARGETS}

    def path(self, target: str) -> Path:
        return self.dir / FILE_NAMES[target]

    def read_raw(self, target: str) -> str:
        """The file's text ("" when it does not exist or cannot be read)."""
        try:
            return self.path(target).read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("cannot read %s: %s", self.path(target), exc)
            return ""

    def entries(self, target: str) -> list[str]:
        """The target's entries as on disk now, without repeats."""
        return dedupe(parse(self.read_raw(target)))

    @contextlib.contextmanager
    def locked(self, target: str) -> Iterator[None]:
        """Hold the target's write lock (this process's threads, then other processes)."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # a profile of a person
        path = self.path(target)
        with self._locks[target], open(path.with_name(path.name + ".lock"), "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def drift_backup(self, target: str) -> str | None:
        """When the file holds text a rewrite would lose, copy it to ``<file>.bak.<ts>`` and
        return that path; None when the file is exactly what the entries would write back.

        Would lose: text that does not survive parse-and-join (odd delimiters, stray
        whitespace), or an entry longer than the whole target's limit, which no tool write can
        produce and which means something appended to the file by other means. Call under
        `locked`.
        """
        raw = self.read_raw(target)
        if not raw.strip():
            return None
        parsed = parse(raw)
        too_long = max((len(e) for e in parsed), default=0) > self.limits.of(target)
        if raw.strip() == ENTRY_DELIMITER.join(parsed) and not too_long:
            return None
        path = self.path(target)
        backup = path.with_name(f"{path.name}.bak.{int(time.time())}")
        try:
            backup.write_text(raw, encoding="utf-8")
        except OSError as exc:
            log.error("cannot back up %s before refusing to write it: %s", path, exc)
            return f"{backup} (BACKUP FAILED — file unchanged on disk)"
        log.warning("%s has content the memory tool would lose; copied to %s", path, backup)
        return str(backup)

    def write(self, target: str, entries: list[str]) -> None:
        """Replace the target's file with ``entries`` atomically. Call under `locked`."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # a profile of a person
        path = self.path(target)
        fd, temp = tempfile.mkstemp(dir=self.dir, prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(ENTRY_DELIMITER.join(entries))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        _fsync_dir(self.dir)

    def remove_stale_temps(self) -> int:
        """Delete temporary files a crash left behind (the files themselves are whole)."""
        removed = 0
        if not self.dir.is_dir():
            return 0
        for stale in self.dir.glob(f"{_TEMP_PREFIX}*{_TEMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                stale.unlink()
                removed += 1
        return removed


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
