"""The session store's thread: queued calls run in batches, a batch in one transaction.

With many turns at once, every turn asks the store for a few small writes per model round.
Run one by one, each write was its own transaction and its own trip to the thread and back;
the thread competed with the event loop for the interpreter lock on every statement, so each
call spent most of its time waiting, and calls queued behind it (100 turns: ~35 ms per call,
more than the model rounds themselves were waiting for anything else).

Here the thread takes every call waiting in the queue (up to ``MAX_BATCH``), runs them in one
``BEGIN IMMEDIATE … COMMIT``, each call inside its own savepoint (a call that raises rolls back
only its own changes), and hands all results back to the event loop in one wake-up. A result is
delivered only after its batch committed, so an awaited write is as durable as before. If the
commit itself fails (a full disk), the calls that changed something get that error; calls that
only read keep their results.

A call made while the thread runs a batch sees the batch's ``in_batch`` flag through
``SessionStore._tx``, which then skips its own BEGIN/COMMIT.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("hermesd.store")

MAX_BATCH = 64

_STOP = object()


class _Job:
    __slots__ = ("fn", "future", "loop", "ok", "value")

    def __init__(self, fn: Callable[[], Any], future: asyncio.Future[Any],
                 loop: asyncio.AbstractEventLoop) -> None:
        self.fn, self.future, self.loop = fn, future, loop
        self.ok = False
        self.value: Any = None


class BatchThread:
    """One thread owning ``conn`` for asynchronous callers (``lock`` also serves sync ones)."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock,
                 name: str = "hermesd-db") -> None:
        self._conn = conn
        self._lock = lock
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.in_batch = False  # read by the store while it holds ``lock``
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Queue ``fn``; the future resolves on the calling loop once its batch committed."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put(_Job(fn, future, loop))
        return future

    def close(self) -> None:
        """Run what is queued, then stop the thread."""
        self._queue.put(_STOP)
        self._thread.join()

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch = [first]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is _STOP:
                    stop = True
                    break
                batch.append(job)
            try:
                self._execute(batch)
            except Exception as exc:  # the connection itself failed: nothing of it held
                log.exception("store batch of %d calls failed", len(batch))
                self._fail(batch, exc)
            self._deliver(batch)
            if stop:
                return

    def _execute(self, batch: list[_Job]) -> None:
        conn = self._conn
        with self._lock:
            if len(batch) == 1:  # nothing to share: the call's own transaction, if it writes
                self._run_job(batch[0], savepoint=False)
                return
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error:  # cannot batch (e.g. locked): each call on its own
                for job in batch:
                    self._run_job(job, savepoint=False)
                return
            self.in_batch = True
            changed: list[_Job] = []
            try:
                for job in batch:
                    before = conn.total_changes
                    if not self._run_job(job, savepoint=True):
                        # SQLite rolled the whole transaction back (a full disk, an I/O
                        # error): the earlier calls' writes are gone with it
                        self._fail(changed, job.value)
                        changed = []
                        conn.execute("BEGIN IMMEDIATE")
                    elif conn.total_changes != before:
                        changed.append(job)
            except sqlite3.Error as exc:  # the transaction could not be restarted
                self._fail(changed, exc)
                self._fail([j for j in batch if not j.ok and j.value is None], exc)  # not run
                changed = []
            finally:
                self.in_batch = False
            if not conn.in_transaction:
                return
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:  # SQLite may already have rolled back (SQLITE_FULL)
                    conn.execute("ROLLBACK")
                log.error("committing %d store calls failed: %s", len(changed), exc)
                self._fail(changed, exc)

    @staticmethod
    def _fail(jobs: list[_Job], exc: BaseException) -> None:
        for job in jobs:
            job.ok, job.value = False, exc

    def _run_job(self, job: _Job, *, savepoint: bool) -> bool:
        """Run one call; False when its failure also ended the batch's transaction."""
        conn = self._conn
        if savepoint:
            conn.execute("SAVEPOINT call")
        try:
            job.value, job.ok = job.fn(), True
        except Exception as exc:  # noqa: BLE001 - delivered to the caller
            job.value, job.ok = exc, False
            if savepoint:
                if not conn.in_transaction:
                    return False
                conn.execute("ROLLBACK TO call")
        if savepoint:
            conn.execute("RELEASE call")
        return True

    def _deliver(self, batch: list[_Job]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        for job in batch:
            by_loop.setdefault(job.loop, []).append(job)
        for loop, jobs in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, jobs)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                pass


def _resolve(jobs: list[_Job]) -> None:
    for job in jobs:
        if job.future.done():  # the caller was cancelled
            continue
        if job.ok:
            job.future.set_result(job.value)
        else:
            job.future.set_exception(job.value)
