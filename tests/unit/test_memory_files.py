"""The memory files and writes without a daemon: the drift guard, appends, a failed write."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermesd.memory import edits, snapshot
from hermesd.memory.files import Limits, MemoryFiles


def _files(tmp_path: Path, text: str | None = None) -> MemoryFiles:
    files = MemoryFiles(tmp_path, Limits(memory=100, user=50))
    if text is not None:
        files.dir.mkdir()
        files.path("memory").write_text(text)
    return files


def test_an_entry_longer_than_the_limit_counts_as_drift(tmp_path: Path) -> None:
    files = _files(tmp_path, "short\n§\n" + "z" * 101)
    result = edits.remove(files, "memory", "short").result
    assert result["success"] is False and Path(result["drift_backup"]).exists()
    assert files.path("memory").read_text() == "short\n§\n" + "z" * 101


def test_an_add_appends_to_a_drifted_file_without_refusing(tmp_path: Path) -> None:
    files = _files(tmp_path, "one\n§\n\n\n§\ntwo  ")
    edit = edits.add(files, "memory", "three")
    assert edit.written and files.path("memory").read_text() == "one\n§\ntwo\n§\nthree"
    assert list(files.dir.glob("*.bak.*")) == []


def test_a_write_that_fails_leaves_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _files(tmp_path, "kept")

    def broken(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("hermesd.memory.files.os.replace", broken)
    with pytest.raises(OSError):
        edits.add(files, "memory", "lost")
    assert files.path("memory").read_text() == "kept"
    assert list(files.dir.glob(".mem_*")) == []


def test_a_stored_snapshot_that_is_not_json_gives_no_block() -> None:
    assert snapshot.compose("{not json", memory_enabled=True, user_enabled=True) == ""
    assert snapshot.compose("[1, 2]", memory_enabled=True, user_enabled=True) == ""


def test_limits_count_the_joined_text(tmp_path: Path) -> None:
    files = _files(tmp_path)
    assert edits.add(files, "user", "a" * 25).written
    assert edits.add(files, "user", "b" * 22).written  # 25 + 3 + 22 = 50: exactly the limit
    assert not edits.add(files, "user", "c").written
