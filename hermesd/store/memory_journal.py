"""`MemoryJournal`: what the store keeps for memory (``store.memory``).

A session's memory snapshot (the prompt blocks it was started with, ``hermesd.memory``, kept in
its ``sessions`` row so a resumed session is sent the same ones) and the journal of deliveries
to the external memory provider (``memory_deliveries``): a delivery is journaled before it is
made and removed once the provider answered, so one cut short by a crash is made again.
Every method runs on the store's DB thread (`hermesd.store.database.on_db_thread`).
"""

from __future__ import annotations

import time
from typing import Any

from hermesd.store.database import Table, on_db_thread


class MemoryJournal(Table):
    """Memory snapshots of sessions and the memory provider's delivery journal."""

    @on_db_thread
    def snapshot(self, session_id: str) -> str | None:
        """The memory snapshot kept for the session; None when it has none yet."""
        row = self._row("SELECT memory_snapshot FROM sessions WHERE id = ?", (session_id,))
        return None if row is None else row[0]

    @on_db_thread
    def keep_snapshot(self, session_id: str, snapshot: str) -> None:
        """Keep ``snapshot`` as the session's memory snapshot (replacing an older one)."""
        with self.db.tx() as conn:
            conn.execute(
                "UPDATE sessions SET memory_snapshot = ? WHERE id = ?", (snapshot, session_id)
            )

    # -- deliveries to the memory provider (hermesd.memory.providers) -----------------------

    @on_db_thread
    def journal_delivery(self, provider: str, session_id: str, kind: str, payload: str) -> int:
        """Keep a delivery to make; its id (remove it with `delivery_made`)."""
        with self.db.tx() as conn:
            cursor = conn.execute(
                "INSERT INTO memory_deliveries (provider, session_id, kind, payload, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (provider, session_id, kind, payload, time.time()),
            )
        return int(cursor.lastrowid or 0)

    @on_db_thread
    def delivery_made(self, delivery_id: int) -> None:
        """The provider answered this delivery: forget it."""
        with self.db.tx() as conn:
            conn.execute("DELETE FROM memory_deliveries WHERE id = ?", (delivery_id,))

    @on_db_thread
    def delivery_attempted(self, delivery_id: int) -> int:
        """One more attempt at this delivery is about to be made: the attempts so far."""
        with self.db.tx() as conn:
            conn.execute(
                "UPDATE memory_deliveries SET attempts = attempts + 1 WHERE id = ?", (delivery_id,)
            )
            row = conn.execute(
                "SELECT attempts FROM memory_deliveries WHERE id = ?", (delivery_id,)
            ).fetchone()
        return int(row[0]) if row else 0

    @on_db_thread
    def pending_deliveries(self, provider: str) -> list[dict[str, Any]]:
        """Deliveries to ``provider`` not made yet, oldest first."""
        rows = self._conn.execute(
            "SELECT id, session_id, kind, payload, attempts FROM memory_deliveries"
            " WHERE provider = ?"
            " ORDER BY id",
            (provider,),
        ).fetchall()
        return [dict(r) for r in rows]
