"""The store's DB thread: calls waiting together run as one batch in one transaction."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from hermesd.dbthread import BatchThread
from hermesd.store import SessionNotFound, SessionStore


def _db(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (v TEXT UNIQUE)")
    return conn


class _Gate:
    """Holds the DB thread in its first call until released, so the next calls queue up."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> str:
        self.entered.set()
        assert self.release.wait(10)
        return "gate"


def _insert(conn: sqlite3.Connection, value: str) -> Any:
    def run() -> str:
        conn.execute("INSERT INTO t VALUES (?)", (value,))
        return value
    return run


def _committed(path: Path) -> list[str]:
    other = sqlite3.connect(path)  # a second connection sees only committed rows
    try:
        return sorted(r[0] for r in other.execute("SELECT v FROM t"))
    finally:
        other.close()


async def _queue_behind_gate(thread: BatchThread, fns: list[Any]) -> list[Any]:
    gate = _Gate()
    first = thread.submit(gate)
    await asyncio.to_thread(gate.entered.wait, 10)
    futures = [thread.submit(fn) for fn in fns]
    gate.release.set()
    await first
    return await asyncio.gather(*futures, return_exceptions=True)


def test_queued_calls_commit_together_and_a_failing_one_rolls_back_alone(tmp_path: Path
                                                                         ) -> None:
    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, threading.RLock())
    commits: list[int] = []
    conn.set_trace_callback(lambda sql: commits.append(1) if sql == "COMMIT" else None)

    def half_then_fail() -> None:
        conn.execute("INSERT INTO t VALUES ('half')")
        conn.execute("INSERT INTO t VALUES ('a')")  # UNIQUE: fails after a row was written

    try:
        results = asyncio.run(_queue_behind_gate(
            thread, [_insert(conn, "a"), half_then_fail, _insert(conn, "b")]))
    finally:
        thread.close()
    assert results[0] == "a" and results[2] == "b"
    assert isinstance(results[1], sqlite3.IntegrityError)
    assert _committed(path) == ["a", "b"]  # the failed call's 'half' row is gone
    assert len(commits) == 1  # the three queued calls: one transaction


def test_results_are_delivered_only_after_the_commit(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, threading.RLock())
    seen: list[list[str]] = []

    async def main() -> None:
        value = await thread.submit(_insert(conn, "x"))
        seen.append([value])
        seen.append(_committed(path))

    try:
        asyncio.run(main())
    finally:
        thread.close()
    assert seen == [["x"], ["x"]]


def test_a_failed_commit_fails_the_writers_and_keeps_the_readers(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    conn = _db(path)
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute("CREATE TABLE child (p INTEGER REFERENCES parent(id) "
                 "DEFERRABLE INITIALLY DEFERRED)")
    conn.execute("PRAGMA foreign_keys=ON")
    thread = BatchThread(conn, threading.RLock())

    def orphan() -> str:  # a deferred foreign key: only COMMIT notices
        conn.execute("INSERT INTO child VALUES (42)")
        return "orphan"

    def read() -> int:
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])

    try:
        results = asyncio.run(_queue_behind_gate(thread, [orphan, read, _insert(conn, "y")]))
    finally:
        thread.close()
    assert isinstance(results[0], sqlite3.IntegrityError)
    assert results[1] == 0  # read-only: its answer stands
    assert isinstance(results[2], sqlite3.IntegrityError)  # its write went with the batch
    assert _committed(path) == []
    assert not conn.in_transaction


def test_store_calls_still_map_errors_and_keep_order(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "state.db")

    async def main() -> list[Any]:
        sid = (await store.call(store.create_session))["id"]
        writes = [store.call(store.append_message, sid, "user", f"m{i}") for i in range(50)]
        missing = store.call(store.append_message, "nope", "user", "lost")
        results = await asyncio.gather(*writes, missing, return_exceptions=True)
        history = await store.call(store.messages, sid)
        return [results, [m["content"] for m in history]]

    try:
        results, contents = asyncio.run(main())
    finally:
        store.close()
    assert isinstance(results[-1], SessionNotFound)
    assert contents == [f"m{i}" for i in range(50)]


def test_close_runs_what_is_queued(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, threading.RLock())

    async def main() -> list[Any]:
        futures = [thread.submit(_insert(conn, f"v{i}")) for i in range(20)]
        await asyncio.to_thread(thread.close)
        return await asyncio.gather(*futures)

    assert len(asyncio.run(main())) == 20
    assert len(_committed(path)) == 20


@pytest.mark.parametrize("size", [1, 2])
def test_a_call_raising_a_non_sqlite_error_is_delivered(tmp_path: Path, size: int) -> None:
    conn = _db(tmp_path / "t.db")
    thread = BatchThread(conn, threading.RLock())

    def boom() -> None:
        raise KeyError("boom")

    async def main() -> list[Any]:
        return await _queue_behind_gate(thread, [boom] + [_insert(conn, "z")] * (size - 1))

    try:
        results = asyncio.run(main())
    finally:
        thread.close()
    assert isinstance(results[0], KeyError)
    assert results[1:] == ["z"] * (size - 1)


def test_a_call_whose_failure_ends_the_transaction_fails_the_earlier_writers_only(
        tmp_path: Path) -> None:
    # SQLite rolls the whole transaction back on some errors (a full disk, I/O): the writes
    # of the calls before it in the batch are gone too, and those callers must hear so.
    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, threading.RLock())

    def rolled_back() -> None:
        conn.execute("ROLLBACK")  # what SQLite does by itself on SQLITE_FULL
        raise sqlite3.OperationalError("database or disk is full")

    def read() -> int:
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])

    try:
        results = asyncio.run(_queue_behind_gate(
            thread, [_insert(conn, "lost"), read, rolled_back, _insert(conn, "kept")]))
    finally:
        thread.close()
    assert isinstance(results[0], sqlite3.OperationalError)  # its row went with the rollback
    assert results[1] == 1  # a read: its answer stands
    assert isinstance(results[2], sqlite3.OperationalError)
    assert results[3] == "kept"  # after it, a new transaction
    assert _committed(path) == ["kept"]
