"""The store's DB thread: calls waiting together run as one batch in one transaction."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hermesd.store.dbthread import BatchThread, ConnectionLock
from hermesd.store.sessions import SessionNotFound, SessionStore


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


def test_queued_calls_commit_together_and_a_failing_one_rolls_back_alone(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, ConnectionLock(conn))
    commits: list[int] = []
    conn.set_trace_callback(lambda sql: commits.append(1) if sql == "COMMIT" else None)

    def half_then_fail() -> None:
        conn.execute("INSERT INTO t VALUES ('half')")
        conn.execute("INSERT INTO t VALUES ('a')")  # UNIQUE: fails after a row was written

    try:
        results = asyncio.run(
            _queue_behind_gate(thread, [_insert(conn, "a"), half_then_fail, _insert(conn, "b")])
        )
    finally:
        thread.close()
    assert results[0] == "a" and results[2] == "b"
    assert isinstance(results[1], sqlite3.IntegrityError)
    assert _committed(path) == ["a", "b"]  # the failed call's 'half' row is gone
    assert len(commits) == 1  # the three queued calls: one transaction


def test_results_are_delivered_only_after_the_commit(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, ConnectionLock(conn))
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
    conn.execute(
        "CREATE TABLE child (p INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)"
    )
    conn.execute("PRAGMA foreign_keys=ON")
    thread = BatchThread(conn, ConnectionLock(conn))

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
    thread = BatchThread(conn, ConnectionLock(conn))

    async def main() -> list[Any]:
        futures = [thread.submit(_insert(conn, f"v{i}")) for i in range(20)]
        await asyncio.to_thread(thread.close)
        return await asyncio.gather(*futures)

    assert len(asyncio.run(main())) == 20
    assert len(_committed(path)) == 20


@pytest.mark.parametrize("size", [1, 2])
def test_a_call_raising_a_non_sqlite_error_is_delivered(tmp_path: Path, size: int) -> None:
    conn = _db(tmp_path / "t.db")
    thread = BatchThread(conn, ConnectionLock(conn))

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
    tmp_path: Path,
) -> None:
    # SQLite rolls the whole transaction back on some errors (a full disk, I/O): the writes
    # of the calls before it in the batch are gone too, and those callers must hear so.
    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, ConnectionLock(conn))

    def rolled_back() -> None:
        conn.execute("ROLLBACK")  # what SQLite does by itself on SQLITE_FULL
        raise sqlite3.OperationalError("database or disk is full")

    def read() -> int:
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])

    try:
        results = asyncio.run(
            _queue_behind_gate(
                thread, [_insert(conn, "lost"), read, rolled_back, _insert(conn, "kept")]
            )
        )
    finally:
        thread.close()
    assert isinstance(results[0], sqlite3.OperationalError)  # its row went with the rollback
    assert results[1] == 1  # a read: its answer stands
    assert isinstance(results[2], sqlite3.OperationalError)
    assert results[3] == "kept"  # after it, a new transaction
    assert _committed(path) == ["kept"]


# -- calls run on the loop's thread (submit_here / SessionStore.quick) --------------------------


def test_calls_queued_here_run_on_the_loop_thread_in_one_transaction(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, ConnectionLock(conn))
    commits: list[str] = []
    conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    ran_on: list[threading.Thread] = []

    def insert(value: str) -> Any:
        def run() -> str:
            ran_on.append(threading.current_thread())
            conn.execute("INSERT INTO t VALUES (?)", (value,))
            return value

        return run

    def half_then_fail() -> None:
        conn.execute("INSERT INTO t VALUES ('half')")
        conn.execute("INSERT INTO t VALUES ('a')")

    async def main() -> list[Any]:
        futures = [
            thread.submit_here(insert("a")),
            thread.submit_here(half_then_fail),
            thread.submit_here(insert("b")),
        ]
        results = await asyncio.gather(*futures, return_exceptions=True)
        results.append(_committed(path))  # committed before any result was handed back
        return results

    try:
        a, failed, b, committed = asyncio.run(main())
    finally:
        thread.close()
    assert (a, b) == ("a", "b") and isinstance(failed, sqlite3.IntegrityError)
    assert committed == ["a", "b"]
    assert ran_on == [threading.main_thread()] * 2
    assert commits == ["COMMIT"]


def test_calls_queued_here_go_to_the_thread_while_it_holds_the_connection(tmp_path: Path) -> None:
    # The loop must never wait for the connection: a long call on the DB thread (a search)
    # holds it, so calls queued here meanwhile run on the thread after it, and the loop
    # keeps serving.
    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, ConnectionLock(conn))
    gate = _Gate()
    ran_on: list[str] = []

    def insert() -> str:
        ran_on.append(threading.current_thread().name)
        conn.execute("INSERT INTO t VALUES ('late')")
        return "late"

    async def main() -> list[Any]:
        held = thread.submit(gate)
        await asyncio.to_thread(gate.entered.wait, 10)
        here = thread.submit_here(insert)
        ticks = 0
        while not here.done() and ticks < 5:  # the loop keeps running meanwhile
            await asyncio.sleep(0.01)
            ticks += 1
        assert not here.done()
        gate.release.set()
        return [await held, await here, ticks]

    try:
        held, value, ticks = asyncio.run(main())
    finally:
        thread.close()
    assert (held, value, ticks) == ("gate", "late", 5)
    assert ran_on == ["hermesd-db"]
    assert _committed(path) == ["late"]


def test_the_lock_sets_the_busy_timeout_each_holder_needs_only_when_it_changes(
    tmp_path: Path,
) -> None:
    conn = _db(tmp_path / "t.db")
    pragmas: list[str] = []
    conn.set_trace_callback(lambda sql: pragmas.append(sql) if "busy_timeout" in sql else None)
    lock = ConnectionLock(conn, 5000)
    for _ in range(3):  # the loop's batches, one after another: one PRAGMA
        assert lock.acquire_for_loop()
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0
        lock.release()
    with lock:
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        with lock:  # reentrant: nothing changes
            pass
        assert not lock.acquire_for_loop()  # held here already: the loop must not nest
    with lock:
        pass
    assert [p for p in pragmas if "=" in p] == ["PRAGMA busy_timeout=0", "PRAGMA busy_timeout=5000"]
    done = threading.Event()

    def hold() -> None:
        with lock:
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        time.sleep(0.05)
        assert not lock.acquire_for_loop()  # another thread holds it: never waits
    finally:
        done.set()
        holder.join()


def test_a_direct_call_from_another_thread_waits_for_another_process_lock(tmp_path: Path) -> None:
    # After the loop's batches (no busy timeout), a plugin thread's direct store call still
    # waits for another process's write lock instead of failing with "database is locked".
    store = SessionStore(tmp_path / "state.db")
    sid = store.create_session()["id"]

    async def loop_batches() -> None:
        for i in range(3):
            await store.quick(store.append_message, sid, "user", f"from the loop {i}")

    asyncio.run(loop_batches())
    other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, other.execute, ("COMMIT",)).start()
    started = time.monotonic()
    try:
        hits = store.search("loop")  # indexes first: a write, so it needs the write lock
    finally:
        store.close()
        other.close()
    assert len(hits) == 3 and time.monotonic() - started >= 0.25


def test_calls_queued_here_do_not_wait_for_another_process_lock(tmp_path: Path) -> None:
    # Another connection (another process, say `sqlite3 state.db`) holds the write lock: the
    # batch goes to the DB thread, which waits with its busy timeout; the loop does not.
    path = tmp_path / "t.db"
    conn = _db(path)
    lock = ConnectionLock(conn, 5000)
    thread = BatchThread(conn, lock)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")

    async def main() -> tuple[Any, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        here = thread.submit_here(_insert(conn, "after"))
        await asyncio.sleep(0)  # the batch is tried at the start of the next round
        blocked_for = loop.time() - started
        await asyncio.sleep(0.1)
        assert not here.done()
        other.execute("COMMIT")
        return await here, blocked_for

    try:
        value, blocked_for = asyncio.run(main())
    finally:
        thread.close()
        other.close()
    assert value == "after"
    assert blocked_for < 1.0  # far below the 5 s busy timeout the thread waits with
    with lock:  # any holder but the loop's batches waits 5 s for a lock
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    assert _committed(path) == ["after"]


def test_quick_store_calls_map_storage_errors(tmp_path: Path) -> None:
    from hermesd.store.sessions import StorageUnavailable

    store = SessionStore(tmp_path / "state.db")

    def full() -> None:
        raise sqlite3.OperationalError("database or disk is full")

    async def main() -> list[Any]:
        sid = (await store.quick(store.create_session))["id"]
        results = await asyncio.gather(
            store.quick(store.append_message, sid, "user", "kept"),
            store.quick(full),
            store.quick(store.append_message, "nope", "user", "lost"),
            return_exceptions=True,
        )
        return [*results, [m["content"] for m in await store.call(store.messages, sid)]]

    try:
        kept, failed, missing, contents = asyncio.run(main())
    finally:
        store.close()
    assert kept["content"] == "kept"
    assert isinstance(failed, StorageUnavailable) and failed.reason == "full"
    assert isinstance(missing, SessionNotFound)
    assert contents == ["kept"]


def test_checkpoints_run_on_the_thread_not_on_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermesd.store import dbthread

    monkeypatch.setattr(dbthread, "CHECKPOINT_EVERY", 5)
    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, ConnectionLock(conn))
    checkpoints: list[str] = []
    conn.set_trace_callback(
        lambda sql: (
            checkpoints.append(threading.current_thread().name) if "wal_checkpoint" in sql else None
        )
    )

    async def main() -> None:
        for i in range(12):  # one commit each: each waits for the one before
            await thread.submit_here(_insert(conn, f"v{i}"))

    try:
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        asyncio.run(main())
    finally:
        thread.close()
    assert checkpoints == ["hermesd-db", "hermesd-db"]  # after commits 5 and 10
    assert len(_committed(path)) == 12


def test_a_chore_runs_after_the_calls_queued_before_it_and_a_failing_one_is_only_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, ConnectionLock(conn))
    seen: list[list[str]] = []

    def full() -> None:
        raise sqlite3.OperationalError("database or disk is full")

    async def main() -> list[Any]:
        gate = _Gate()
        first = thread.submit(gate)
        await asyncio.to_thread(gate.entered.wait, 10)
        queued = thread.submit(_insert(conn, "before"))
        thread.chore(full)
        thread.chore(lambda: seen.append(_committed(path)))
        gate.release.set()
        await first
        return [await queued, await thread.submit(_insert(conn, "after"))]

    try:
        assert asyncio.run(main()) == ["before", "after"]  # the thread kept serving
    finally:
        thread.close()
    assert seen == [["before"]]  # the write queued before the chore was committed first
    assert "store housekeeping (full) failed: database or disk is full" in caplog.text
    assert _committed(path) == ["after", "before"]


def test_a_batch_on_the_loop_is_bounded_and_the_loop_runs_between_batches(tmp_path: Path) -> None:
    # The loop must keep serving others (the daemon's loop-lag target is 50 ms): a batch stops
    # after MAX_HERE calls, or at the first call started past HERE_SECONDS; the rest run, in
    # order, in the next round.
    from hermesd.store import dbthread

    path = tmp_path / "t.db"
    conn = _db(path)
    thread = BatchThread(conn, ConnectionLock(conn))
    commits: list[str] = []
    conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    order: list[str] = []

    def slow(value: str) -> Any:
        def run() -> str:
            time.sleep(dbthread.HERE_SECONDS / 2)
            order.append(value)
            conn.execute("INSERT INTO t VALUES (?)", (value,))
            return value

        return run

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        slow_calls = [thread.submit_here(slow(f"s{i}")) for i in range(6)]
        loop.call_soon(order.append, "other work")
        results = await asyncio.gather(*slow_calls)
        del commits[:]
        many = [thread.submit_here(_insert(conn, f"m{i}")) for i in range(dbthread.MAX_HERE + 8)]
        return results + await asyncio.gather(*many)

    try:
        results = asyncio.run(main())
    finally:
        thread.close()
    assert results[:6] == [f"s{i}" for i in range(6)]
    assert len(results) == 6 + dbthread.MAX_HERE + 8
    assert 0 < order.index("other work") < 6  # it ran between two batches of the slow calls
    assert [v for v in order if v != "other work"] == [f"s{i}" for i in range(6)]
    assert commits == ["COMMIT", "COMMIT"]  # 40 quick calls: a batch of 32, then 8
    assert len(_committed(path)) == 6 + dbthread.MAX_HERE + 8


def test_run_now_runs_at_once_when_idle_and_queues_behind_others_otherwise(tmp_path: Path) -> None:
    # A turn's first read and its answer's write: at once when nothing waits (no trip through
    # the loop), else in order behind what is queued on the loop, or on the DB thread while it
    # holds the connection or another process holds the write lock.
    path = tmp_path / "t.db"
    conn = _db(path)
    lock = ConnectionLock(conn, 5000)
    thread = BatchThread(conn, lock)
    gate = _Gate()

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        now = thread.run_now(_insert(conn, "idle"))
        seen["idle done at once"] = now.done()
        seen["idle committed"] = _committed(path)
        queued = thread.submit_here(_insert(conn, "first"))
        behind = thread.run_now(_insert(conn, "second"))
        seen["behind done at once"] = behind.done()
        seen["queued"] = [await queued, await behind]
        held = thread.submit(gate)
        await asyncio.to_thread(gate.entered.wait, 10)
        busy = thread.run_now(_insert(conn, "busy"))
        seen["busy done at once"] = busy.done()
        gate.release.set()
        seen["busy"] = [await held, await busy]
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        locked = thread.run_now(_insert(conn, "locked"))
        seen["locked done at once"] = locked.done()
        await asyncio.sleep(0.1)
        other.execute("COMMIT")
        other.close()
        seen["locked"] = await locked
        return seen

    try:
        seen = asyncio.run(main())
    finally:
        thread.close()
    assert seen == {
        "idle done at once": True,
        "idle committed": ["idle"],
        "behind done at once": False,
        "queued": ["first", "second"],
        "busy done at once": False,
        "busy": ["gate", "busy"],
        "locked done at once": False,
        "locked": "locked",
    }
    with lock:
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    rows = [r[0] for r in conn.execute("SELECT v FROM t ORDER BY rowid")]
    assert rows == ["idle", "first", "second", "busy", "locked"]


def test_calls_for_the_loop_wait_behind_calls_queued_for_the_thread(tmp_path: Path) -> None:
    # A turn's tool call handed to the DB thread (the connection was busy) and its tool result
    # queued later on the loop: the result must not commit first, even when the connection is
    # free by then and the thread has not yet taken the tool call from its queue.
    path = tmp_path / "t.db"
    conn = _db(path)
    lock = ConnectionLock(conn)
    thread = BatchThread(conn, lock)
    window, close = threading.Event(), threading.Event()

    def between_calls() -> str:  # the thread between two calls: connection free, queue not
        lock.release()
        window.set()
        try:
            assert close.wait(10)
        finally:
            lock.acquire()
        return "between"

    async def main() -> list[Any]:
        held = thread.submit(between_calls)
        await asyncio.to_thread(window.wait, 10)
        earlier = thread.submit(_insert(conn, "tool call"))
        later = [
            thread.run_now(_insert(conn, "tool result")),
            thread.submit_here(_insert(conn, "answer")),
        ]
        for _ in range(3):  # the loop runs a few rounds before the thread goes on
            await asyncio.sleep(0.01)
        close.set()
        return [await held, await earlier, *[await f for f in later]]

    try:
        assert asyncio.run(main()) == ["between", "tool call", "tool result", "answer"]
    finally:
        thread.close()
    other = sqlite3.connect(path)
    try:
        assert [r[0] for r in other.execute("SELECT v FROM t ORDER BY rowid")] == [
            "tool call",
            "tool result",
            "answer",
        ]
    finally:
        other.close()
