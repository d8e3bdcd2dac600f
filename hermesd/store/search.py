"""Full-text search over messages: the query a user's words become, the search, and the
deferred index.

``messages_fts`` is an external-content FTS5 table over ``messages.content``. Writing a message
does not index it: a trigger lists its id in ``fts_pending`` (schema v5, see
``hermesd.store.migrations``), in the same transaction as the message. `index_pending` indexes what
is listed and empties the list, in one transaction. Indexing a message cost as much as the
rest of writing it; done as messages were written, that was on the event loop in every model
round. In batches it runs on the store's thread, where SQLite works without the interpreter
lock, and costs less per message.

When it runs (`SearchIndex`, ``store.search``): when the store opens (what a killed daemon left
listed), on the store's thread every ``INDEX_EVERY`` messages, before every search (so a search
sees every committed message), and when the store closes.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, TypedDict

from hermesd.store.database import Database, Table, on_db_thread

log = logging.getLogger(__name__)

#: Searches matching more messages than this list the newest matches instead of ranking them all.
RANKED_MATCHES = 2000
#: Messages written between two indexing runs on the store's thread.
INDEX_EVERY = 256
#: Messages indexed per statement: a long backlog (a bulk import) goes in steps of this size.
INDEX_STEP = 2000


class SearchHit(TypedDict):
    message_id: int
    session_id: str
    session_title: str | None
    role: str
    snippet: str
    created_at: float


def fts_query(text: str) -> str | None:
    """A user's search text as a safe FTS5 query: every word a quoted term, all required.

    Operators, quotes and parentheses lose their meaning; a trailing ``*`` on a word keeps
    working as a prefix search. None when nothing searchable remains.
    """
    terms = []
    for word in text.split():
        prefix = word.endswith("*")
        core = word.rstrip("*")
        if not any(ch.isalnum() for ch in core):
            continue
        terms.append('"' + core.replace('"', '""') + '"' + ("*" if prefix else ""))
    return " ".join(terms) or None


def search(
    conn: sqlite3.Connection,
    query: str,
    limit: int = 20,
    *,
    session_id: str | None = None,
    owner_uid: int | None = None,
) -> list[SearchHit]:
    """Messages matching every word of ``query``, with highlighted snippets, as indexed now
    (the store runs `index_pending` first, so the newest messages are included).

    Best first (BM25) when at most ``RANKED_MATCHES`` messages match; newest first when more
    do. Ranking needs every match scored (BM25 also counts the whole match list once per
    query), which for a word in most messages costs a scan of most of the index; a word that
    common says little, and the newest matches are the useful ones. Both orders read a bounded
    number of index entries. ``owner_uid`` keeps only messages of sessions that uid created.
    """
    match = fts_query(query)
    if match is None:
        return []
    limit = max(1, min(int(limit), 200))
    args: list[Any] = [match]
    scope = ""
    if session_id is not None:
        lo, hi = conn.execute(
            "SELECT min(id), max(id) FROM messages WHERE session_id = ?", (session_id,)
        ).fetchone()
        if lo is None:
            return []
        scope = " AND messages_fts.rowid BETWEEN ? AND ? AND m.session_id = ?"
        args += [lo, hi, session_id]
    owners = ""
    if owner_uid is not None:
        owners = " JOIN sessions s ON s.id = m.session_id"
        scope += " AND s.owner_uid = ?"
        args.append(owner_uid)
    many = (
        conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM messages_fts"
            f" JOIN messages m ON m.id = messages_fts.rowid{owners}"
            f" WHERE messages_fts MATCH ?{scope} LIMIT ?)",
            (*args, RANKED_MATCHES + 1),
        ).fetchone()[0]
        > RANKED_MATCHES
    )
    order = "messages_fts.rowid DESC" if many else "rank"
    rows = conn.execute(
        "SELECT m.id, m.session_id, m.role, m.created_at, s.title,"
        " snippet(messages_fts, 0, '«', '»', '…', 12) AS snip"
        " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
        " JOIN sessions s ON s.id = m.session_id"
        f" WHERE messages_fts MATCH ?{scope} ORDER BY {order} LIMIT ?",
        (*args, limit),
    ).fetchall()
    return [
        SearchHit(
            message_id=r["id"],
            session_id=r["session_id"],
            session_title=r["title"],
            role=r["role"],
            snippet=r["snip"],
            created_at=r["created_at"],
        )
        for r in rows
    ]


def index_pending(conn: sqlite3.Connection) -> int:
    """Index every message listed in ``fts_pending`` and unlist it; return how many.

    Each step (indexing a range of listed messages and unlisting it) is atomic: its own
    transaction, or a savepoint in the caller's when one is open (a batch of the store's
    thread). A step that fails leaves the index and the list as they were, and raises.
    Nothing is written when nothing is listed.
    """
    done = 0
    while conn.execute("SELECT 1 FROM fts_pending LIMIT 1").fetchone() is not None:
        own = not conn.in_transaction
        conn.execute("BEGIN IMMEDIATE" if own else "SAVEPOINT fts_step")
        try:
            low, high, count = conn.execute(
                "SELECT min(id), max(id), count(*) FROM"
                " (SELECT id FROM fts_pending ORDER BY id LIMIT ?)",
                (INDEX_STEP,),
            ).fetchone()
            if count:
                conn.execute(
                    "INSERT INTO messages_fts(rowid, content)"
                    " SELECT m.id, coalesce(m.content, '') FROM fts_pending p"
                    " JOIN messages m ON m.id = p.id WHERE p.id BETWEEN ? AND ?"
                    " ORDER BY p.id",
                    (low, high),
                )
                conn.execute("DELETE FROM fts_pending WHERE id BETWEEN ? AND ?", (low, high))
            conn.execute("COMMIT" if own else "RELEASE fts_step")
        except BaseException:
            if conn.in_transaction:  # SQLite may have rolled the whole transaction back
                if own:
                    conn.execute("ROLLBACK")
                else:
                    conn.execute("ROLLBACK TO fts_step")
                    conn.execute("RELEASE fts_step")
            raise
        done += count
    return done


class SearchIndex(Table):
    """``store.search``: the search over a store's messages and when their indexing runs."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._unindexed = 0  # messages written since the last indexing run (DB thread only)

    def written(self, count: int) -> None:
        """Count messages committed; every ``INDEX_EVERY``, index them (on the DB thread, as
        every call here; the write that makes it due waits for it, ~10 ms)."""
        self._unindexed += count
        if self._unindexed >= INDEX_EVERY:
            self._unindexed = 0
            self.index_quietly("in the background")

    @on_db_thread
    def index_pending(self) -> int:
        """Index the messages written since the last run; return how many."""
        return index_pending(self._conn)

    def index_quietly(self, when: str) -> None:
        """`index_pending`, a failure (a full disk) only logged: search catches up later."""
        try:
            self.index_pending()
        except sqlite3.Error as exc:
            log.warning("indexing new messages for search %s failed: %s", when, exc)

    @on_db_thread
    def find(
        self,
        query: str,
        limit: int = 20,
        *,
        session_id: str | None = None,
        owner_uid: int | None = None,
    ) -> list[SearchHit]:
        """Messages matching every word of ``query``, with highlighted snippets (`search`);
        with ``owner_uid``, only in that uid's sessions. Messages not yet indexed are indexed
        first, so every committed message can be found; when that fails (a full disk, say)
        the search runs on what is indexed."""
        if fts_query(query) is None:
            return []
        try:
            index_pending(self._conn)
        except sqlite3.DatabaseError as exc:
            log.warning("searching without the newest messages: indexing them failed: %s", exc)
        with self.db.reading("the search index and the messages it found"):
            return search(self._conn, query, limit, session_id=session_id, owner_uid=owner_uid)
