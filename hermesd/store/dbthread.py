"""The session store's one thread: every SQLite statement of the store runs on it.

The store's connection is opened on this thread and used by nothing else (sqlite3's
``check_same_thread`` holds it to that), so the event loop never reads or writes the database
file and never waits on it. Code on the loop hands a call over and awaits it (`DbThread.run`);
code on other threads (a tool handler on a worker) hands it over and blocks (`DbThread.call`);
code already on this thread runs at once. Calls run one at a time, in the order they were
handed over, and a result comes back only after its write committed, so no write can
overtake an earlier one.

Group commit: when calls are waiting, the thread takes all of them (up to ``MAX_BATCH``) and
runs them inside one transaction, each call's own transaction becoming a savepoint of it
(`hermesd.store.database.Database.tx`), then commits once and hands the results back. With 100
turns at once this halves the store's work per model round
(docs/decisions/0002-one-database-thread.md). A call that raises rolls back only its own
savepoint. When SQLite rolls the whole transaction back (a full disk), the calls of the batch
that had written get that error, because their writes are gone; when the commit fails, every
call that wrote gets the commit's error; calls that only read keep their results. A lone call
runs in its own transaction, as before.

Housekeeping runs here too, inside the calls that make it due: SQLite's automatic WAL
checkpoint runs on the thread that commits, and the store indexes new messages for search
every few hundred writes (``hermesd.store.search``). Nothing here knows what a session is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

log = logging.getLogger(__name__)

MAX_BATCH = 64  # calls committed together at most


class _Job:
    __slots__ = ("args", "error", "fn", "future", "kwargs", "value", "wrote")

    def __init__(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.value: Any = None
        self.error: BaseException | None = None
        self.wrote = False


_STOP = object()  # first item of the tuple close() queues


class DbThread:
    """One thread that runs the calls handed to it in order, committing waiting ones together.

    ``connection()`` returns the connection to batch on (None until it is open, or once it
    is closed: calls then run alone); ``map_error`` turns a call's exception into the one its
    caller sees (the store maps SQLite's disk errors to ``StorageUnavailable``)."""

    def __init__(
        self,
        name: str = "hermesd-db",
        *,
        connection: Callable[[], sqlite3.Connection | None] = lambda: None,
        map_error: Callable[[Exception], Exception] = lambda exc: exc,
    ) -> None:
        self._connection = connection
        self._map_error = map_error
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def on_thread(self) -> bool:
        """Whether the caller runs on this thread."""
        return threading.get_ident() == self._thread.ident

    def submit(
        self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[T]:
        """Queue ``fn(*args, **kwargs)``; the future holds its result or (mapped) exception
        once its write committed."""
        job = _Job(fn, args, kwargs)
        self._queue.put(job)
        return job.future

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the thread and await its result (from the loop).

        A call once handed over runs to its end even if the awaiting task is cancelled: a
        write the caller started is not dropped halfway through a turn's sequence."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[T] = loop.create_future()

        def settle(done: concurrent.futures.Future[T]) -> None:
            if waiter.cancelled():
                return
            exc = done.exception()
            if exc is None:
                waiter.set_result(done.result())
            else:
                waiter.set_exception(exc)

        def deliver(done: concurrent.futures.Future[T]) -> None:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, done)

        self.submit(fn, *args, **kwargs).add_done_callback(deliver)
        return await waiter

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the thread and wait for it (at once when called
        there). Not from a thread running an event loop: that loop would stop serving while
        it waits; it awaits `run` instead."""
        if self.on_thread():
            return fn(*args, **kwargs)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self.submit(fn, *args, **kwargs).result()
        name = getattr(fn, "__qualname__", repr(fn))
        raise RuntimeError(
            f"{name} would block the event loop on the database: await store.run(...) instead"
        )

    def close(self, last: Callable[[], object] | None = None) -> None:
        """Run every call queued so far, then ``last`` alone (closing the connection, say),
        then stop the thread. From any thread but this one; ``last``'s exception is raised."""
        done: concurrent.futures.Future[object] = concurrent.futures.Future()
        self._queue.put((_STOP, last, done))
        self._thread.join()
        done.result()

    # -- the thread ---------------------------------------------------------------------------

    def _serve(self) -> None:
        stop: tuple[Any, ...] | None = None
        while stop is None:
            first = self._queue.get()
            if type(first) is tuple:
                stop = first
                break
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if type(job) is tuple:
                    stop = job
                    break
                batch.append(job)
            conn = self._connection()
            if len(batch) == 1 or conn is None or conn.in_transaction:
                for job in batch:
                    self._run(job)
            else:
                self._run_together(conn, batch)
            for job in batch:
                self._settle(job)
        _, last, done = stop
        try:
            done.set_result(last() if last is not None else None)
        except BaseException as exc:  # handed to the thread that called close()
            done.set_exception(exc)

    def _run(self, job: _Job) -> None:
        try:
            job.value = job.fn(*job.args, **job.kwargs)
        except Exception as exc:  # delivered to the caller
            job.error = exc

    def _run_together(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        """One transaction for ``batch``, each call a savepoint of it; one commit."""
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:  # locked by another process past the busy timeout, say
            for job in batch:
                self._run(job)
            return
        wrote: list[_Job] = []
        for job in batch:
            before = conn.total_changes
            self._run(job)
            if not conn.in_transaction:
                # SQLite rolled the whole transaction back (a full disk, an I/O error), or the
                # call closed the connection: the writes made before it are gone
                self._fail(wrote, job.error or sqlite3.OperationalError("transaction ended"))
                wrote = []
                try:
                    conn.execute("BEGIN IMMEDIATE")
                except sqlite3.Error:
                    rest = batch[batch.index(job) + 1 :]
                    for other in rest:
                        self._run(other)
                    return
            elif conn.total_changes != before:
                wrote.append(job)
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:  # SQLite may already have rolled back (SQLITE_FULL)
                conn.execute("ROLLBACK")
            log.error("committing %d store calls failed: %s", len(wrote), exc)
            self._fail(wrote, exc)

    @staticmethod
    def _fail(jobs: list[_Job], exc: BaseException) -> None:
        for job in jobs:
            job.value, job.error = None, exc

    def _settle(self, job: _Job) -> None:
        if job.error is None:
            job.future.set_result(job.value)
            return
        error = job.error
        if isinstance(error, Exception):
            mapped = self._map_error(error)
            if mapped is not error:
                mapped.__cause__ = error
                error = mapped
        job.future.set_exception(error)
