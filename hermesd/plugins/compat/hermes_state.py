"""hermesd's ``hermes_state``: a read-only view of hermesd's sessions and messages."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from hermesd.plugins import hostapi

#: Where hermesd keeps its sessions (the reference's name for its own database).
DEFAULT_DB_PATH = hostapi.hermes_home() / "state.db"

_SESSION_COLUMNS = (
    "s.id, s.title, s.created_at, s.updated_at, s.model, s.platform, s.parent_id, "
    "s.prompt_tokens, s.completion_tokens, s.message_count"
)


def _session(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "source": row["platform"],
        "model": row["model"],
        "title": row["title"],
        "started_at": row["created_at"],
        "ended_at": None,
        "last_active": row["updated_at"],
        "parent_session_id": row["parent_id"],
        "message_count": row["message_count"],
        "input_tokens": row["prompt_tokens"],
        "output_tokens": row["completion_tokens"],
    }


class SessionDB:
    """Sessions and messages of hermesd's ``state.db``, opened read-only: the writes of the
    reference's class raise ``NotImplementedError``."""

    def __init__(self, db_path: Path | str | None = None, read_only: bool = True) -> None:
        self.db_path = Path(db_path) if db_path is not None else hostapi.hermes_home() / "state.db"
        uri = f"file:{self.db_path}?mode=ro"
        self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """One session, or None."""
        row = self._conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions s WHERE s.id = ?", (session_id,)
        ).fetchone()
        return None if row is None else _session(row)

    def get_session_title(self, session_id: str) -> str | None:
        """A session's title, or None."""
        session = self.get_session(session_id)
        return None if session is None else session["title"]

    def list_sessions_rich(
        self,
        source: str | None = None,
        exclude_sources: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        min_message_count: int = 0,
        **_: Any,
    ) -> list[dict[str, Any]]:
        """Sessions, most recently active first, each with a ``preview`` (first user words)."""
        where: list[str] = ["s.message_count >= ?"]
        params: list[Any] = [min_message_count]
        if source:
            where.append("s.platform = ?")
            params.append(source)
        for excluded in exclude_sources or ():
            where.append("s.platform != ?")
            params.append(excluded)
        rows = self._conn.execute(
            f"SELECT {_SESSION_COLUMNS}, (SELECT content FROM messages m WHERE m.session_id = s.id"
            " AND m.role = 'user' ORDER BY m.seq LIMIT 1) AS first_user FROM sessions s"
            f" WHERE {' AND '.join(where)} ORDER BY s.updated_at DESC LIMIT ? OFFSET ?",
            (*params, limit, offset),
        ).fetchall()
        out = []
        for row in rows:
            session = _session(row)
            session["preview"] = " ".join(str(row["first_user"] or "").split())[:60]
            out.append(session)
        return out

    def get_messages(
        self,
        session_id: str,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """A session's messages in order."""
        rows = self._conn.execute(
            "SELECT id, session_id, role, content, tool_calls, tool_call_id, tool_name, "
            "created_at FROM messages WHERE session_id = ? ORDER BY seq LIMIT ? OFFSET ?",
            (session_id, -1 if limit is None else limit, offset),
        ).fetchall()
        return [
            {
                "id": r["id"],
                "session_id": r["session_id"],
                "role": r["role"],
                "content": r["content"],
                "tool_calls": json.loads(r["tool_calls"]) if r["tool_calls"] else None,
                "tool_call_id": r["tool_call_id"],
                "tool_name": r["tool_name"],
                "timestamp": r["created_at"],
            }
            for r in rows
        ]

    def get_messages_as_conversation(self, session_id: str, **_: Any) -> list[dict[str, Any]]:
        """A session's messages as OpenAI-style ``{role, content, …}`` dicts."""
        conversation = []
        for m in self.get_messages(session_id):
            message: dict[str, Any] = {"role": m["role"], "content": m["content"]}
            if m["tool_calls"]:
                message["tool_calls"] = m["tool_calls"]
            if m["tool_call_id"]:
                message["tool_call_id"] = m["tool_call_id"]
            conversation.append(message)
        return conversation

    def session_count(self, **_: Any) -> int:
        """How many sessions there are."""
        return int(self._conn.execute("SELECT count(*) FROM sessions").fetchone()[0])

    def message_count(self, session_id: str | None = None) -> int:
        """How many messages (of one session, or in all)."""
        if session_id is None:
            return int(self._conn.execute("SELECT count(*) FROM messages").fetchone()[0])
        return int(
            self._conn.execute(
                "SELECT count(*) FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
        )

    def _read_only(self, name: str) -> NotImplementedError:
        return hostapi.not_in_hermesd(
            f"SessionDB.{name}", "plugins get a read-only view of hermesd's sessions"
        )

    def set_session_title(self, session_id: str, title: str) -> bool:
        """Not available: a read-only view (``hermesctl sessions rename`` renames)."""
        raise self._read_only("set_session_title")

    def append_message(self, *args: Any, **kwargs: Any) -> Any:
        """Not available: a read-only view."""
        raise self._read_only("append_message")

    def create_session(self, *args: Any, **kwargs: Any) -> Any:
        """Not available: a read-only view."""
        raise self._read_only("create_session")
