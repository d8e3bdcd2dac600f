"""`SessionRows`: the ``sessions`` table of the store (``store.sessions``).

A session's metadata and counters: its id, title, model, platform, owner and working
directory, when it was created and last updated, how many messages it holds and the tokens its
model responses used (``message_count`` and the token counters move with every message
appended, `hermesd.store.messages`). Forking copies a session's messages and compactions into a
new one. Every method runs on the store's DB thread (`hermesd.store.database.on_db_thread`).
"""

from __future__ import annotations

import re
import secrets
import sqlite3
import time
from typing import Any, TypedDict

from hermesd.store import images
from hermesd.store.database import Database, Table, on_db_thread
from hermesd.store.dbfile import MessageNotFound, SessionNotFound, StoreError
from hermesd.store.search import SearchIndex

_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TITLE = 200


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


class SessionPage(TypedDict):
    sessions: list[SessionInfo]
    next_cursor: str | None


def new_session_id() -> str:
    """``20261129-121500-ab12cd``: sortable by creation, short, safe in URLs and paths."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


# The free-text columns are read as bytes and decoded here, invalid UTF-8 (damage in an intact
# page, docs/reliability.md) as replacement characters: a damaged title must not make the
# session, or the whole list, unreadable.
_COLUMNS = (
    "id, CAST(title AS BLOB) AS title, created_at, updated_at, CAST(model AS BLOB) AS model, "
    "platform, parent_id, prompt_tokens, completion_tokens, total_tokens, message_count, "
    "owner_uid, CAST(cwd AS BLOB) AS cwd"
)


def _text(value: bytes | str | None) -> str | None:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _session(row: sqlite3.Row) -> SessionInfo:
    return SessionInfo(
        id=row["id"],
        title=_text(row["title"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        model=_text(row["model"]),
        platform=row["platform"],
        parent_id=row["parent_id"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        total_tokens=row["total_tokens"],
        message_count=row["message_count"],
        owner_uid=row["owner_uid"],
        cwd=_text(row["cwd"]),
    )


class SessionRows(Table):
    """Sessions: create, find, list, rename, delete, fork; their token counters."""

    def __init__(self, db: Database, index: SearchIndex) -> None:
        super().__init__(db)
        self.index = index  # a fork writes messages: they count toward the next indexing run

    @on_db_thread
    def create(
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
            self.get(parent_id)
        now = time.time()
        for _ in range(5):
            sid = session_id or new_session_id()
            try:
                with self.db.tx() as db:
                    db.execute(
                        "INSERT INTO sessions (id, title, created_at, updated_at, model, platform,"
                        " parent_id, owner_uid, cwd) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (sid, title, now, now, model, platform, parent_id, owner_uid, cwd),
                    )
                return self.get(sid)
            except sqlite3.IntegrityError:
                if session_id is not None:
                    raise ValueError(f"session {session_id} already exists") from None
        raise StoreError("could not allocate a unique session id")

    @on_db_thread
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

    @on_db_thread
    def unfinished(self, platform: str) -> list[SessionInfo]:
        """Sessions of ``platform`` with a parent whose last message is not a final answer
        (an assistant message without tool calls): delegated children a stop cut short."""
        rows = self._conn.execute(
            "SELECT s.* FROM sessions s WHERE s.platform = ? AND s.parent_id IS NOT NULL"
            " AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id"
            " AND m.seq = (SELECT MAX(seq) FROM messages WHERE session_id = s.id)"
            " AND m.role = 'assistant' AND m.tool_calls IS NULL)",
            (platform,),
        ).fetchall()
        return [_session(row) for row in rows]

    @on_db_thread
    def get(self, session_id: str) -> SessionInfo:
        """The session's metadata; ``SessionNotFound`` if there is none."""
        row = self._row(f"SELECT {_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        if row is None:
            raise SessionNotFound(session_id)
        return _session(row)

    @on_db_thread
    def page(
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
            f"SELECT {_COLUMNS} FROM sessions {where} "
            "ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?",
            (*args, limit, max(0, offset)),
        ).fetchall()
        sessions = [_session(r) for r in rows]
        cursor = None
        if len(sessions) == limit:
            cursor = f"{sessions[-1]['updated_at']!r}~{sessions[-1]['id']}"
        return SessionPage(sessions=sessions, next_cursor=cursor)

    @on_db_thread
    def count(self) -> int:
        """How many sessions exist."""
        row = self._row("SELECT count(*) FROM sessions", ())
        return int(row[0]) if row else 0

    @on_db_thread
    def rename(self, session_id: str, title: str) -> SessionInfo:
        """Set the title (whitespace collapsed; empty clears it; at most MAX_TITLE characters)."""
        clean = " ".join(title.split()) or None
        if clean is not None and len(clean) > MAX_TITLE:
            raise ValueError(f"a title may have at most {MAX_TITLE} characters, not {len(clean)}")
        with self.db.tx() as db:
            if (
                db.execute(
                    "UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?",
                    (clean, time.time(), session_id),
                ).rowcount
                == 0
            ):
                raise SessionNotFound(session_id)
        return self.get(session_id)

    @on_db_thread
    def set_model(self, session_id: str, model: str | None) -> SessionInfo:
        """Set the model of later turns (None: the configured default)."""
        with self.db.tx() as db:
            if (
                db.execute(
                    "UPDATE sessions SET model = ?, updated_at = ? WHERE id = ?",
                    (model or None, time.time(), session_id),
                ).rowcount
                == 0
            ):
                raise SessionNotFound(session_id)
        return self.get(session_id)

    @on_db_thread
    def delete(self, session_id: str) -> None:
        """Delete the session and its messages (forks keep their copies)."""
        with self.db.tx() as db:
            if db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 0:
                raise SessionNotFound(session_id)

    @on_db_thread
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

    @on_db_thread
    def fork(
        self, session_id: str, upto_message_id: int | None = None, *, title: str | None = None
    ) -> SessionInfo:
        """A new session holding copies of the messages up to and including a message."""
        src = self.get(session_id)
        limit = upto_message_id
        if (
            limit is not None
            and self._row(
                "SELECT 1 FROM messages WHERE id = ? AND session_id = ?", (limit, session_id)
            )
            is None
        ):
            raise MessageNotFound(f"message {limit} is not in session {session_id}")
        new = self.create(
            title=title or (f"{src['title']} (fork)" if src["title"] else None),
            model=src["model"],
            platform=src["platform"],
            parent_id=session_id,
            owner_uid=src["owner_uid"],
            cwd=src["cwd"],
        )
        with self.db.tx() as db:
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
            images.copy_for_fork(db, session_id, new["id"])  # the copies' attached images
            # the copy keeps the compactions of the messages it holds (its view is the same)
            db.execute(
                "INSERT INTO compactions (session_id, upto_seq, view, engine, summary, replaced,"
                " fallback, focus, reason, created_at) SELECT ?, upto_seq, view, engine,"
                " summary, replaced, fallback, focus, reason, created_at FROM compactions"
                " WHERE session_id = ? AND undone_at IS NULL AND upto_seq <="
                " (SELECT coalesce(max(seq), 0) FROM messages WHERE session_id = ?) ORDER BY id",
                (new["id"], session_id, new["id"]),
            )
        self.index.written(cur.rowcount)
        return self.get(new["id"])

    @on_db_thread
    def add_usage(
        self,
        session_id: str,
        prompt_tokens: int,
        completion_tokens: int,
        total_tokens: int | None = None,
    ) -> None:
        """Add one model response's token counts to the session's counters."""
        total = prompt_tokens + completion_tokens if total_tokens is None else total_tokens
        with self.db.tx() as db:
            if (
                db.execute(
                    "UPDATE sessions SET prompt_tokens = prompt_tokens + ?, completion_tokens ="
                    " completion_tokens + ?, total_tokens = total_tokens + ? WHERE id = ?",
                    (prompt_tokens, completion_tokens, total, session_id),
                ).rowcount
                == 0
            ):
                raise SessionNotFound(session_id)
