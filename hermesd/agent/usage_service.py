"""``usage.get``: what model requests used and cost, over RPC (``/usage``, ``hermesctl usage``).

Reads the ledger of `hermesd.agent.budget.UsageMeter` (the ``usage`` table) and answers one
report: a window's totals (``since``/``until``, one session or all), the same by model and by
session, today's and this month's totals (the daemon's local time), and the budgets. A peer
that is not the daemon's owner sees only its own sessions' requests. Also the service that
applies ``budget.*`` and ``pricing`` on reload and imports the price table off the event loop
after start.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from hermesd.agent.budget import BUDGETS, UsageMeter, period_starts
from hermesd.agent.session_service import SessionService
from hermesd.rpc.connection import Call, Router
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.rpc.service import RpcService

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 20


class UsageService(RpcService):
    """The ``usage.*`` methods, and ``budget.*``/``pricing`` reloads."""

    def __init__(self, meter: UsageMeter, sessions: SessionService) -> None:
        self.meter = meter
        self.sessions = sessions
        self._warm_up: asyncio.Task[None] | None = None

    def bind(self, router: Router) -> None:
        router.bind("usage.get", self.rpc_get)

    async def start(self) -> None:
        # the first request priced would otherwise import the table on the store's thread
        if self.sessions.agent.client.settings.base_url:
            self._warm_up = asyncio.get_running_loop().create_task(self._warm())

    async def _warm(self) -> None:
        try:
            await asyncio.to_thread(self.meter.pricer.warm_up)
        except Exception:  # pricing then reports its own failure, request by request
            log.warning("could not load the price table", exc_info=True)

    def reload(self, cfg: Any) -> None:
        """``budget.*`` and ``pricing`` apply to the requests made from now on."""
        self.meter.reload(cfg)

    async def rpc_get(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        sid: str | None = p.get("session_id") or None  # the caller's: Access.SESSION
        since, until = p.get("since"), p.get("until")
        limit = p.get("limit") or DEFAULT_LIMIT
        if not 1 <= limit <= 1000:
            raise RpcError(Codes.INVALID_PARAMS, "usage.get: limit must be 1 to 1000")
        owner = call.caller.scope_uid
        ledger, store = self.meter.ledger, self.meter.store
        day, month = period_starts()

        def report() -> dict[str, Any]:
            window: dict[str, Any] = {
                "since": since,
                "until": until,
                "session_id": sid,
                "owner_uid": owner,
            }
            out: dict[str, Any] = {
                "since": since,
                "until": until,
                "session_id": sid,
                "totals": ledger.totals(**window),
                "by_model": ledger.grouped("model", **window, limit=limit),
                "by_session": [] if sid else ledger.grouped("session_id", **window, limit=limit),
                "today": ledger.totals(since=day, owner_uid=owner),
                "month": ledger.totals(since=month, owner_uid=owner),
                "today_start": day,
                "month_start": month,
            }
            if sid:
                out["session"] = store.sessions.get(sid)
            _add_titles(store.connection(), out["by_session"])
            return out

        result: dict[str, Any] = await self.sessions._db(report)
        settings = self.meter.settings
        result["budget"] = {
            **{key: getattr(settings, key) for key in BUDGETS},
            "action": settings.action,
        }
        return result


def _add_titles(db: Any, groups: list[dict[str, Any]]) -> None:
    """Each session group's ``title`` (None for a session deleted since, or no session)."""
    ids = [g["session_id"] for g in groups if g["session_id"]]
    titles: dict[str, Any] = {}
    if ids:
        marks = ",".join("?" * len(ids))
        rows = db.execute(f"SELECT id, title FROM sessions WHERE id IN ({marks})", ids)
        titles = {row[0]: row[1] for row in rows}
    for group in groups:
        group["title"] = titles.get(group["session_id"])
        group["deleted"] = bool(group["session_id"]) and group["session_id"] not in titles
