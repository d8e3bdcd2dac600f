"""`TodoLists`: the ``todos`` table of the store (``store.todos``).

One row per session holding its task list (the ``todo`` tool's, `hermesd.tools.todo`) as a JSON
list of ``{id, content, status}``, in order. The row goes with its session (``ON DELETE
CASCADE``) and a fork starts with a copy of it (a trigger on the new session's row, migration
``_TODOS``). What an item may hold is the tool's business. Every method runs on the store's DB
thread (`hermesd.store.database.on_db_thread`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from hermesd.store.database import Table, on_db_thread

Items = list[dict[str, Any]]


class TodoLists(Table):
    """Each session's task list: read it, change it in one transaction."""

    @on_db_thread
    def get(self, session_id: str) -> Items:
        """The session's list, in order; empty when it has none."""
        row = self._row("SELECT items FROM todos WHERE session_id = ?", (session_id,))
        if row is None:
            return []
        items: Items = json.loads(row["items"])
        return items

    @on_db_thread
    def change(self, session_id: str, fn: Callable[[Items], Items]) -> tuple[Items, Items]:
        """Replace the list with ``fn(list)`` in one transaction: (before, after). When ``fn``
        raises, nothing is written and the exception propagates."""
        with self.db.tx() as conn:
            before = self.get(session_id)
            after = fn([dict(item) for item in before])
            if after != before:
                conn.execute(
                    "INSERT INTO todos (session_id, items, updated_at) VALUES (?, ?, ?)"
                    " ON CONFLICT (session_id) DO UPDATE"
                    " SET items = excluded.items, updated_at = excluded.updated_at",
                    (session_id, json.dumps(after, ensure_ascii=False), time.time()),
                )
        return before, after
