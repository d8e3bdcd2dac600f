"""What a model request cost, in US dollars, priced offline.

Owns the price of one request's tokens: a price set in config.yaml (``pricing.<model>``, per
million tokens; how a local or private endpoint gets a price, including 0) wins, else the
table the ``genai-prices`` package ships (no network: it is read from the installed package,
never updated at run time), else the cost is unknown — ``None``, never 0, so a sum over
unpriced requests cannot pass for free. It knows nothing of sessions, storage or budgets.

The table is imported on first use (~0.2 s of CPU): `warm_up` does it off the event loop at
start; callers price on the store's thread, beside the write the cost belongs to.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

MTOK = 1_000_000
# config keys of one pricing.<model> entry → the token bucket each prices
PRICE_KEYS = ("input_per_mtok", "output_per_mtok", "cache_read_per_mtok", "cache_write_per_mtok")


@dataclass(frozen=True)
class Tokens:
    """One request's token counts: ``input_tokens`` are the prompt tokens neither read from
    nor written to a cache; reasoning tokens are part of ``output_tokens``."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class Price:
    """A configured price per million tokens; cache reads and writes default to input's."""

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    def cost(self, t: Tokens) -> float:
        read = self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        write = (
            self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        )
        return (
            t.input_tokens * self.input_per_mtok
            + t.output_tokens * self.output_per_mtok
            + t.cache_read_tokens * read
            + t.cache_write_tokens * write
        ) / MTOK


def price_problem(value: Any) -> str | None:
    """Why ``value`` is not a valid ``pricing`` section (a sentence), or None."""
    if not isinstance(value, Mapping):
        return f"must be a mapping of model name to prices, got {type(value).__name__}"
    for model, entry in value.items():
        where = f"entry '{model}'"
        if not isinstance(entry, Mapping):
            return f"{where} must be a mapping like {{input_per_mtok: 0.5, output_per_mtok: 1.5}}"
        unknown = sorted(str(k) for k in entry if k not in PRICE_KEYS)
        if unknown:
            return f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(PRICE_KEYS)})"
        for key in ("input_per_mtok", "output_per_mtok"):
            if key not in entry:
                return f"{where} needs {key} (US dollars per million tokens; 0 is allowed)"
        for key, number in entry.items():
            if isinstance(number, bool) or not isinstance(number, int | float):
                return f"{where}: {key} must be a number of US dollars, got {number!r}"
            if not 0 <= number < float("inf"):
                return f"{where}: {key} must be 0 or more, got {number!r}"
    return None


def configured_prices(section: Any) -> dict[str, Price]:
    """The ``pricing`` section as prices by model name (a section with a problem: none)."""
    if section is None or price_problem(section) is not None:
        return {}
    return {
        str(model): Price(**{k: float(v) for k, v in entry.items()})
        for model, entry in section.items()
    }


class Pricer:
    """Prices requests: configured prices first, then the ``genai-prices`` table."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self.prices = dict(prices or {})
        self._known: dict[str, bool] = {}  # model → whether the table prices it
        self._lock = threading.Lock()  # the table's lookups cache as they go

    def cost(self, models: tuple[str, ...], tokens: Tokens) -> float | None:
        """The cost of ``tokens`` by the first of ``models`` (the name asked for, then the
        name the endpoint answered with) that has a price; None when none has."""
        for model in models:
            if model in self.prices:
                return self.prices[model].cost(tokens)
        for model in models:
            cost = self._table_cost(model, tokens)
            if cost is not None:
                return cost
        return None

    def priced(self, model: str) -> bool:
        """Whether requests to ``model`` get a cost."""
        return model in self.prices or self._table_cost(model, Tokens()) is not None

    def warm_up(self) -> None:
        """Import the price table (blocking, ~0.2 s: call it off the event loop)."""
        self._table_cost("gpt-4o", Tokens(1, 1))

    def _table_cost(self, model: str, tokens: Tokens) -> float | None:
        if not model or self._known.get(model) is False:
            return None
        try:
            from genai_prices import Usage, calc_price

            cached = tokens.cache_read_tokens + tokens.cache_write_tokens
            usage = Usage(  # the table's input_tokens include the cached ones
                input_tokens=tokens.input_tokens + cached,
                output_tokens=tokens.output_tokens,
                cache_read_tokens=tokens.cache_read_tokens,
                cache_write_tokens=tokens.cache_write_tokens,
            )
            with self._lock:
                result = calc_price(usage, model)
        except LookupError:  # the table has no such model
            self._known[model] = False
            return None
        except Exception:  # a table that breaks on one model must not break the turn
            log.warning("pricing a request to %r failed; its cost is unknown", model, exc_info=True)
            self._known[model] = False
            return None
        self._known[model] = True
        return float(result.total_price)
