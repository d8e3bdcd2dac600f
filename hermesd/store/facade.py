"""`SessionStore`: the session store in ``$HERMES_HOME/state.db``, one object per concern.

The store owns the file's `Database` (its connection, on the one DB thread, and the write
transaction) and one table object per concern, each over that database:

- ``store.sessions`` (`SessionRows`): sessions, their metadata and token counters, forks;
- ``store.messages`` (`MessageLog`): messages, /undo, and what the model is sent of a session;
- ``store.compactions`` (`CompactionLog`): what context engines made of older messages;
- ``store.search`` (`SearchIndex`): full-text search and when messages are indexed for it;
- ``store.usage`` (`UsageLedger`): every model request's tokens and cost;
- ``store.cron`` (`CronTable`): scheduled jobs and their runs;
- ``store.approvals`` (`ApprovalRules`): remembered "always" approvals;
- ``store.memory`` (`MemoryJournal`): memory snapshots and the memory provider's deliveries;
- ``store.todos`` (`TodoLists`): each session's task list (the ``todo`` tool).

Every statement runs on the DB thread. Code on the event loop awaits ``store.run(fn, ...)``
with a table's method (``store.run(store.messages.append, sid, "user", text)``) or a function
calling several; from any other thread (a tool handler on a worker, a test) a table's methods
may be called directly: the call is handed to the DB thread and waited for. The store knows
nothing of RPC, clients or models.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from hermesd.store.approval_rules import ApprovalRules
from hermesd.store.compactions import CompactionLog
from hermesd.store.cronjobs import CronTable
from hermesd.store.database import Database
from hermesd.store.memory_journal import MemoryJournal
from hermesd.store.messages import MessageLog
from hermesd.store.search import SearchIndex
from hermesd.store.session_rows import SessionRows
from hermesd.store.todos import TodoLists
from hermesd.store.usage import UsageLedger

T = TypeVar("T")
P = ParamSpec("P")


class SessionStore:
    """Sessions, messages, search, usage, cron jobs, approvals and memory in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = Database(path)
        self.search = SearchIndex(self.db)
        self.sessions = SessionRows(self.db, self.search)
        self.messages = MessageLog(self.db, self.sessions, self.search)
        self.compactions = CompactionLog(self.db, self.sessions)
        self.usage = UsageLedger(self.db)
        self.cron = CronTable(self.db)
        self.approvals = ApprovalRules(self.db)
        self.memory = MemoryJournal(self.db)
        self.todos = TodoLists(self.db)
        # what a killed daemon wrote and did not index; waited for like the open (the daemon
        # builds the store on its loop before it serves anything)
        self.db.thread.submit(self.search.index_quietly, "at open").result()

    @classmethod
    def in_home(cls, home: Path, **kwargs: Any) -> SessionStore:
        """The store at ``home/state.db``."""
        return cls(home / "state.db", **kwargs)

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` (a table's method, or a function calling several) on
        the DB thread after the calls handed over before it; await the result, which comes
        back once its write committed."""
        return await self.db.run(fn, *args, **kwargs)

    def run_in_transaction(self, fn: Callable[[], T]) -> T:
        """``fn()`` (several store calls) as one transaction: all of its writes or none (on
        the DB thread: hand it to `run`)."""
        with self.db.tx():
            return fn()

    def connection(self) -> sqlite3.Connection:
        """The open connection; use it only inside a call handed to `run`, which puts it on
        the DB thread."""
        return self.db.conn

    def transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A write's transaction (or savepoint), as the tables' own methods use."""
        return self.db.tx()

    def close(self) -> None:
        """Finish the calls queued, index what is left, close the connection (not from a
        thread running an event loop: there, await `aclose`)."""
        self.db.close(before=self._index_at_close)

    async def aclose(self) -> None:
        """`close` for the event loop: the loop waits for the DB thread, never blocks on it."""
        await self.db.aclose(before=self._index_at_close)

    def _index_at_close(self) -> None:
        self.search.index_quietly("at close")
