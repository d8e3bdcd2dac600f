"""The journal of deliveries to the memory provider: made once, even across a kill.

A completed turn's ``sync_turn`` and each ``on_memory_write`` is written to state.db (table
``memory_deliveries``) before it is handed to the provider and removed once the provider
answered (returned or raised). One still running when the daemon died, or that overran its
deadline, stays and is made again at the next start (`DeliveryJournal.replay`, oldest first).
Each row counts its attempts: one the provider never answers is given up after
`MAX_ATTEMPTS` with a log line, instead of being repeated at every start. Provider calls are
`hermesd.memory.provider_calls`; which instance a session's delivery goes to is the caller's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from hermesd.store.facade import SessionStore

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # the first delivery and two more starts


class DeliveryJournal:
    """Deliveries kept in state.db until the provider answered them."""

    def __init__(self, store: SessionStore | None) -> None:
        """``store`` None: nothing is journalled (every delivery is made once, in memory)."""
        self.store = store

    async def keep(self, provider: str, session_id: str, kind: str, payload: dict[str, Any]) -> int:
        """Journal a delivery before it is made; its id (0: not kept)."""
        if self.store is None:
            return 0
        try:
            text = json.dumps(payload, default=str)
            store = self.store
            return await store.run(store.memory.journal_delivery, provider, session_id, kind, text)
        except Exception:
            log.exception("could not journal a %s delivery to memory provider '%s'", kind, provider)
            return 0

    async def made(self, delivery: int) -> None:
        """The provider answered: forget the delivery."""
        if not delivery or self.store is None:
            return
        try:
            await self.store.run(self.store.memory.delivery_made, delivery)
        except Exception:
            log.exception("could not mark memory provider delivery %d made", delivery)

    async def replay(
        self,
        provider: str,
        deliver: Callable[[str, str, dict[str, Any], int], Awaitable[bool]],
    ) -> None:
        """Make again, oldest first, what a previous run left; ``deliver(session_id, kind,
        payload, id)`` answers False when the provider cannot be reached now (the rest is
        kept for a later start)."""
        if self.store is None:
            return
        store = self.store
        try:
            pending = await store.run(store.memory.pending_deliveries, provider)
        except Exception:
            log.exception("could not read the memory provider journal")
            return
        if pending:
            log.info(
                "Memory provider '%s': delivering %d call(s) journalled before the restart",
                provider,
                len(pending),
            )
        for row in pending:
            delivery = int(row["id"])
            if int(row.get("attempts") or 1) >= MAX_ATTEMPTS:
                log.warning(
                    "Memory provider '%s': %s delivery %d for session %s was not answered in "
                    "%d attempts; given up",
                    provider,
                    row["kind"],
                    delivery,
                    row["session_id"],
                    int(row.get("attempts") or 1),
                )
                await self.made(delivery)
                continue
            try:
                payload = json.loads(row["payload"])
            except ValueError:
                log.warning("Memory provider delivery %d is not readable; dropped", delivery)
                await self.made(delivery)
                continue
            try:  # counted before it is made: a kill during it counts too
                await store.run(store.memory.delivery_attempted, delivery)
            except Exception:
                log.exception("could not count an attempt of memory delivery %d", delivery)
            if not await deliver(row["session_id"], row["kind"], payload, delivery):
                return
