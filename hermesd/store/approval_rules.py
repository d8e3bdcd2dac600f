"""`ApprovalRules`: the ``approvals`` table of the store (``store.approvals``).

The "always" answers a user gave to an approval prompt, one rule per pattern key, kept until
revoked. What a pattern key means is ``hermesd.approvals``' business. Every method runs on the
store's DB thread (`hermesd.store.database.on_db_thread`).
"""

from __future__ import annotations

import time
from typing import Any

from hermesd.store.database import Table, on_db_thread


class ApprovalRules(Table):
    """Remembered "always" approvals: list, add, revoke."""

    @on_db_thread
    def all(self) -> list[dict[str, Any]]:
        """Remembered "always" approvals, oldest first."""
        rows = self._conn.execute(
            "SELECT pattern_key, decision, decided_by, description, created_at"
            " FROM approvals ORDER BY created_at, pattern_key"
        ).fetchall()
        return [dict(r) for r in rows]

    @on_db_thread
    def add(self, pattern_key: str, decided_by: str, description: str = "") -> dict[str, Any]:
        """Remember ``pattern_key`` as always approved (replacing an older rule for it)."""
        now = time.time()
        with self.db.tx() as conn:
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

    @on_db_thread
    def revoke(self, pattern_key: str) -> bool:
        """Forget the rule for ``pattern_key``; False when there was none."""
        with self.db.tx() as conn:
            return (
                conn.execute("DELETE FROM approvals WHERE pattern_key = ?", (pattern_key,)).rowcount
                > 0
            )
