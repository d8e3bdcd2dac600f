"""`MessageLog`: the ``messages`` table of the store (``store.messages``).

Appending a message commits it (and the session's counters, in the same transaction) before
the call returns; /undo marks the last turn's messages undone rather than deleting them.
`history` is what the model is sent of a session: the newest compaction's view followed by the
messages it did not replace (``hermesd.store.compactions``), repaired so every tool call has
exactly one result (``hermesd.store.history``); no stored message is ever dropped. Written
messages are counted toward the next search-indexing run (``hermesd.store.search``). Every
method runs on the store's DB thread (`hermesd.store.database.on_db_thread`).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from typing import Any, TypedDict

from hermesd.store import compactions, images
from hermesd.store.compactions import View
from hermesd.store.database import Database, Table, on_db_thread
from hermesd.store.dbfile import SessionNotFound
from hermesd.store.history import INTERRUPTED_RESULT, to_openai
from hermesd.store.search import SearchIndex
from hermesd.store.session_rows import SessionRows

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant", "tool")
_TITLE_CHARS = 60
#: What is kept of one message by default (``sessions.max_message_bytes``): a 50 MB model
#: answer would otherwise make every read of its session too large to send.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: What one ``session.history`` answer holds at most: under the RPC frame limit (8 MiB).
HISTORY_BYTES = 6 * 1024 * 1024
TRUNCATED = "\n\n[hermesd: this message was truncated to {kept} of its {size} bytes]"


def cap_text(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8 (on a character boundary) with a suffix
    saying so; unchanged when it fits."""
    if len(text) <= max_bytes // 4:  # cannot be over: no encoding needed
        return text
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return text
    suffix = TRUNCATED.format(kept=max_bytes, size=len(raw))
    kept = raw[: max(0, max_bytes - len(suffix))].decode("utf-8", "ignore")
    return kept + suffix


def _size(record: MessageRecord) -> int:
    """About what a record weighs in an RPC answer."""
    calls = json.dumps(record["tool_calls"]) if record["tool_calls"] else ""
    pictures = sum(len(i["url"]) for i in record["images"])
    return (
        len((record["content"] or "").encode("utf-8", "surrogatepass"))
        + len(calls)
        + pictures
        + 200
    )


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
    images: list[dict[str, Any]]  # attached images: {mime, bytes, url} (hermesd.store.images)


def _derive_title(content: str) -> str | None:
    line = " ".join(content.split())
    if not line:
        return None
    return line if len(line) <= _TITLE_CHARS else line[: _TITLE_CHARS - 1].rstrip() + "…"


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
        images=[],
    )


class MessageLog(Table):
    """A store's messages: append, read, undo, and what the model is sent of a session."""

    def __init__(self, db: Database, sessions: SessionRows, index: SearchIndex) -> None:
        super().__init__(db)
        self.sessions = sessions
        self.index = index
        self.max_bytes = MAX_MESSAGE_BYTES  # sessions.max_message_bytes (set by the daemon)

    def _capped(self, session_id: str, role: str, content: str) -> str:
        """``content`` within ``sessions.max_message_bytes``, marked when it was cut."""
        capped = cap_text(content, self.max_bytes)
        if capped is not content:
            log.warning(
                "session %s: a %s message of %d characters was truncated to "
                "sessions.max_message_bytes (%d)",
                session_id,
                role,
                len(content),
                self.max_bytes,
            )
        return capped

    @on_db_thread
    def append(
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
        attached: list[images.Image] | None = None,
    ) -> MessageRecord:
        """Append one message and commit it before returning; ``usage`` (prompt, completion,
        total tokens of the completion that produced it; total None: their sum) is added to
        the session's counters in the same transaction, ``attached`` images (checked by
        `hermesd.store.images.read_images`) are kept with it."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        if role == "tool" and not tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        if tool_calls is not None and (role != "assistant" or not isinstance(tool_calls, list)):
            raise ValueError("tool_calls must be a list on an assistant message")
        if content is not None:
            content = self._capped(session_id, role, content)
        now = time.time()
        title = _derive_title(content) if role == "user" and content else None
        prompt, completion, total = usage or (0, 0, 0)
        total = prompt + completion if total is None else total
        with self.db.tx() as db:
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
            if attached:
                images.save(db, int(message_id or 0), attached)
        self.index.written(1)
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
            images=[i.public() for i in attached or ()],
        )

    @on_db_thread
    def read(
        self,
        session_id: str,
        *,
        limit: int | None = None,
        after_seq: int = 0,
        include_undone: bool = True,
    ) -> list[MessageRecord]:
        """Stored messages in order (the newest ``limit`` when given), for display and export;
        without ``include_undone``, only those still in the conversation."""
        self.sessions.get(session_id)
        with self.db.reading(f"session {session_id}"):
            return self._read(session_id, limit, after_seq, include_undone)

    def _read(
        self, session_id: str, limit: int | None, after_seq: int, include_undone: bool
    ) -> list[MessageRecord]:
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
        records = [_message(r) for r in rows]
        users = [r["id"] for r in records if r["role"] == "user"]  # only people attach images
        found = images.load(self._conn, users) if users else {}
        for record in records:
            if record["id"] in found:
                record["images"] = [i.public() for i in found[record["id"]]]
        return records

    @on_db_thread
    def page(
        self,
        session_id: str,
        *,
        limit: int | None = None,
        after_seq: int = 0,
        max_bytes: int = HISTORY_BYTES,
    ) -> tuple[list[MessageRecord], bool]:
        """`read`, bounded to about ``max_bytes``: the oldest messages first without ``limit``
        (ask again after the last seq), the newest with it; True when some were left out. One
        message larger than the bound alone is sent cut to it (marked)."""
        records = self.read(session_id, limit=limit, after_seq=after_seq)
        ordered = records if limit is None else records[::-1]
        kept: list[MessageRecord] = []
        total = 0
        for record in ordered:
            size = _size(record)
            if kept and total + size > max_bytes:
                break
            if not kept and size > max_bytes and record["content"]:
                room = max_bytes - 1024 - sum(len(i["url"]) for i in record["images"])
                record["content"] = cap_text(record["content"], max(4096, room))
            kept.append(record)
            total += size
        more = len(kept) < len(records)
        return (kept if limit is None else kept[::-1]), more

    @on_db_thread
    def undo_last_turn(self, session_id: str) -> list[MessageRecord]:
        """Take the last turn still in the conversation (its user message and everything after
        it) out of what the model is sent; the messages stay stored, marked undone. Returns
        them, the user message first; empty when there is nothing to undo."""
        self.sessions.get(session_id)
        last_user = self._row(
            "SELECT seq FROM messages WHERE session_id = ? AND role = 'user'"
            " AND undone_at IS NULL ORDER BY seq DESC LIMIT 1",
            (session_id,),
        )
        if last_user is None:
            return []
        with self.db.tx() as db:
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
        found = images.load(self._conn, [undone[0]["id"]]) if undone else {}
        for record in undone:
            record["undone"] = True
            record["images"] = [i.public() for i in found.get(record["id"], ())]
        return undone

    @on_db_thread
    def history(self, session_id: str) -> list[dict[str, Any]]:
        """What the model is sent of this session: the newest compaction's view, then the
        stored messages after it (without the turns /undo took out), OpenAI-shaped."""
        return self.view(session_id).messages

    @on_db_thread
    def view(self, session_id: str) -> View:
        """`history` with the stored seq of each message (what a context engine compacts)."""
        with self.db.reading(f"session {session_id}"):
            prefix, upto, count = compactions.latest(self._conn, session_id)
        records = self.read(session_id, after_seq=upto, include_undone=False)
        return compactions.build_view(
            prefix, upto, count, [(r["seq"], to_openai(r)) for r in records]
        )

    @on_db_thread
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
            self.append(
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
