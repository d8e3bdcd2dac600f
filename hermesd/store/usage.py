"""`UsageLedger`: what every model request used and cost, in the session store's file.

Owns the SQL of the ``usage`` table: one row per model request (its session and turn, the
model asked for, tokens by bucket, the cost in US dollars or NULL when the model has no
price) and the sums the reports and budgets read. A row is written in the transaction that
commits the message the request produced, so the session's counters and its rows agree.
Pricing is not this module's business: `UsageLedger.record` is handed a ``price`` function (the
agent layer passes `hermesd.model.pricing.Pricer`'s), which it calls on the DB thread, beside
the write. ``store.usage``; every method runs on the store's DB thread
(`hermesd.store.database.on_db_thread`: from the event loop, hand it to ``store.run``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hermesd.store.database import Table, on_db_thread

TOKEN_BUCKETS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


@dataclass(frozen=True)
class RequestUsage:
    """One model request's usage. ``input_tokens`` are the prompt tokens neither read from
    nor written to a cache; ``reasoning_tokens`` are part of ``output_tokens``; ``reported``
    is False when the response said nothing of its usage (all counts 0)."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    reported: bool = True
    response_model: str | None = None

    @classmethod
    def from_buckets(
        cls, model: str, buckets: Mapping[str, int] | None, response_model: str | None = None
    ) -> RequestUsage:
        """From ``canonical_usage``'s buckets (None: the response carried no usage)."""
        if not buckets:
            return cls(model, reported=False, response_model=response_model)
        count = {k: int(buckets.get(k) or 0) for k in TOKEN_BUCKETS}
        return cls(
            model,
            input_tokens=count["input_tokens"],
            output_tokens=count["output_tokens"],
            cache_read_tokens=count["cache_read_tokens"],
            cache_write_tokens=count["cache_write_tokens"],
            reasoning_tokens=count["reasoning_tokens"],
            response_model=response_model,
        )

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def counters(self) -> tuple[int, int, int]:
        """(prompt, completion, total) for the session's counters (``append_message``)."""
        return (
            self.prompt_tokens,
            self.output_tokens,
            self.prompt_tokens + self.output_tokens,
        )


Price = Callable[[RequestUsage], "float | None"]

_SUMS = (
    "coalesce(sum(request_count), 0) AS requests,"
    + ",".join(f" coalesce(sum({k}), 0) AS {k}" for k in TOKEN_BUCKETS)
    + ", sum(cost_usd) AS cost_usd,"
    " coalesce(sum(CASE WHEN cost_usd IS NULL THEN request_count END), 0) AS unpriced_requests,"
    " coalesce(sum(CASE WHEN reported = 0 THEN request_count END), 0) AS unreported_requests"
)


def _totals(row: sqlite3.Row) -> dict[str, Any]:
    out: dict[str, Any] = {k: int(row[k]) for k in ("requests", *TOKEN_BUCKETS)}
    out["total_tokens"] = (
        out["input_tokens"]
        + out["cache_read_tokens"]
        + out["cache_write_tokens"]
        + out["output_tokens"]
    )
    # the sum of the costs known; ``unpriced_requests`` says how many are not in it
    out["cost_usd"] = None if row["cost_usd"] is None else float(row["cost_usd"])
    out["unpriced_requests"] = int(row["unpriced_requests"])
    out["unreported_requests"] = int(row["unreported_requests"])
    return out


class UsageLedger(Table):
    """The usage rows of one store, and the sums over them."""

    @on_db_thread
    def record(
        self,
        session_id: str | None,
        turn_id: str | None,
        usage: RequestUsage,
        price: Price | None = None,
    ) -> float | None:
        """Store one request's usage, priced by ``price``; its cost (None: unknown). A pricing
        failure leaves the cost unknown: the request is recorded all the same."""
        cost: float | None = None
        if usage.reported and price is not None:
            cost = price(usage)
        with self.db.tx() as db:
            db.execute(
                "INSERT INTO usage (session_id, turn_id, model, input_tokens, output_tokens,"
                " cache_read_tokens, cache_write_tokens, reasoning_tokens, reported, cost_usd,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id or None,
                    turn_id,
                    usage.model,
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cache_read_tokens,
                    usage.cache_write_tokens,
                    usage.reasoning_tokens,
                    int(usage.reported),
                    cost,
                    time.time(),
                ),
            )
        return cost

    # -- reports ----------------------------------------------------------------------------

    @staticmethod
    def _where(
        since: float | None, until: float | None, session_id: str | None, owner_uid: int | None
    ) -> tuple[str, list[Any]]:
        conditions: list[str] = []
        args: list[Any] = []
        if since is not None:
            conditions.append("created_at >= ?")
            args.append(since)
        if until is not None:
            conditions.append("created_at < ?")
            args.append(until)
        if session_id is not None:
            conditions.append("session_id = ?")
            args.append(session_id)
        if owner_uid is not None:  # a peer that is not the owner sees its own sessions' only
            conditions.append("session_id IN (SELECT id FROM sessions WHERE owner_uid = ?)")
            args.append(owner_uid)
        return (" WHERE " + " AND ".join(conditions)) if conditions else "", args

    @on_db_thread
    def totals(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        session_id: str | None = None,
        owner_uid: int | None = None,
    ) -> dict[str, Any]:
        """Sums over the requests in the window: ``requests``, each token bucket,
        ``total_tokens``, ``cost_usd`` (of the priced ones; None when none is),
        ``unpriced_requests``, ``unreported_requests``."""
        where, args = self._where(since, until, session_id, owner_uid)
        row = self._conn.execute(f"SELECT {_SUMS} FROM usage{where}", args).fetchone()
        return _totals(row)

    @on_db_thread
    def grouped(
        self,
        by: str,
        *,
        since: float | None = None,
        until: float | None = None,
        session_id: str | None = None,
        owner_uid: int | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """`totals` per ``model`` or per ``session_id``, the costliest (then the most
        tokens) first; at most ``limit`` groups."""
        if by not in ("model", "session_id"):
            raise ValueError(f"usage can be grouped by model or session_id, not {by!r}")
        where, args = self._where(since, until, session_id, owner_uid)
        rows = self._conn.execute(
            f"SELECT {by} AS key, {_SUMS} FROM usage{where} GROUP BY {by}"
            " ORDER BY coalesce(sum(cost_usd), 0) DESC,"
            " sum(input_tokens + cache_read_tokens + cache_write_tokens + output_tokens) DESC"
            " LIMIT ?",
            (*args, max(1, limit)),
        ).fetchall()
        return [{by: row["key"], **_totals(row)} for row in rows]

    @on_db_thread
    def spent_since(self, since: float) -> float:
        """US dollars of the priced requests since ``since`` (Unix seconds)."""
        row = self._conn.execute(
            "SELECT coalesce(sum(cost_usd), 0) FROM usage WHERE created_at >= ?", (since,)
        ).fetchone()
        return float(row[0])
