"""`Database`: the open ``state.db`` connection on its one thread, and the write transaction.

Every table of the store (`hermesd.store.facade` lists them) is a `Table` over one shared
`Database`: it runs its statements on the connection this thread opened, the only thread that
may use it (``hermesd.store.dbthread``). A method marked `on_db_thread` may be called from any
thread: the call is handed to the DB thread and waited for; called on a thread that runs an
event loop, it raises instead of blocking it (there, ``await store.run(method, ...)``).

Durability: WAL with ``synchronous=NORMAL``. Every write is its own transaction (`Database.tx`),
committed before the call returns, or a savepoint when it runs inside another (a group commit
of the DB thread, or a call made of several store methods). A committed write survives the
process being killed; an OS crash or power loss may lose the last few commits (never corrupt
the file): the price of not calling fsync on every message. Nothing here knows what a table
holds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from hermesd.store.dbfile import corrupt_error, open_db_file, storage_error
from hermesd.store.dbthread import DbThread

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")


def _in_transaction(conn: sqlite3.Connection) -> bool:
    """Whether a transaction is open now (a statement may have ended it: read it afresh)."""
    return conn.in_transaction


class Database:
    """The store file's connection, owned by one `DbThread`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.thread = DbThread(connection=self._open_connection, map_error=self._storage_error)
        self._conn: sqlite3.Connection
        self._closed = False
        # Waits for the file to open (the daemon builds the store before it serves anything),
        # so a disk that refuses it fails the start-up with StorageUnavailable.
        self.thread.submit(self._open).result()

    def _open(self) -> None:
        self._conn = open_db_file(self.path)

    @property
    def conn(self) -> sqlite3.Connection:
        """The open connection (on the DB thread only)."""
        return self._conn

    def _open_connection(self) -> sqlite3.Connection | None:
        """The connection calls are batched on (the DB thread asks), None when there is none."""
        if self._closed:
            return None
        return getattr(self, "_conn", None)

    def _storage_error(self, exc: Exception) -> Exception:
        """A full disk, a read-only or vanished file as `StorageUnavailable`, a damaged one as
        `StorageCorrupt` (logged)."""
        if not isinstance(exc, OSError | sqlite3.DatabaseError):
            return exc
        mapped = storage_error(exc, self.path) or corrupt_error(exc, self.path)
        if mapped is None:
            return exc
        log.error("%s", mapped)
        return mapped

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` on the DB thread, waited for (`DbThread.call`)."""
        return self.thread.call(fn, *args, **kwargs)

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` on the DB thread, awaited (`DbThread.run`)."""
        return await self.thread.run(fn, *args, **kwargs)

    def close(self, before: Callable[[], object] | None = None) -> None:
        """Finish the calls queued, run ``before`` on the DB thread, close the connection (not
        from a thread running an event loop: there, await `aclose`)."""

        def shut() -> None:
            if before is not None:
                before()
            self._closed = True
            self._conn.close()

        self.thread.close(last=shut)

    async def aclose(self, before: Callable[[], object] | None = None) -> None:
        """`close` for the event loop: the loop waits for the DB thread, never blocks on it."""
        await asyncio.to_thread(self.close, before)

    @contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """Report damage a read runs into as `StorageCorrupt` naming ``what`` (a session)."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            mapped = corrupt_error(exc, self.path, what)
            if mapped is None:
                raise
            log.error("%s", mapped)
            raise mapped from exc

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """A write's transaction: its own, or a savepoint when it runs inside another."""
        conn = self._conn
        if conn.in_transaction:
            conn.execute("SAVEPOINT tx")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # else SQLite rolled all of it back (a full disk)
                    conn.execute("ROLLBACK TO tx")
                    conn.execute("RELEASE tx")
                raise
            conn.execute("RELEASE tx")
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # SQLite may already have rolled back (e.g. SQLITE_FULL at COMMIT)
            if _in_transaction(conn):
                conn.execute("ROLLBACK")
            raise


class Table:
    """One concern of the store (a table or a few), over the shared `Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @property
    def _conn(self) -> sqlite3.Connection:
        return self.db.conn

    def _row(self, sql: str, args: tuple[Any, ...]) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.conn.execute(sql, args).fetchone()
        return row


TableT = TypeVar("TableT", bound=Table)


def on_db_thread(
    method: Callable[Concatenate[TableT, P], T],
) -> Callable[Concatenate[TableT, P], T]:
    """Make a table's method run on the DB thread whichever thread calls it (`DbThread.call`)."""

    @functools.wraps(method)
    def run(self: TableT, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.db.thread.call(method, self, *args, **kwargs)

    return run
