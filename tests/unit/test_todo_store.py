"""``store.todos``: a database made before the table upgrades, and the list's life with its
session (kept, copied by a fork, deleted with it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hermesd.store.facade import SessionStore
from hermesd.store.migrations import MIGRATIONS

PLAN = [{"id": "1", "content": "read the code", "status": "in_progress"}]


def test_a_database_from_before_the_todos_table_upgrades_and_keeps_its_sessions(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    # every migration before the todos one
    before = next(n for n, script in enumerate(MIGRATIONS) if "CREATE TABLE todos" in script)
    for version, script in enumerate(MIGRATIONS[:before], start=1):
        db.executescript(f"BEGIN; {script} PRAGMA user_version = {version}; COMMIT;")
    db.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES ('old', 1, 1)")
    db.commit()
    assert db.execute("SELECT name FROM sqlite_master WHERE name = 'todos'").fetchone() is None
    db.close()
    store = SessionStore(path)
    try:
        assert store.todos.get("old") == []
        assert store.todos.change("old", lambda items: PLAN) == ([], PLAN)
        assert store.todos.get("old") == PLAN
    finally:
        store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    reopened = SessionStore(path)
    try:
        assert reopened.todos.get("old") == PLAN
    finally:
        reopened.close()


def test_a_fork_copies_the_list_and_a_delete_removes_it(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "state.db")
    try:
        sid = store.sessions.create(title="plan")["id"]
        store.todos.change(sid, lambda items: PLAN)
        fork = store.sessions.fork(sid)["id"]
        assert store.todos.get(fork) == PLAN
        store.todos.change(fork, lambda items: [])  # the copy is the fork's own
        assert store.todos.get(sid) == PLAN
        store.sessions.delete(sid)
        assert store.todos.get(sid) == []
        count = store.db.thread.call(
            lambda: store.db.conn.execute("SELECT count(*) FROM todos").fetchone()[0]
        )
        assert count == 1  # the fork's row, emptied
    finally:
        store.close()


def test_a_failing_change_writes_nothing(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "state.db")
    try:
        sid = store.sessions.create()["id"]
        store.todos.change(sid, lambda items: PLAN)

        def refuse(items: list[dict[str, str]]) -> list[dict[str, str]]:
            raise ValueError("no")

        with pytest.raises(ValueError, match="no"):
            store.todos.change(sid, refuse)
        assert store.todos.get(sid) == PLAN
    finally:
        store.close()
