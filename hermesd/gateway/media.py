"""The gateway's media folder kept bounded: what people sent is not kept for ever.

Files people send (photos, documents, voice notes) land in ``$HERMES_HOME/gateway/media/
<platform>/`` for the turn that reads them. `prune` deletes those older than
``gateway.media_max_age_hours`` and then, oldest first, as many as it takes to bring the folder
under ``gateway.media_max_mb``; a file younger than `KEEP_NEWER` seconds is never deleted (its
turn may be reading it). The gateway service runs it at start and every `EVERY` seconds, on a
worker thread.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

log = logging.getLogger(__name__)

KEEP_NEWER = 600.0  # seconds: a file this young may still be in use by its turn
EVERY = 3600.0  # seconds between two prunings


def prune(folder: Path, max_age: float, max_bytes: int, now: float | None = None) -> int:
    """Delete old files under ``folder`` (see the module); how many were deleted."""
    now = time.time() if now is None else now
    files: list[tuple[float, int, Path]] = []
    for path in folder.rglob("*"):
        try:
            info = path.lstat()
        except OSError:
            continue
        if path.is_file() and not path.is_symlink():
            files.append((info.st_mtime, info.st_size, path))
    files.sort()  # oldest first
    total = sum(size for _, size, _ in files)
    removed = 0
    for mtime, size, path in files:
        young = now - mtime < KEEP_NEWER
        if young or (now - mtime <= max_age and total <= max_bytes):
            continue
        try:
            path.unlink()
        except OSError as err:
            log.warning("gateway: cannot delete %s: %s", path, err)
            continue
        total -= size
        removed += 1
    if removed:
        log.info("gateway: deleted %d old files from %s", removed, folder)
    return removed
