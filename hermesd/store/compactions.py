"""Compactions: what a context engine made of a session's older messages, kept as a view.

A compaction never changes or deletes a stored message. It records a *view prefix* (the
OpenAI-shaped messages an engine returned in place of the older ones, e.g. a summary) and
``upto_seq``, the last stored message that prefix stands for. What the model is sent of a
session is then the newest live compaction's prefix followed by the stored messages after
``upto_seq`` (without the turns /undo took out), so ``sessions show``, export and full-text
search keep seeing every original message. An /undo that reaches a message a compaction
replaced retires that compaction (``undone_at``): the view falls back to the one before it.

`CompactionLog` (``store.compactions``) keeps and lists them; the view is built by
``hermesd.store.messages`` with the functions here, over the connection on the store's DB
thread. `split_view` is pure and decides which part of an engine's answer is new text and which
part is stored messages it kept unchanged.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from hermesd.store.database import Database, Table, on_db_thread
from hermesd.store.history import repair_history
from hermesd.store.session_rows import SessionRows

_SEQ = "__hermesd_seq"  # rides along a message through repair_history, then taken off


@dataclass
class View:
    """What the model is sent of a session, each message with the stored seq it is (None: a
    message of a compaction's prefix, or a synthetic tool result)."""

    messages: list[dict[str, Any]]
    seqs: list[int | None]
    upto_seq: int  # the newest live compaction's (0: none)
    compactions: int  # how many live compactions the session has


def latest(conn: sqlite3.Connection, session_id: str) -> tuple[list[dict[str, Any]], int, int]:
    """(prefix, upto_seq, live count) of the session's newest live compaction; ([], 0, 0)."""
    row = conn.execute(
        "SELECT view, upto_seq, (SELECT count(*) FROM compactions WHERE session_id = ?"
        " AND undone_at IS NULL) FROM compactions WHERE session_id = ? AND undone_at IS NULL"
        " ORDER BY id DESC LIMIT 1",
        (session_id, session_id),
    ).fetchone()
    if row is None:
        return [], 0, 0
    prefix = json.loads(row[0])
    return (prefix if isinstance(prefix, list) else []), int(row[1]), int(row[2])


def build_view(
    prefix: list[dict[str, Any]],
    upto_seq: int,
    count: int,
    stored: list[tuple[int, dict[str, Any]]],
) -> View:
    """The prefix then the stored (seq, message) pairs, repaired so every tool call has exactly
    one result."""
    marked = [dict(m) for m in prefix if isinstance(m, dict)]
    marked += [{**m, _SEQ: seq} for seq, m in stored]
    repaired = repair_history(marked)
    seqs: list[int | None] = []
    messages: list[dict[str, Any]] = []
    for msg in repaired:
        seq = msg.pop(_SEQ, None) if _SEQ in msg else None
        seqs.append(seq)
        messages.append(msg)
    return View(messages, seqs, upto_seq, count)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (
        a.get("role") == b.get("role")
        and (a.get("content") or "") == (b.get("content") or "")
        and (a.get("tool_calls") or None) == (b.get("tool_calls") or None)
        and a.get("tool_call_id") == b.get("tool_call_id")
    )


def split_view(
    inputs: list[dict[str, Any]], seqs: list[int | None], output: list[dict[str, Any]], upto: int
) -> tuple[list[dict[str, Any]], int] | None:
    """Which part of an engine's ``output`` (for ``inputs``, whose stored seqs are ``seqs``; the
    older view ended at ``upto``) is a new prefix: ``(prefix, upto_seq)``. The longest run of
    stored messages at the end of ``output`` equal to the end of ``inputs`` stays a reference
    to them; everything before it is the prefix. None when ``output`` kept ``inputs`` as they
    were."""
    kept = 0
    while (
        kept < len(inputs)
        and kept < len(output)
        and seqs[len(inputs) - 1 - kept] is not None
        and _same(inputs[len(inputs) - 1 - kept], output[len(output) - 1 - kept])
    ):
        kept += 1
    if kept == len(inputs) and len(output) == len(inputs):
        return None
    replaced = [s for s in seqs[: len(inputs) - kept] if s is not None]
    upto_seq = max([upto, *replaced])
    return [dict(m) for m in output[: len(output) - kept]], upto_seq


def retire_from(conn: sqlite3.Connection, session_id: str, seq: int) -> int:
    """Retire the live compactions that replaced a message at or after ``seq`` (an /undo)."""
    return conn.execute(
        "UPDATE compactions SET undone_at = ? WHERE session_id = ? AND upto_seq >= ?"
        " AND undone_at IS NULL",
        (time.time(), session_id, seq),
    ).rowcount


class CompactionLog(Table):
    """A store's compactions: keep one, list a session's."""

    def __init__(self, db: Database, sessions: SessionRows) -> None:
        super().__init__(db)
        self.sessions = sessions

    @on_db_thread
    def record(
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
        """Keep a compaction of the session: ``prefix`` stands for its stored messages up to
        ``upto_seq``; its id."""
        self.sessions.get(session_id)
        with self.db.tx() as db:
            cursor = db.execute(
                "INSERT INTO compactions (session_id, upto_seq, view, engine, summary, replaced,"
                " fallback, focus, reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    upto_seq,
                    json.dumps(prefix, ensure_ascii=False),
                    engine,
                    summary,
                    replaced,
                    int(fallback),
                    focus,
                    reason,
                    time.time(),
                ),
            )
        return int(cursor.lastrowid or 0)

    @on_db_thread
    def listing(self, session_id: str) -> list[dict[str, Any]]:
        """The session's compactions, oldest first, without the view text (retired ones
        marked ``undone``)."""
        self.sessions.get(session_id)
        rows = self._conn.execute(
            "SELECT id, upto_seq, engine, summary, replaced, fallback, focus, created_at,"
            " undone_at, reason FROM compactions WHERE session_id = ? ORDER BY id",
            (session_id,),
        ).fetchall()
        return [
            {
                "id": r[0],
                "upto_seq": r[1],
                "engine": r[2],
                "summary": r[3],
                "replaced": r[4],
                "fallback": bool(r[5]),
                "focus": r[6],
                "created_at": r[7],
                "undone": r[8] is not None,
                "reason": r[9],
            }
            for r in rows
        ]
