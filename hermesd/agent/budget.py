"""`UsageMeter`: every model request's usage recorded and priced, and ``budget.*`` enforced.

Owns the daemon's side of "what did it cost": the ledger (`hermesd.store.usage`) priced by
`hermesd.model.pricing`, and the budgets every model call passes through —
``budget.session_tokens`` (the session's prompt + completion tokens), ``budget.daily_usd`` and
``budget.monthly_usd`` (every request of the day or month, in the daemon's local time, deleted
sessions included) with ``budget.action``: ``warn`` or ``stop``.

Rules: a crossing is announced once (a ``budget.warning`` event: a session's to its attached
clients, the day's and the month's to every attached client) per budget, session or period,
and limit — per daemon run. With ``stop`` the check before each model request raises
`BudgetExceeded` (the turn ends before the request, with a sentence naming the budget and how to
raise it) and ``session.send`` refuses new turns. A USD budget cannot be enforced for a model
without a price: that is announced once per model instead of passing silently. Without any
budget configured nothing here costs a turn anything but the usage row.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from hermesd.model.pricing import Pricer, Tokens, configured_prices
from hermesd.store.dbfile import SessionNotFound
from hermesd.store.facade import SessionStore
from hermesd.store.usage import RequestUsage

log = logging.getLogger(__name__)

BUDGETS = ("session_tokens", "daily_usd", "monthly_usd")
ACTIONS = ("warn", "stop")

Emit = Callable[..., None]  # emit(kind, **fields): the turn's events
# broadcast(event, skip): an event to every attached client, but through session ``skip``
Broadcast = Callable[[dict[str, Any], str], None]


@dataclass(frozen=True)
class BudgetSettings:
    """``budget.*``: None is no limit."""

    session_tokens: int | None = None
    daily_usd: float | None = None
    monthly_usd: float | None = None
    action: str = "warn"

    @classmethod
    def from_config(cls, config: Any) -> BudgetSettings:
        def limit(key: str) -> Any:
            value = config.get(f"budget.{key}")
            return None if isinstance(value, bool) or not value else value

        tokens, daily, monthly = limit("session_tokens"), limit("daily_usd"), limit("monthly_usd")
        return cls(
            session_tokens=None if tokens is None else int(tokens),
            daily_usd=None if daily is None else float(daily),
            monthly_usd=None if monthly is None else float(monthly),
            action="stop" if config.get("budget.action") == "stop" else "warn",
        )

    @property
    def active(self) -> bool:
        return any(getattr(self, key) is not None for key in BUDGETS)

    @property
    def in_usd(self) -> bool:
        return self.daily_usd is not None or self.monthly_usd is not None


class BudgetExceeded(Exception):
    """A budget with ``action: stop`` is used up; the message is for a person."""

    def __init__(self, budget: str, limit: float, used: float, message: str) -> None:
        super().__init__(message)
        self.budget, self.limit, self.used = budget, limit, used

    def data(self) -> dict[str, Any]:
        return {"budget": self.budget, "limit": self.limit, "used": self.used}


def period_starts(now: float | None = None) -> tuple[float, float]:
    """(start of today, start of this month) in local time, as Unix seconds."""
    t = time.localtime(now)
    day = time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, -1))
    month = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    return day, month


@dataclass(frozen=True)
class _Crossing:
    budget: str
    limit: float
    used: float
    period: str  # the session id, the day or the month it counts in
    whose: str = "This session"  # or the delegating session whose budget it is

    def sentence(self, action: str) -> str:
        if self.budget == "session_tokens":
            what = (
                f"{self.whose} has used {int(self.used):,} tokens, over "
                f"budget.session_tokens ({int(self.limit):,})"
            )
            after = "start a new session (/new)"
        else:
            span = "Today's" if self.budget == "daily_usd" else "This month's"
            what = (
                f"{span} model spending is ${self.used:.4f}, over budget.{self.budget} "
                f"(${self.limit:g})"
            )
            after = "wait for the next " + ("day" if self.budget == "daily_usd" else "month")
        if action == "stop":
            return (
                f"{what}: new model requests are refused. To go on, {after} or raise it: "
                f"hermesctl config set budget.{self.budget} N (or budget.action warn)."
            )
        return f"{what}; turns go on (budget.action is warn)."


class UsageMeter:
    """Records and prices each request's usage; checks the budgets before each request."""

    def __init__(
        self,
        store: SessionStore,
        pricer: Pricer | None = None,
        settings: BudgetSettings | None = None,
        broadcast: Broadcast | None = None,
    ) -> None:
        self.store = store
        self.pricer = pricer or Pricer()
        self.settings = settings or BudgetSettings()
        self.broadcast = broadcast  # the day's and month's warnings go to every client
        self.ledger = store.usage
        self._announced: set[tuple[Any, ...]] = set()
        #: the live sessions that delegated to a session, nearest first (issue 34: a child's
        #: tokens count in its ancestors' counters as they are spent, and their budgets stop it)
        self.lineage: Callable[[str], list[str]] = lambda session_id: []

    def reload(self, config: Any) -> None:
        """``budget.*`` and ``pricing`` from the configuration (turns from now on)."""
        self.settings = BudgetSettings.from_config(config)
        self.pricer.prices = configured_prices(config.get("pricing"))

    def _price(self, usage: RequestUsage) -> float | None:
        models: tuple[str, ...] = (usage.model,)
        if usage.response_model and usage.response_model != usage.model:
            models += (usage.response_model,)
        tokens = Tokens(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        )
        return self.pricer.cost(models, tokens)

    def record(
        self, session_id: str | None, turn_id: str | None, usage: RequestUsage
    ) -> float | None:
        """Store and price one request's usage (on the DB thread); its cost."""
        return self.ledger.record(session_id, turn_id, usage, self._price)

    # -- budgets ------------------------------------------------------------------------------

    def _used(self, chain: list[str], model: str | None) -> dict[str, Any]:
        """What the budgets compare for the session ``chain[0]`` (on the DB thread: the sums,
        and a first pricing of a model, which may import the price table, stay off the event
        loop). ``budget.session_tokens`` holds for the session and every session above it."""
        s = self.settings
        day, month = period_starts()
        used: dict[str, Any] = {"day": day, "month": month}
        if s.session_tokens is not None:
            for sid in chain:
                with contextlib.suppress(SessionNotFound):  # deleted meanwhile: no budget
                    total = self.store.sessions.get(sid)["total_tokens"]
                    if total > used.get("session_tokens", -1):
                        used["session_tokens"], used["session_of"] = total, sid
        if s.daily_usd is not None:
            used["daily_usd"] = self.ledger.spent_since(day)
        if s.monthly_usd is not None:
            used["monthly_usd"] = self.ledger.spent_since(month)
        if model is not None and s.in_usd:
            used["priced"] = self.pricer.priced(model)
        return used

    def _crossings(self, session_id: str, used: dict[str, Any]) -> list[_Crossing]:
        s = self.settings
        periods = {
            "session_tokens": used.get("session_of", session_id),
            "daily_usd": time.strftime("%Y-%m-%d", time.localtime(used["day"])),
            "monthly_usd": time.strftime("%Y-%m", time.localtime(used["month"])),
        }
        found = []
        for budget in BUDGETS:
            limit = getattr(s, budget)
            if limit is not None and budget in used and used[budget] >= limit:
                crossing = _Crossing(budget, limit, used[budget], periods[budget])
                if budget == "session_tokens" and periods[budget] != session_id:
                    whose = f"Session {periods[budget]}, which delegated this one,"
                    crossing = replace(crossing, whose=whose)
                found.append(crossing)
        return found

    def _chain(self, session_id: str) -> list[str]:
        """``session_id`` and the sessions above it (read on the loop, where they change)."""
        return [session_id, *self.lineage(session_id)] if session_id else []

    async def check(
        self, session_id: str, model: str, emit: Emit | None, *, stop: bool = True
    ) -> None:
        """Announce budgets crossed (once each); with ``stop`` and ``budget.action: stop``,
        raise `BudgetExceeded` for the first one crossed. Before a model request."""
        settings = self.settings
        if not settings.active:
            return
        used = await self.store.run(self._used, self._chain(session_id), model)
        crossings = self._crossings(session_id, used)
        for crossing in crossings:
            key = (crossing.budget, crossing.period, crossing.limit)
            if key not in self._announced:
                self._announced.add(key)
                self._announce(
                    emit,
                    session_id if crossing.budget != "session_tokens" else None,
                    reason="crossed",
                    budget=crossing.budget,
                    limit=crossing.limit,
                    used=crossing.used,
                    action=settings.action,
                    message=crossing.sentence(settings.action),
                )
        if used.get("priced") is False and ("unpriced", model) not in self._announced:
            self._announced.add(("unpriced", model))
            budgets = [b for b in ("daily_usd", "monthly_usd") if getattr(settings, b) is not None]
            names = " and ".join(f"budget.{b}" for b in budgets)
            self._announce(
                emit,
                None,
                reason="unpriced",
                budget=budgets[0],
                model=model,
                action=settings.action,
                message=(
                    f"{names} cannot be enforced for model {model!r}: it has no known price, "
                    f"so its requests count as unknown cost. Set pricing.{model}.input_per_mtok "
                    "and output_per_mtok in config.yaml to price it (0 for a free local model)."
                ),
            )
        if stop and settings.action == "stop" and crossings:
            first = crossings[0]
            raise BudgetExceeded(first.budget, first.limit, first.used, first.sentence("stop"))

    async def refusal(self, session_id: str) -> BudgetExceeded | None:
        """Why a new turn of ``session_id`` may not start (``budget.action: stop``), or None."""
        if not self.settings.active or self.settings.action != "stop":
            return None
        used = await self.store.run(self._used, self._chain(session_id), None)
        crossings = self._crossings(session_id, used)
        if not crossings:
            return None
        first = crossings[0]
        return BudgetExceeded(first.budget, first.limit, first.used, first.sentence("stop"))

    def _announce(self, emit: Emit | None, everyone: str | None, **fields: Any) -> None:
        """Send a warning to the turn's clients (``emit``); with ``everyone`` (the turn's
        session id) to every other attached client too."""
        log.warning("budget: %s", fields["message"])
        if emit is not None:
            emit("budget.warning", **fields)
        if everyone is not None and self.broadcast is not None:
            try:
                self.broadcast({"type": "budget.warning", "turn_id": None, **fields}, everyone)
            except Exception:  # a warning that cannot be sent must not stop the turn
                log.exception("could not send a budget warning")
