"""Finding text in state.db that is not valid UTF-8, by session (what ``doctor`` reports).

``PRAGMA quick_check`` checks the file's structure, not what a cell holds: a page whose bytes
were garbled but whose pointers are intact passes it, and the first read of such a cell fails
to decode. `sessions_with_bad_text` reads the raw bytes of every text cell of the session
tables (a SQL function decodes each one; no row is turned into Python text) and names the
sessions that hold one. Runs on the DB thread.
"""

from __future__ import annotations

import sqlite3

#: The session tables and their text columns; the first column names the session.
SESSION_TEXT = {
    "sessions": ("id", "title", "model", "platform", "parent_id"),
    "messages": (
        "session_id",
        "turn_id",
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "tool_name",
    ),
    "compactions": ("session_id", "view", "engine", "summary", "focus", "reason"),
    "todos": ("session_id", "items"),
}
FUNCTION = "hermesd_bad_utf8"


def _bad_utf8(raw: bytes | None) -> bool:
    if raw is None:
        return False
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def sessions_with_bad_text(conn: sqlite3.Connection, limit: int = 20) -> dict[str, list[str]]:
    """Up to ``limit`` session ids whose rows hold text that is not valid UTF-8, each with the
    tables where it was found. An id that is itself damaged is shown with replacement marks."""
    conn.create_function(FUNCTION, 1, _bad_utf8, deterministic=True)
    present = {
        str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    found: dict[str, list[str]] = {}
    for table, columns in SESSION_TEXT.items():
        if table not in present:
            continue
        # CAST(... AS BLOB) hands the function the stored bytes, undecoded
        test = " OR ".join(
            f"(typeof({c}) = 'text' AND {FUNCTION}(CAST({c} AS BLOB)))" for c in columns
        )
        rows = conn.execute(
            f"SELECT DISTINCT CAST({columns[0]} AS BLOB) FROM {table} WHERE {test} LIMIT ?",
            (limit,),
        )
        for (raw,) in rows:
            sid = bytes(raw or b"").decode("utf-8", "replace")
            tables = found.setdefault(sid, [])
            if table not in tables:
                tables.append(table)
            if len(found) >= limit:
                return found
    return found
