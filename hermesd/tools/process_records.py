"""``$HERMES_HOME/processes.json``: the background processes' records across daemon runs.

The file is a JSON list of `hermesd.tools.processes.Background.record` values, replaced
atomically on every change (off the event loop). `recover` reads it at start-up: a record
still ``running`` was left by a daemon that did not stop cleanly; whatever still carries its
`marker` is killed, and the record becomes ``gone``. A file that cannot be read is set
aside, never fatal.
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


def marker(process_id: str) -> str:
    """The words put first in a background command (a shell no-op), by which `recover` finds
    what is left of it: bubblewrap's processes and the shell carry the command line."""
    return f": hermesd background {process_id}"


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
    """Kill what is left of a record's process: every process whose command line carries its
    marker (SIGTERM first: the Landlock launcher then kills its descendants; bubblewrap's pid
    namespace ends with its first process)."""
    wanted = marker(str(record["id"])).encode()
    found = _carrying(wanted)
    if not found:
        return
    log.warning("background process %s outlived its daemon; killing it", record["id"])
    for number in (signal.SIGTERM, signal.SIGKILL):
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, number)
        deadline = time.monotonic() + 2
        while found and time.monotonic() < deadline:
            time.sleep(0.05)
            found = _carrying(wanted)


def _carrying(wanted: bytes) -> list[int]:
    """The pids whose command line contains ``wanted`` (never this process)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                if wanted in cmdline.read():
                    out.append(int(name))
        except OSError:
            continue
    return out
