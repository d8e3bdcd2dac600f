"""The store's one DB thread: every SQLite statement runs there, one call at a time, in order."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hermesd.agent.session_service import SessionService
from hermesd.runtime.hooks import HookBus
from hermesd.store.dbfile import SessionNotFound, StorageUnavailable
from hermesd.store.dbthread import DbThread
from hermesd.store.facade import SessionStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    s = SessionStore(tmp_path / "state.db")
    yield s
    s.close()


class _Gate:
    """Holds the DB thread in one call until released, so the next calls queue up."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> str:
        self.entered.set()
        assert self.release.wait(10)
        return "gate"


def _statement_threads(store: SessionStore) -> list[int]:
    """The thread of every statement the store's connection runs from now on (the test hook:
    sqlite3's trace callback runs on the thread executing the statement)."""
    threads: list[int] = []
    store.db.call(
        store.db.conn.set_trace_callback, lambda sql: threads.append(threading.get_ident())
    )
    return threads


def _db_thread(store: SessionStore) -> int:
    return store.db.call(threading.get_ident)


def test_calls_run_in_the_order_they_were_handed_over(store: SessionStore) -> None:
    async def main() -> list[str | None]:
        sid = (await store.run(store.sessions.create))["id"]
        gate = _Gate()
        held = asyncio.ensure_future(store.run(gate))
        await asyncio.to_thread(gate.entered.wait, 10)
        writes = [
            asyncio.ensure_future(store.run(store.messages.append, sid, "user", f"m{i}"))
            for i in range(100)
        ]
        await asyncio.sleep(0)  # all handed over while the thread is held
        gate.release.set()
        await held
        await asyncio.gather(*writes)
        return [m["content"] for m in await store.run(store.messages.read, sid)]

    assert asyncio.run(main()) == [f"m{i}" for i in range(100)]


def test_results_and_exceptions_reach_the_awaiting_caller(store: SessionStore) -> None:
    async def main() -> tuple[Any, BaseException | None]:
        sid = (await store.run(store.sessions.create, title="t"))["id"]
        record = await store.run(store.messages.append, sid, "user", "hello")
        try:
            await store.run(store.messages.append, "nope", "user", "lost")
        except SessionNotFound as exc:
            return record, exc
        return record, None

    record, error = asyncio.run(main())
    assert record["content"] == "hello" and record["seq"] == 1
    assert isinstance(error, SessionNotFound) and error.session_id == "nope"


def test_a_direct_call_from_another_thread_runs_on_the_db_thread_and_waits(
    store: SessionStore,
) -> None:
    threads = _statement_threads(store)
    sid = store.sessions.create()["id"]  # this test's thread: no event loop here
    assert store.messages.append(sid, "user", "from a worker")["seq"] == 1
    with pytest.raises(SessionNotFound):
        store.sessions.get("nope")
    assert threads and set(threads) == {_db_thread(store)} != {threading.get_ident()}


def test_every_table_of_the_store_runs_a_direct_call_on_the_db_thread(
    store: SessionStore,
) -> None:
    threads = _statement_threads(store)
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "user", "a heron")
    assert store.compactions.listing(sid) == []
    assert [h["session_id"] for h in store.search.find("heron")] == [sid]
    assert store.usage.totals()["requests"] == 0
    assert store.cron.count() == 0
    assert store.approvals.add("rule", "test")["decision"] == "always"
    store.memory.keep_snapshot(sid, "remembered")
    assert store.memory.snapshot(sid) == "remembered"
    assert threads and set(threads) == {_db_thread(store)} != {threading.get_ident()}


def test_no_sqlite_statement_runs_on_the_event_loop_thread(tmp_path: Path) -> None:
    # start-up, RPC calls, a turn's writes, a worker thread's search and the shutdown of the
    # session service that owns the store
    store = SessionStore(tmp_path / "state.db")
    db_thread = _db_thread(store)
    threads = _statement_threads(store)

    async def aclose() -> None:
        return None

    agent = SimpleNamespace(client=SimpleNamespace(aclose=aclose))  # what start/stop touch
    service = SessionService(store, agent=agent, hooks=HookBus())  # type: ignore[arg-type]

    async def main() -> int:
        await service.start()
        sid = (await store.run(store.sessions.create))["id"]
        await store.run(store.messages.append, sid, "user", "a grebe")
        await asyncio.to_thread(store.search.find, "grebe")  # a sync tool handler's way
        await service.stop()
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert threads and set(threads) == {db_thread}
    assert loop_thread not in threads


def test_a_store_method_called_on_the_event_loop_thread_raises_instead_of_blocking(
    store: SessionStore,
) -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"await store\.run"):
            store.sessions.count()
        with pytest.raises(sqlite3.ProgrammingError):  # nor may anyone bypass the thread
            store.db.conn.execute("SELECT 1")

    asyncio.run(main())


def test_storage_errors_reach_callers_as_storage_unavailable(store: SessionStore) -> None:
    def full() -> None:
        raise sqlite3.OperationalError("database or disk is full")

    async def main() -> BaseException:
        try:
            await store.run(full)
        except StorageUnavailable as exc:
            return exc
        raise AssertionError("not mapped")

    error = asyncio.run(main())
    assert error.reason == "full" and isinstance(error.__cause__, sqlite3.OperationalError)
    assert str(store.path) in str(error)
    with pytest.raises(StorageUnavailable):  # a direct call from another thread too
        store.db.call(full)
    assert store.sessions.count() == 0  # and the store keeps working


def test_a_call_handed_over_runs_to_its_end_when_its_caller_is_cancelled(
    store: SessionStore,
) -> None:
    async def main() -> str:
        sid = (await store.run(store.sessions.create))["id"]
        gate = _Gate()
        held = asyncio.ensure_future(store.run(gate))
        await asyncio.to_thread(gate.entered.wait, 10)
        write = asyncio.ensure_future(store.run(store.messages.append, sid, "user", "kept"))
        await asyncio.sleep(0)
        write.cancel()
        gate.release.set()
        await held
        return sid

    sid = asyncio.run(main())
    assert [m["content"] for m in store.messages.read(sid)] == ["kept"]


def test_close_runs_every_call_queued_before_it(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "state.db")
    sid = store.sessions.create()["id"]
    gate = _Gate()
    store.db.thread.submit(gate)
    assert gate.entered.wait(10)
    queued = [
        store.db.thread.submit(store.messages.append, sid, "user", f"m{i}") for i in range(20)
    ]
    closing = threading.Thread(target=store.close)
    closing.start()
    gate.release.set()
    closing.join(10)
    assert not closing.is_alive() and all(f.result()["content"] for f in queued)
    other = sqlite3.connect(tmp_path / "state.db")
    try:
        assert other.execute("SELECT count(*) FROM messages").fetchone()[0] == 20
    finally:
        other.close()


def test_a_write_waits_for_another_process_lock_on_the_db_thread_while_the_loop_serves(
    store: SessionStore,
) -> None:
    sid = store.sessions.create()["id"]
    other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # `sqlite3 state.db` in another process, say

    async def main() -> tuple[int, Any]:
        write = asyncio.ensure_future(store.run(store.messages.append, sid, "user", "after"))
        ticks = 0
        while ticks < 10:  # the loop keeps running meanwhile
            await asyncio.sleep(0.01)
            ticks += 1
        assert not write.done()
        other.execute("COMMIT")
        return ticks, await write

    try:
        ticks, record = asyncio.run(main())
    finally:
        other.close()
    assert ticks == 10 and record["content"] == "after"


def test_a_bare_db_thread_runs_any_function_there() -> None:
    thread = DbThread(name="test-db")
    try:
        name = asyncio.run(thread.run(lambda: threading.current_thread().name))
        assert name.startswith("test-db")
        assert thread.call(lambda: thread.on_thread()) and not thread.on_thread()
    finally:
        thread.close()


def test_calls_waiting_together_commit_in_one_transaction(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    statements: list[str] = []
    store.db.call(store.db.conn.set_trace_callback, statements.append)
    gate = _Gate()
    store.db.thread.submit(gate)
    assert gate.entered.wait(10)
    queued = [
        store.db.thread.submit(store.messages.append, sid, "user", f"m{i}") for i in range(10)
    ]
    gate.release.set()
    assert [f.result()["seq"] for f in queued] == list(range(1, 11))
    store.db.call(store.db.conn.set_trace_callback, None)
    commits = [s for s in statements if s.strip().upper() == "COMMIT"]
    assert len(commits) == 1, statements
    assert sum(s.startswith("SAVEPOINT") for s in statements) == 10


def test_a_call_that_fails_in_a_group_loses_only_its_own_writes(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]

    def write_then_fail() -> None:
        store.messages.append(sid, "user", "rolled back")
        raise ValueError("this call fails after writing")

    gate = _Gate()
    store.db.thread.submit(gate)
    assert gate.entered.wait(10)
    before = store.db.thread.submit(store.messages.append, sid, "user", "kept 1")
    failing = store.db.thread.submit(store.run_in_transaction, write_then_fail)
    after = store.db.thread.submit(store.messages.append, sid, "user", "kept 2")
    gate.release.set()
    assert before.result()["content"] == "kept 1" and after.result()["content"] == "kept 2"
    with pytest.raises(ValueError, match="fails after writing"):
        failing.result()
    assert [m["content"] for m in store.messages.read(sid)] == ["kept 1", "kept 2"]
