"""The gateway's media folder is pruned by age and by size, never of files still in use."""

from __future__ import annotations

import os
from pathlib import Path

from hermesd.gateway.media import KEEP_NEWER, prune

NOW = 1_000_000_000.0
HOUR = 3600.0


def _file(folder: Path, name: str, age: float, size: int = 10) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (NOW - age, NOW - age))
    return path


def test_files_older_than_the_age_limit_are_deleted(tmp_path: Path) -> None:
    old = _file(tmp_path, "telegram/old.jpg", 30 * HOUR)
    new = _file(tmp_path, "telegram/new.jpg", 2 * HOUR)
    assert prune(tmp_path, 24 * HOUR, 10**9, now=NOW) == 1
    assert not old.exists() and new.exists()


def test_over_the_size_limit_the_oldest_files_go_first(tmp_path: Path) -> None:
    oldest = _file(tmp_path, "matrix/a.ogg", 3 * HOUR, 100)
    middle = _file(tmp_path, "matrix/b.ogg", 2 * HOUR, 100)
    newest = _file(tmp_path, "matrix/c.ogg", 1 * HOUR, 100)
    prune(tmp_path, 24 * HOUR, 250, now=NOW)
    assert not oldest.exists() and middle.exists() and newest.exists()


def test_a_file_its_turn_may_still_read_is_kept_whatever_the_limits(tmp_path: Path) -> None:
    fresh = _file(tmp_path, "telegram/voice.ogg", KEEP_NEWER / 2, 1000)
    assert prune(tmp_path, 0, 0, now=NOW) == 0
    assert fresh.exists()
