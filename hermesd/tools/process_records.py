"""``$HERMES_HOME/processes.json``: the background processes' records across daemon runs.

The file is a JSON list of `hermesd.tools.processes.Background.record` values, replaced
atomically on every change (off the event loop). `recover` reads it at start-up: a record
still ``running`` was left by a daemon that did not stop cleanly; when its pid still names the
same process (its start time in ``/proc`` is the recorded one) that process group is killed,
and the record becomes ``gone``. A file that cannot be read is set aside, never fatal.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FILE_NAME = "processes.json"
_FIELDS = ("id", "session_id", "command", "cwd", "started_at", "status")


def start_ticks(pid: int) -> int | None:
    """The process's start time (``/proc/PID/stat`` field 22), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def save(path: Path, records: list[dict[str, Any]]) -> None:
    """Replace the file with ``records`` (private to the daemon's user)."""
    fd, temporary = tempfile.mkstemp(prefix=".processes-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(records, out)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def recover(path: Path) -> list[dict[str, Any]]:
    """The records of the last run; running ones killed (when still ours) and marked gone."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("%s cannot be read (%s); set aside as %s.bad", path, exc, path.name)
        with contextlib.suppress(OSError):
            os.replace(path, path.with_name(path.name + ".bad"))
        return []
    records = [r for r in raw if isinstance(r, dict) and all(k in r for k in _FIELDS)]
    for record in records:
        if record["status"] == "running":
            _end_survivor(record)
            record.update(status="gone", exit_code=None, completion="gone", source="daemon.restart")
    return records


def _end_survivor(record: dict[str, Any]) -> None:
    """Kill the process group a record names, when its pid is still that process."""
    pid, ticks = record.get("pid"), record.get("start_ticks")
    if not isinstance(pid, int) or ticks is None or start_ticks(pid) != ticks:
        return
    log.warning("background process %s (pid %d) outlived its daemon; killing it", record["id"], pid)
    # SIGTERM first: the Landlock launcher kills its descendants when told to stop
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and start_ticks(pid) == ticks:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
