"""Sessions and their messages in SQLite (``$HERMES_HOME/state.db``).

Every read and write of sessions, messages, full-text search and token counters. The file
itself (creation with mode 0600, pragmas, schema migrations) and the store's errors are
``hermesd.store.dbfile``, re-exported here; the search query, the search and the deferred index
are ``hermesd.store.search``. ``history()`` is what the model is sent of a session: the newest
compaction's view followed by the messages it did not replace (``hermesd.store.compactions``),
repaired so every tool call has exactly one result (``hermesd.store.history``); no stored
message is ever dropped.
It knows nothing of RPC, clients or models.

Threads: every statement runs on the store's one DB thread (``hermesd.store.dbthread``), which
opened the connection and is the only one that may use it. Code on the event loop awaits
``store.run(store.method, ...)``. The public methods may also be called directly from any
other thread (a tool handler on a worker, a test): the call is handed to the DB thread and
waited for; called on a thread that runs an event loop, they raise instead of blocking it.

Durability: WAL with ``synchronous=NORMAL``. Every write is its own transaction, committed
before the call returns; a committed write survives the process being killed. An OS crash or
power loss may lose the last few commits (never corrupt the file); that is the price of not
calling fsync on every message.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypedDict, TypeVar

from hermesd.store import compactions
from hermesd.store import search as fts
from hermesd.store.compactions import View
from hermesd.store.dbfile import (
    BUSY_TIMEOUT_MS,
    MessageNotFound,
    SchemaTooNew,
    SessionNotFound,
    StorageUnavailable,
    StoreError,
    migrate,
    open_db_file,
    storage_error,
)
from hermesd.store.dbthread import DbThread
from hermesd.store.history import INTERRUPTED_RESULT, to_openai
from hermesd.store.search import INDEX_EVERY, RANKED_MATCHES, SearchHit, fts_query, index_pending

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

# with the database file's names (hermesd.store.dbfile), which callers know from here
__all__ = [
    "BUSY_TIMEOUT_MS",
    "MAX_TITLE",
    "RANKED_MATCHES",
    "ROLES",
    "MessageNotFound",
    "MessageRecord",
    "SchemaTooNew",
    "SearchHit",
    "SessionInfo",
    "SessionNotFound",
    "SessionPage",
    "SessionStore",
    "StorageUnavailable",
    "StoreError",
    "fts_query",
    "migrate",
    "new_session_id",
    "open_db_file",
    "storage_error",
]

ROLES = ("system", "user", "assistant", "tool")
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TITLE_CHARS = 60


class SessionInfo(TypedDict):
    id: str
    title: str | None
    created_at: float
    updated_at: float
    model: str | None
    platform: str
    parent_id: str | None
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    message_count: int
    owner_uid: int | None
    cwd: str | None


class MessageRecord(TypedDict):
    id: int
    session_id: str
    seq: int
    turn_id: str | None
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    tool_name: str | None
    created_at: float
    undone: bool  # taken out of what the model is sent by /undo; still in the record


class SessionPage(TypedDict):
    sessions: list[SessionInfo]
    next_cursor: str | None


def new_session_id() -> str:
    """``20261129-121500-ab12cd``: sortable by creation, short, safe in URLs and paths."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def _derive_title(content: str) -> str | None:
    line = " ".join(content.split())
    if not line:
        return None
    return line if len(line) <= _TITLE_CHARS else line[: _TITLE_CHARS - 1].rstrip() + "…"


def _session(row: sqlite3.Row) -> SessionInfo:
    return SessionInfo(
        id=row["id"],
        title=row["title"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        model=row["model"],
        platform=row["platform"],
        parent_id=row["parent_id"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        total_tokens=row["total_tokens"],
        message_count=row["message_count"],
        owner_uid=row["owner_uid"],
        cwd=row["cwd"],
    )


def _message(row: sqlite3.Row) -> MessageRecord:
    calls = row["tool_calls"]
    return MessageRecord(
        id=row["id"],
        session_id=row["session_id"],
        seq=row["seq"],
        turn_id=row["turn_id"],
        role=row["role"],
        content=row["content"],
        tool_calls=json.loads(calls) if calls else None,
        tool_call_id=row["tool_call_id"],
        undone=row["undone_at"] is not None,
        tool_name=row["tool_name"],
        created_at=row["created_at"],
    )


MAX_TITLE = 200


def _in_transaction(conn: sqlite3.Connection) -> bool:
    """Whether a transaction is open now (a statement may have ended it: read it afresh)."""
    return conn.in_transaction


def _on_db_thread(
    method: Callable[Concatenate[SessionStore, P], T],
) -> Callable[Concatenate[SessionStore, P], T]:
    """Make a store method run on the DB thread whichever thread calls it (`DbThread.call`)."""

    @functools.wraps(method)
    def run(self: SessionStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._db.call(method, self, *args, **kwargs)

    return run


class SessionStore:
    """Sessions, messages, search and usage counters in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = DbThread(connection=self._open_connection, map_error=self._storage_error)
        self._unindexed = 0  # messages written since the last indexing run (DB thread only)
        # Waits for the file to open (the daemon builds the store before it serves anything),
        # so a disk that refuses it fails the start-up with StorageUnavailable.
        self._conn: sqlite3.Connection
        self._closed = False
        self._db.submit(self._open).result()

    def _open(self) -> None:
        self._conn = open_db_file(self.path)
        self._index_quietly("at open")  # what a killed daemon wrote and did not index

    @classmethod
    def in_home(cls, home: Path, **kwargs: Any) -> SessionStore:
        """The store at ``home/state.db``."""
        return cls(home / "state.db", **kwargs)

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` (a method of this store, or a function calling several)
        on the DB thread after the calls handed over before it; await the result, which
        comes back once its write committed."""
        return await self._db.run(fn, *args, **kwargs)

    def _storage_error(self, exc: Exception) -> Exception:
        """A full disk, a read-only or vanished file as `StorageUnavailable` (logged)."""
        if not isinstance(exc, OSError | sqlite3.OperationalError):
            return exc
        mapped = storage_error(exc, self.path)
        if mapped is None:
            return exc
        log.error("%s", mapped)
        return mapped

    def close(self) -> None:
        """Finish the calls queued, index what is left, close the connection (not from a
        thread running an event loop: there, await `aclose`)."""
        self._db.close(last=self._shut)

    async def aclose(self) -> None:
        """`close` for the event loop: the loop waits for the DB thread, never blocks on it."""
        await asyncio.to_thread(self._db.close, self._shut)

    def _shut(self) -> None:
        self._index_quietly("at close")
        self._closed = True
        self._conn.close()

    def run_in_transaction(self, fn: Callable[[], T]) -> T:
        """``fn()`` (several store calls) as one transaction: all of its writes or none (on
        the DB thread: hand it to `run`)."""
        with self._tx():
            return fn()

    def connection(self) -> sqlite3.Connection:
        """The open connection, for tables kept beside the sessions (``store.cronjobs``); use
        it only inside a call handed to `run`, which puts it on the DB thread."""
        return self._conn

    def transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A write's transaction (or savepoint), as the store's own methods use."""
        return self._tx()

    def _open_connection(self) -> sqlite3.Connection | None:
        """The connection calls are batched on (the DB thread asks), None when there is none."""
        if self._closed:
            return None
        return getattr(self, "_conn", None)

    # -- the search index (hermesd.store.search) ----------------------------------------------

    def _written(self, count: int) -> None:
        """Count messages committed; every ``INDEX_EVERY``, index them (on the DB thread, as
        every call here; the write that makes it due waits for it, ~10 ms)."""
        self._unindexed += count
        if self._unindexed >= INDEX_EVERY:
            self._unindexed = 0
            self._index_quietly("in the background")

    @_on_db_thread
    def index_pending(self) -> int:
        """Index the messages written since the last run; return how many."""
        return index_pending(self._conn)

    def _index_quietly(self, when: str) -> None:
        """`index_pending`, a failure (a full disk) only logged: search catches up later."""
        try:
            self.index_pending()
        except sqlite3.Error as exc:
            log.warning("indexing new messages for search %s failed: %s", when, exc)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A write's transaction: its own, or a savepoint when it runs inside another (a
        group commit of the DB thread, or a call made of several store methods)."""
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
            # SQLite may already have rolled back (e.g. SQLITE_FULL at COMMIT).
            if _in_transaction(conn):
                conn.execute("ROLLBACK")
            raise

    def _row(self, sql: str, args: tuple[Any, ...]) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self._conn.execute(sql, args).fetchone()
        return row

    # -- sessions ---------------------------------------------------------------------------

    @_on_db_thread
    def create_session(
        self,
        *,
        title: str | None = None,
        model: str | None = None,
        platform: str = "cli",
        parent_id: str | None = None,
        session_id: str | None = None,
        owner_uid: int | None = None,
        cwd: str | None = None,
    ) -> SessionInfo:
        """A new empty session; ``session_id`` is generated unless given. ``owner_uid``: the
        uid it belongs to; ``cwd``: the directory its tools work in (None: the default)."""
        if session_id is not None and not _SESSION_ID.match(session_id):
            raise ValueError("session id must be 1-64 characters of A-Z a-z 0-9 _ -")
        if parent_id is not None:
            self.get_session(parent_id)
        now = time.time()
        for _ in range(5):
            sid = session_id or new_session_id()
            try:
                with self._tx() as db:
                    db.execute(
                        "INSERT INTO sessions (id, title, created_at, updated_at, model, platform,"
                        " parent_id, owner_uid, cwd) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (sid, title, now, now, model, platform, parent_id, owner_uid, cwd),
                    )
                return self.get_session(sid)
            except sqlite3.IntegrityError:
                if session_id is not None:
                    raise ValueError(f"session {session_id} already exists") from None
        raise StoreError("could not allocate a unique session id")

    @_on_db_thread
    def ids_starting_with(
        self, prefix: str, limit: int = 11, *, owner_uid: int | None = None
    ) -> list[str]:
        """Up to ``limit`` session ids that start with ``prefix``, in order; with
        ``owner_uid``, only the sessions that uid created."""
        owned = "" if owner_uid is None else " AND owner_uid = ?"
        rows = self._conn.execute(
            f"SELECT id FROM sessions WHERE substr(id, 1, ?) = ?{owned} ORDER BY id LIMIT ?",
            (len(prefix), prefix, *(() if owner_uid is None else (owner_uid,)), limit),
        ).fetchall()
        return [row[0] for row in rows]

    @_on_db_thread
    def get_session(self, session_id: str) -> SessionInfo:
        """The session's metadata; ``SessionNotFound`` if there is none."""
        row = self._row("SELECT * FROM sessions WHERE id = ?", (session_id,))
        if row is None:
            raise SessionNotFound(session_id)
        return _session(row)

    @_on_db_thread
    def list_sessions(
        self,
        limit: int = 50,
        *,
        before: str | None = None,
        offset: int = 0,
        owner_uid: int | None = None,
    ) -> SessionPage:
        """Sessions, most recently updated first; pass ``next_cursor`` as ``before`` to page.
        With ``owner_uid``, only the sessions that uid created."""
        limit = max(1, min(int(limit), 1000))
        conditions: list[str] = []
        args: list[Any] = []
        if before:
            stamp, _, sid = before.partition("~")
            try:
                key = float(stamp)
            except ValueError:
                raise ValueError(f"invalid cursor: {before!r}") from None
            conditions.append("(updated_at < ? OR (updated_at = ? AND id < ?))")
            args += [key, key, sid]
        if owner_uid is not None:
            conditions.append("owner_uid = ?")
            args.append(owner_uid)
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        rows = self._conn.execute(
            f"SELECT * FROM sessions {where} ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?",
            (*args, limit, max(0, offset)),
        ).fetchall()
        sessions = [_session(r) for r in rows]
        cursor = None
        if len(sessions) == limit:
            cursor = f"{sessions[-1]['updated_at']!r}~{sessions[-1]['id']}"
        return SessionPage(sessions=sessions, next_cursor=cursor)

    @_on_db_thread
    def count_sessions(self) -> int:
        """How many sessions exist."""
        row = self._row("SELECT count(*) FROM sessions", ())
        return int(row[0]) if row else 0

    @_on_db_thread
    def rename(self, session_id: str, title: str) -> SessionInfo:
        """Set the title (whitespace collapsed; empty clears it; at most MAX_TITLE characters)."""
        clean = " ".join(title.split()) or None
        if clean is not None and len(clean) > MAX_TITLE:
            raise ValueError(f"a title may have at most {MAX_TITLE} characters, not {len(clean)}")
        with self._tx() as db:
            if (
                db.execute(
                    "UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?",
                    (clean, time.time(), session_id),
                ).rowcount
                == 0
            ):
                raise SessionNotFound(session_id)
        return self.get_session(session_id)

    @_on_db_thread
    def set_model(self, session_id: str, model: str | None) -> SessionInfo:
        """Set the model of later turns (None: the configured default)."""
        with self._tx() as db:
            if (
                db.execute(
                    "UPDATE sessions SET model = ?, updated_at = ? WHERE id = ?",
                    (model or None, time.time(), session_id),
                ).rowcount
                == 0
            ):
                raise SessionNotFound(session_id)
        return self.get_session(session_id)

    @_on_db_thread
    def delete(self, session_id: str) -> None:
        """Delete the session and its messages (forks keep their copies)."""
        with self._tx() as db:
            if db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 0:
                raise SessionNotFound(session_id)

    @_on_db_thread
    def prunable(
        self, *, updated_before: float | None, empty: bool, owner_uid: int | None
    ) -> list[str]:
        """Ids of sessions updated before ``updated_before`` and/or without messages (of one
        owner with ``owner_uid``), oldest first: what ``session.prune`` deletes."""
        conditions, args = ["1"], []
        if updated_before is not None:
            conditions.append("updated_at < ?")
            args.append(updated_before)
        if empty:
            conditions.append("message_count = 0")
        if owner_uid is not None:
            conditions.append("owner_uid = ?")
            args.append(owner_uid)
        rows = self._conn.execute(
            f"SELECT id FROM sessions WHERE {' AND '.join(conditions)} ORDER BY updated_at",
            args,
        ).fetchall()
        return [str(r[0]) for r in rows]

    @_on_db_thread
    def fork(
        self, session_id: str, upto_message_id: int | None = None, *, title: str | None = None
    ) -> SessionInfo:
        """A new session holding copies of the messages up to and including a message."""
        src = self.get_session(session_id)
        limit = upto_message_id
        if (
            limit is not None
            and self._row(
                "SELECT 1 FROM messages WHERE id = ? AND session_id = ?", (limit, session_id)
            )
            is None
        ):
            raise MessageNotFound(f"message {limit} is not in session {session_id}")
        new = self.create_session(
            title=title or (f"{src['title']} (fork)" if src["title"] else None),
            model=src["model"],
            platform=src["platform"],
            parent_id=session_id,
            owner_uid=src["owner_uid"],
            cwd=src["cwd"],
        )
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO messages (session_id, seq, turn_id, role, content, tool_calls,"
                " tool_call_id, tool_name, created_at, undone_at) SELECT ?, seq, turn_id, role,"
                " content, tool_calls, tool_call_id, tool_name, created_at, undone_at FROM messages"
                " WHERE session_id = ? AND (? IS NULL OR id <= ?) ORDER BY seq",
                (new["id"], session_id, limit, limit),
            )
            db.execute(
                "UPDATE sessions SET message_count = ? WHERE id = ?", (cur.rowcount, new["id"])
            )
            # the copy keeps the compactions of the messages it holds (its view is the same)
            db.execute(
                "INSERT INTO compactions (session_id, upto_seq, view, engine, summary, replaced,"
                " fallback, focus, reason, created_at) SELECT ?, upto_seq, view, engine,"
                " summary, replaced, fallback, focus, reason, created_at FROM compactions"
                " WHERE session_id = ? AND undone_at IS NULL AND upto_seq <="
                " (SELECT coalesce(max(seq), 0) FROM messages WHERE session_id = ?) ORDER BY id",
                (new["id"], session_id, new["id"]),
            )
        self._written(cur.rowcount)
        return self.get_session(new["id"])

    @_on_db_thread
    def add_usage(
        self,
        session_id: str,
        prompt_tokens: int,
        completion_tokens: int,
        total_tokens: int | None = None,
    ) -> None:
        """Add one model response's token counts to the session's counters."""
        total = prompt_tokens + completion_tokens if total_tokens is None else total_tokens
        with self._tx() as db:
            if (
                db.execute(
                    "UPDATE sessions SET prompt_tokens = prompt_tokens + ?, completion_tokens ="
                    " completion_tokens + ?, total_tokens = total_tokens + ? WHERE id = ?",
                    (prompt_tokens, completion_tokens, total, session_id),
                ).rowcount
                == 0
            ):
                raise SessionNotFound(session_id)

    # -- messages ---------------------------------------------------------------------------

    @_on_db_thread
    def append_message(
        self,
        session_id: str,
        role: str,
        content: str | None = None,
        *,
        tool_calls: list[dict[str, Any]] | None = None,
        tool_call_id: str | None = None,
        tool_name: str | None = None,
        turn_id: str | None = None,
        usage: tuple[int, int, int | None] | None = None,
    ) -> MessageRecord:
        """Append one message and commit it before returning; ``usage`` (prompt, completion,
        total tokens of the completion that produced it; total None: their sum) is added to
        the session's counters in the same transaction."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        if role == "tool" and not tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        if tool_calls is not None and (role != "assistant" or not isinstance(tool_calls, list)):
            raise ValueError("tool_calls must be a list on an assistant message")
        now = time.time()
        title = _derive_title(content) if role == "user" and content else None
        prompt, completion, total = usage or (0, 0, 0)
        total = prompt + completion if total is None else total
        with self._tx() as db:
            row = db.execute(
                "SELECT coalesce(max(seq), 0) FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()
            if (
                db.execute(
                    "UPDATE sessions SET updated_at = ?, message_count = message_count + 1,"
                    " title = coalesce(title, ?), prompt_tokens = prompt_tokens + ?,"
                    " completion_tokens = completion_tokens + ?, total_tokens = total_tokens + ?"
                    " WHERE id = ?",
                    (now, title, prompt, completion, total, session_id),
                ).rowcount
                == 0
            ):
                raise SessionNotFound(session_id)
            seq = row[0] + 1
            message_id = db.execute(
                "INSERT INTO messages (session_id, seq, turn_id, role, content, tool_calls,"
                " tool_call_id, tool_name, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    seq,
                    turn_id,
                    role,
                    content,
                    json.dumps(tool_calls) if tool_calls else None,
                    tool_call_id,
                    tool_name,
                    now,
                ),
            ).lastrowid
        self._written(1)
        return MessageRecord(
            id=int(message_id or 0),
            session_id=session_id,
            seq=seq,
            turn_id=turn_id,
            role=role,
            content=content,
            tool_calls=tool_calls or None,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            created_at=now,
            undone=False,
        )

    @_on_db_thread
    def messages(
        self,
        session_id: str,
        *,
        limit: int | None = None,
        after_seq: int = 0,
        include_undone: bool = True,
    ) -> list[MessageRecord]:
        """Stored messages in order (the newest ``limit`` when given), for display and export;
        without ``include_undone``, only those still in the conversation."""
        self.get_session(session_id)
        where = "session_id = ? AND seq > ?" + ("" if include_undone else " AND undone_at IS NULL")
        if limit is None:
            rows = self._conn.execute(
                f"SELECT * FROM messages WHERE {where} ORDER BY seq",
                (session_id, after_seq),
            ).fetchall()
        else:
            rows = self._conn.execute(
                f"SELECT * FROM (SELECT * FROM messages WHERE {where}"
                " ORDER BY seq DESC LIMIT ?) ORDER BY seq",
                (session_id, after_seq, max(0, limit)),
            ).fetchall()
        return [_message(r) for r in rows]

    @_on_db_thread
    def undo_last_turn(self, session_id: str) -> list[MessageRecord]:
        """Take the last turn still in the conversation (its user message and everything after
        it) out of what the model is sent; the messages stay stored, marked undone. Returns
        them, the user message first; empty when there is nothing to undo."""
        self.get_session(session_id)
        last_user = self._row(
            "SELECT seq FROM messages WHERE session_id = ? AND role = 'user'"
            " AND undone_at IS NULL ORDER BY seq DESC LIMIT 1",
            (session_id,),
        )
        if last_user is None:
            return []
        with self._tx() as db:
            rows = db.execute(
                "SELECT * FROM messages WHERE session_id = ? AND seq >= ? AND undone_at IS NULL"
                " ORDER BY seq",
                (session_id, last_user["seq"]),
            ).fetchall()
            db.execute(
                "UPDATE messages SET undone_at = ? WHERE session_id = ? AND seq >= ?"
                " AND undone_at IS NULL",
                (time.time(), session_id, last_user["seq"]),
            )
            # a compaction standing for an undone message no longer says what was said
            compactions.retire_from(db, session_id, last_user["seq"])
        undone = [_message(r) for r in rows]
        for record in undone:
            record["undone"] = True
        return undone

    @_on_db_thread
    def history(self, session_id: str) -> list[dict[str, Any]]:
        """What the model is sent of this session: the newest compaction's view, then the
        stored messages after it (without the turns /undo took out), OpenAI-shaped."""
        return self.view(session_id).messages

    @_on_db_thread
    def view(self, session_id: str) -> View:
        """`history` with the stored seq of each message (what a context engine compacts)."""
        prefix, upto, count = compactions.latest(self._conn, session_id)
        records = self.messages(session_id, after_seq=upto, include_undone=False)
        return compactions.build_view(
            prefix, upto, count, [(r["seq"], to_openai(r)) for r in records]
        )

    @_on_db_thread
    def record_compaction(
        self,
        session_id: str,
        prefix: list[dict[str, Any]],
        upto_seq: int,
        *,
        engine: str,
        summary: str | None = None,
        replaced: int = 0,
        fallback: bool = False,
        focus: str | None = None,
        reason: str | None = None,
    ) -> int:
        """Keep a compaction of the session (`hermesd.store.compactions.record`); its id."""
        self.get_session(session_id)
        with self._tx() as db:
            return compactions.record(
                db,
                session_id,
                prefix,
                upto_seq,
                engine=engine,
                summary=summary,
                replaced=replaced,
                fallback=fallback,
                focus=focus,
                reason=reason,
            )

    @_on_db_thread
    def compactions(self, session_id: str) -> list[dict[str, Any]]:
        """The session's compactions, oldest first (retired ones marked ``undone``)."""
        self.get_session(session_id)
        return compactions.listing(self._conn, session_id)

    @_on_db_thread
    def close_dangling_tool_calls(
        self, session_id: str, reason: str = INTERRUPTED_RESULT, turn_id: str | None = None
    ) -> int:
        """Persist error results for the last assistant message's unanswered tool calls.

        Only when nothing but tool results follows that message (otherwise ``history()``
        repairs the sequence on the fly). Returns how many results were written.
        """
        last = self._conn.execute(
            "SELECT * FROM messages WHERE session_id = ? AND role != 'tool'"
            " ORDER BY seq DESC LIMIT 1",
            (session_id,),
        ).fetchone()
        if last is None or last["role"] != "assistant" or not last["tool_calls"]:
            return 0
        answered = {
            r[0]
            for r in self._conn.execute(
                "SELECT tool_call_id FROM messages WHERE session_id = ? AND seq > ?",
                (session_id, last["seq"]),
            )
        }
        missing = [c for c in json.loads(last["tool_calls"]) if c.get("id") not in answered]
        for call in missing:
            name = (call.get("function") or {}).get("name")
            self.append_message(
                session_id,
                "tool",
                json.dumps({"error": reason}),
                tool_call_id=str(call.get("id")),
                tool_name=name,
                turn_id=turn_id or last["turn_id"],
            )
        if missing:
            log.info("session %s: closed %d unanswered tool call(s)", session_id, len(missing))
        return len(missing)

    # -- search -----------------------------------------------------------------------------

    @_on_db_thread
    def search(
        self,
        query: str,
        limit: int = 20,
        *,
        session_id: str | None = None,
        owner_uid: int | None = None,
    ) -> list[SearchHit]:
        """Messages matching every word of ``query``, with highlighted snippets
        (`hermesd.store.search.search`); with ``owner_uid``, only in that uid's sessions.
        Messages not yet indexed are indexed first, so every committed message can be found;
        when that fails (a full disk, say) the search runs on what is indexed."""
        if fts_query(query) is None:
            return []
        try:
            index_pending(self._conn)
        except sqlite3.DatabaseError as exc:
            log.warning("searching without the newest messages: indexing them failed: %s", exc)
        return fts.search(self._conn, query, limit, session_id=session_id, owner_uid=owner_uid)

    # -- approval rules ("always" answers; hermesd.approvals) -------------------------------

    @_on_db_thread
    def approval_rules(self) -> list[dict[str, Any]]:
        """Remembered "always" approvals, oldest first."""
        rows = self._conn.execute(
            "SELECT pattern_key, decision, decided_by, description, created_at"
            " FROM approvals ORDER BY created_at, pattern_key"
        ).fetchall()
        return [dict(r) for r in rows]

    @_on_db_thread
    def add_approval_rule(
        self, pattern_key: str, decided_by: str, description: str = ""
    ) -> dict[str, Any]:
        """Remember ``pattern_key`` as always approved (replacing an older rule for it)."""
        now = time.time()
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO approvals"
                " (pattern_key, decision, decided_by, description, created_at)"
                " VALUES (?, 'always', ?, ?, ?)",
                (pattern_key, decided_by, description, now),
            )
        return {
            "pattern_key": pattern_key,
            "decision": "always",
            "decided_by": decided_by,
            "description": description,
            "created_at": now,
        }

    @_on_db_thread
    def revoke_approval_rule(self, pattern_key: str) -> bool:
        """Forget the rule for ``pattern_key``; False when there was none."""
        with self._tx() as conn:
            return (
                conn.execute("DELETE FROM approvals WHERE pattern_key = ?", (pattern_key,)).rowcount
                > 0
            )

    # -- memory snapshots (the prompt blocks a session was started with; hermesd.memory) -------

    @_on_db_thread
    def memory_snapshot(self, session_id: str) -> str | None:
        """The memory snapshot kept for the session; None when it has none yet."""
        row = self._row("SELECT memory_snapshot FROM sessions WHERE id = ?", (session_id,))
        return None if row is None else row[0]

    @_on_db_thread
    def keep_memory_snapshot(self, session_id: str, snapshot: str) -> None:
        """Keep ``snapshot`` as the session's memory snapshot (replacing an older one)."""
        with self._tx() as conn:
            conn.execute(
                "UPDATE sessions SET memory_snapshot = ? WHERE id = ?", (snapshot, session_id)
            )

    # --- deliveries to the memory provider (hermesd.memory.providers) ----------------------

    @_on_db_thread
    def journal_delivery(self, provider: str, session_id: str, kind: str, payload: str) -> int:
        """Keep a delivery to make; its id (remove it with `delivery_made`)."""
        with self._tx() as conn:
            cursor = conn.execute(
                "INSERT INTO memory_deliveries (provider, session_id, kind, payload, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (provider, session_id, kind, payload, time.time()),
            )
        return int(cursor.lastrowid or 0)

    @_on_db_thread
    def delivery_made(self, delivery_id: int) -> None:
        """The provider answered this delivery: forget it."""
        with self._tx() as conn:
            conn.execute("DELETE FROM memory_deliveries WHERE id = ?", (delivery_id,))

    @_on_db_thread
    def delivery_attempted(self, delivery_id: int) -> int:
        """One more attempt at this delivery is about to be made: the attempts so far."""
        with self._tx() as conn:
            conn.execute(
                "UPDATE memory_deliveries SET attempts = attempts + 1 WHERE id = ?", (delivery_id,)
            )
            row = conn.execute(
                "SELECT attempts FROM memory_deliveries WHERE id = ?", (delivery_id,)
            ).fetchone()
        return int(row[0]) if row else 0

    @_on_db_thread
    def pending_deliveries(self, provider: str) -> list[dict[str, Any]]:
        """Deliveries to ``provider`` not made yet, oldest first."""
        rows = self._conn.execute(
            "SELECT id, session_id, kind, payload, attempts FROM memory_deliveries"
            " WHERE provider = ?"
            " ORDER BY id",
            (provider,),
        ).fetchall()
        return [dict(r) for r in rows]
