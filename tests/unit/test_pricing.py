"""Pricing offline (`hermesd.model.pricing`) and token counts an endpoint cannot corrupt
(`hermesd.model.stream.token_count`)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest

from hermesd.model.pricing import Price, Pricer, Tokens, configured_prices, price_problem
from hermesd.model.stream import MAX_TOKENS, canonical_usage, token_count, usage_details
from tests.support.daemon import REPO

NO_NETWORK = textwrap.dedent(
    """
    import json, socket
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(repr(args[:2]))
        raise OSError("network refused by the test")

    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse

    from hermesd.model.pricing import Pricer, Tokens

    pricer = Pricer()
    pricer.warm_up()
    cost = pricer.cost(("gpt-4o",), Tokens(800, 500, 200, 0))
    print(json.dumps({"cost": cost, "unknown": pricer.cost(("no-such-model",), Tokens(1, 1)),
                      "attempts": attempts}))
    """
)


def test_the_price_table_works_with_every_socket_refused() -> None:
    out = subprocess.run(
        [sys.executable, "-c", NO_NETWORK],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["attempts"] == []
    # gpt-4o: $2.50 per MTok in, $1.25 cached, $10 out
    assert result["cost"] == pytest.approx((800 * 2.5 + 200 * 1.25 + 500 * 10) / 1e6)
    assert result["unknown"] is None


def test_an_unknown_model_costs_none_not_zero() -> None:
    pricer = Pricer()
    assert pricer.cost(("my-local-llm",), Tokens(1000, 1000)) is None
    assert pricer.priced("my-local-llm") is False


def test_a_configured_price_wins_and_cache_prices_default_to_input() -> None:
    pricer = Pricer({"gpt-4o": Price(1.0, 2.0), "m": Price(1.0, 2.0, cache_read_per_mtok=0.1)})
    assert pricer.cost(("gpt-4o",), Tokens(1_000_000, 0, 1_000_000)) == pytest.approx(2.0)
    assert pricer.cost(("m",), Tokens(0, 1_000_000, 1_000_000, 1_000_000)) == pytest.approx(3.1)
    assert pricer.priced("m")


def test_the_answered_model_name_is_tried_after_the_asked_one() -> None:
    pricer = Pricer({"served-name": Price(0.0, 1.0)})
    assert pricer.cost(("alias", "served-name"), Tokens(0, 1_000_000)) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ([], "must be a mapping"),
        ({"m": 3}, "entry 'm' must be a mapping"),
        ({"m": {"output_per_mtok": 1}}, "needs input_per_mtok"),
        ({"m": {"input_per_mtok": 1, "output_per_mtok": True}}, "must be a number"),
        ({"m": {"input_per_mtok": -1, "output_per_mtok": 1}}, "must be 0 or more"),
        ({"m": {"input_per_mtok": 1, "output_per_mtok": math.inf}}, "must be 0 or more"),
        ({"m": {"input_per_mtok": 1, "output_per_mtok": 1, "per_call": 1}}, "unknown key"),
    ],
)
def test_bad_pricing_entries_are_named(section: object, problem: str) -> None:
    found = price_problem(section)
    assert found is not None and problem in found
    assert configured_prices(section) == {}


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (12, 12),
        (12.9, 12),
        (-3, 0),
        (-0.5, 0),
        ("12", 0),
        (None, 0),
        (True, 0),
        (math.nan, 0),
        (math.inf, MAX_TOKENS),
        (10**30, MAX_TOKENS),
        (1e300, MAX_TOKENS),
        ([1], 0),
    ],
)
def test_a_token_count_is_a_bounded_non_negative_int(value: object, count: int) -> None:
    assert token_count(value) == count


def test_cached_tokens_larger_than_the_prompt_do_not_go_negative() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "cache_read_tokens": 99}
    buckets = canonical_usage(usage)
    assert buckets is not None and buckets["input_tokens"] == 0
    assert usage_details({"prompt_tokens_details": {"cached_tokens": -5}}) == {}
