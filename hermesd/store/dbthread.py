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

Short calls can skip the thread (``submit_here``): they are batched the same way, but the
batch runs on the event loop's own thread at the start of its next round. A turn's writes are
a few rows each; handed to the thread, every one of them waited for the thread to get the
interpreter lock from a busy loop and then for the loop to pick the result up (100 turns at
once: ~20 ms a call). On the loop they cost only their SQLite time. The loop never waits for
the connection: when the thread holds it (a long search, a checkpoint) or another process
holds the database's write lock, the batch goes to the thread instead.

Housekeeping (``chore``) runs on the thread between batches. Checkpoints: automatic
checkpoints would run on whichever thread commits, the loop included, and a checkpoint writes
and syncs the database file. So the connection's automatic checkpoints are off while this
thread owns it, and the thread runs a passive checkpoint after every ``CHECKPOINT_EVERY``
commits. The store also indexes new messages for search this way (``hermesd.store.search``).

A call made while a batch runs sees the batch's ``in_batch`` flag through
``SessionStore._tx``, which then skips its own BEGIN/COMMIT.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, Self

log = logging.getLogger(__name__)

MAX_BATCH = 64
# A batch on the loop's thread holds up everything else the loop does: at most this many
# calls, and no new call started past this much time (a turn's first read of a long session
# takes ~2 ms).
MAX_HERE = 32
HERE_SECONDS = 0.008
CHECKPOINT_EVERY = 200  # commits between passive WAL checkpoints (SQLite's default: 1000 pages)

_STOP = object()


class _Chore:
    """Housekeeping for the thread, run outside any batch with the lock held (`chore`)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn


class _Job:
    __slots__ = ("fn", "future", "loop", "ok", "queued", "value")

    def __init__(
        self, fn: Callable[[], Any], future: asyncio.Future[Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        self.fn, self.future, self.loop = fn, future, loop
        self.ok = False
        self.value: Any = None
        self.queued = False  # counted in BatchThread._queued until resolved


class ConnectionLock:
    """The lock around the store's one connection (reentrant), which also gives its holder
    the busy timeout it needs: ``busy_timeout_ms`` for every holder (a write then waits that
    long for another process's write lock), none for the loop's own batches
    (`acquire_for_loop`), which must never wait: they hand their calls to the DB thread
    instead. The PRAGMA runs only when a holder needs another value than the one before it:
    under load the loop holds the lock batch after batch, without two PRAGMAs per batch."""

    def __init__(self, conn: sqlite3.Connection, busy_timeout_ms: int = 5000) -> None:
        self._lock = threading.RLock()
        self._conn = conn
        self.busy_timeout_ms = busy_timeout_ms
        self._timeout: int | None = None  # the connection's busy timeout (None: not known)
        self._depth = 0  # changed by the holder only

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        self._depth += 1
        if self._depth == 1:
            self._set(self.busy_timeout_ms)
        return True

    def acquire_for_loop(self) -> bool:
        """The lock if it is free (never blocks), with no busy timeout; False if another
        thread holds it, or this one does already (it may be waiting for a lock)."""
        if not self._lock.acquire(blocking=False):
            return False
        if self._depth:
            self._lock.release()
            return False
        self._depth = 1
        self._set(0)
        return True

    def release(self) -> None:
        self._depth -= 1
        self._lock.release()

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _set(self, ms: int) -> None:
        if self._timeout == ms:
            return
        try:
            self._conn.execute(f"PRAGMA busy_timeout={ms}")
        except sqlite3.ProgrammingError:  # closed: nothing will wait on it any more
            return
        self._timeout = ms


class BatchThread:
    """One thread owning ``conn`` for asynchronous callers (``lock`` also serves sync ones).

    ``map_error`` turns a call's exception into the one its caller sees (the store maps SQLite's
    disk errors to ``StorageUnavailable``)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        lock: ConnectionLock,
        name: str = "hermesd-db",
        *,
        map_error: Callable[[BaseException], BaseException] = lambda exc: exc,
    ) -> None:
        self._conn = conn
        self._lock = lock
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._here: list[_Job] = []  # calls for the loop's next round (``submit_here``)
        self._here_due = False  # a run of them is scheduled
        # Calls queued for the thread and not yet resolved. While there are any, calls for
        # the loop's thread go to the thread too: run here at once, a later call (a turn's
        # tool result) could commit before an earlier one (its tool call) still queued there.
        self._queued = 0
        self._commits = 0
        self._map_error = map_error  # what a failed call raises in its caller
        self.in_batch = False  # read by the store while it holds ``lock``
        with lock:
            conn.execute("PRAGMA wal_autocheckpoint=0")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Queue ``fn``; the future resolves on the calling loop once its batch committed."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._hand_over([_Job(fn, future, loop)])
        return future

    def submit_here(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Queue ``fn`` for a batch run on this (the event loop's) thread at the start of the
        loop's next round, or on the DB thread if the connection is busy then."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._here.append(_Job(fn, future, loop))
        self._schedule_here()
        return future

    def run_now(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``fn`` at once on this (the loop's) thread, in a transaction of its own, when no
        call waits here and the connection is free: an idle daemon then saves the two loop
        rounds a batch costs. Otherwise queue it like ``submit_here`` (a busy one batches)."""
        if self._here or self._queued or not self._lock.acquire_for_loop():
            return self.submit_here(fn)
        loop = asyncio.get_running_loop()
        job = _Job(fn, loop.create_future(), loop)
        try:
            if not self._begin_here():
                self._hand_over([job])
                return job.future
            self._execute_open([job])
        except Exception as exc:  # the connection itself failed
            log.exception("store call failed")
            self._fail([job], exc)
        finally:
            self._lock.release()
        self._resolve([job])
        return job.future

    def _begin_here(self) -> bool:
        """BEGIN IMMEDIATE without waiting for another process's lock (lock held for the
        loop: no busy timeout); False if the database is locked, for the DB thread to wait
        on instead."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:
            return False
        return True

    def _run_here(self) -> None:
        self._here_due = False
        batch, self._here = self._here[:MAX_HERE], self._here[MAX_HERE:]
        ran = len(batch)
        # the thread is using the connection, or has calls queued before these
        if self._queued or not self._lock.acquire_for_loop():
            self._hand_over(batch)
            batch = []
        else:
            try:
                if not self._begin_here():  # the database is locked: the thread's job
                    self._hand_over(batch)
                    batch = []
                else:
                    ran = self._execute_open(batch, time.monotonic() + HERE_SECONDS)
            except Exception as exc:  # the connection itself failed: nothing of it held
                log.exception("store batch of %d calls failed", len(batch))
                self._fail(batch, exc)
            finally:
                self._lock.release()
        self._resolve(batch[:ran])
        self._here[:0] = batch[ran:]  # past the time bound: first in the next round
        if self._here:  # the loop serves everyone else in between
            self._schedule_here()

    def _schedule_here(self) -> None:
        if not self._here_due:
            self._here_due = True
            asyncio.get_running_loop().call_soon(self._run_here)

    def _resolve(self, jobs: list[_Job]) -> None:
        for job in jobs:
            if job.queued:
                job.queued = False
                self._queued -= 1
            if job.future.done():  # the caller was cancelled
                continue
            if job.ok:
                job.future.set_result(job.value)
            else:
                job.future.set_exception(self._map_error(job.value))

    def _hand_over(self, batch: list[_Job]) -> None:
        """Queue calls for the thread (from the loop: counted until resolved there)."""
        for job in batch:
            job.queued = True
            self._queued += 1
            self._queue.put(job)

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
            if type(first) is _Chore:
                self._run_chore(first)
                continue
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
                if type(job) is _Chore:
                    self._queue.put(job)  # after this batch
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
                before = conn.total_changes
                self._run_job(batch[0], savepoint=False)
                if conn.total_changes != before:
                    self._committed()
                return
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error:  # cannot batch (e.g. locked): each call on its own
                for job in batch:
                    self._run_job(job, savepoint=False)
                return
            self._execute_open(batch)

    def _execute_open(self, batch: list[_Job], deadline: float | None = None) -> int:
        """Run ``batch`` in the transaction just begun (lock held), one savepoint per call,
        and commit; return how many calls ran (they stop at ``deadline``, after the first)."""
        conn = self._conn
        self.in_batch = True
        changed: list[_Job] = []
        ran = 0
        try:
            for job in batch:
                if ran and deadline is not None and time.monotonic() > deadline:
                    break
                ran += 1
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
            ran = len(batch)
        finally:
            self.in_batch = False
        if not conn.in_transaction:
            return ran
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:  # SQLite may already have rolled back (SQLITE_FULL)
                conn.execute("ROLLBACK")
            log.error("committing %d store calls failed: %s", len(changed), exc)
            self._fail(changed, exc)
            return ran
        if changed:
            self._committed()
        return ran

    def chore(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the thread after the calls queued so far, nobody waiting for it (a
        failure is logged). From any thread."""
        self._queue.put(_Chore(fn))

    def _run_chore(self, chore: _Chore) -> None:
        try:
            with self._lock:
                chore.fn()
        except Exception as exc:
            log.warning(
                "store housekeeping (%s) failed: %s", getattr(chore.fn, "__name__", "?"), exc
            )

    def _committed(self) -> None:
        """Count a commit; every ``CHECKPOINT_EVERY`` of them, queue a checkpoint."""
        self._commits += 1
        if self._commits >= CHECKPOINT_EVERY:
            self._commits = 0
            self.chore(self._checkpoint)

    def _checkpoint(self) -> None:
        """Copy the WAL's pages into the database file (passive: nobody waits for it; a
        failure, e.g. a full disk, leaves the data in the WAL meanwhile)."""
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

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
        except Exception as exc:
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
                loop.call_soon_threadsafe(self._resolve, jobs)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                pass
