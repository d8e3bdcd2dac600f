"""Whose sessions a caller may see (`Caller.scope_uid`), and the budgets' accounting."""

from __future__ import annotations

import asyncio
import os

import pytest

from hermesd.caller import MEMBER, NO_ONE, OWNER, TOOL, Caller
from hermesd.rpc.budgets import BudgetLimits, Budgets, OverBudget
from hermesd.rpc.connection import Connection, Limits, Peer, Router


def _scope(uid: int, trust: str) -> int | None:
    async def make() -> int | None:
        conn = Connection(Router(), Limits(), lambda c, t: None)
        conn.peer = Peer(1, uid, uid)
        conn.admitted(trust, "a test's verdict" if trust == TOOL else None)
        return conn.caller.scope_uid

    return asyncio.run(make())


def test_the_owner_sees_everything() -> None:
    assert _scope(os.geteuid(), OWNER) is None


def test_a_group_member_sees_its_own_uid() -> None:
    assert _scope(65534, MEMBER) == 65534


def test_a_same_uid_connection_not_trusted_as_owner_sees_no_ones_sessions() -> None:
    assert _scope(os.geteuid(), TOOL) == NO_ONE
    assert _scope(0, TOOL) == NO_ONE
    assert Caller(os.geteuid(), 1, TOOL).session_uid == NO_ONE


def test_budget_refuses_past_the_per_uid_limit_and_holds_nothing_then() -> None:
    budgets = Budgets(BudgetLimits(input_per_uid=100, input_total=1000))
    budgets.take("input", 7, 80)
    with pytest.raises(OverBudget) as refused:
        budgets.take("input", 7, 30)
    assert refused.value.scope == "uid"
    assert budgets.held("input", 7) == 80 and budgets.totals["input"] == 80
    budgets.take("input", 8, 90)  # another uid has its own share


def test_budget_refuses_past_the_total_limit() -> None:
    budgets = Budgets(BudgetLimits(inflight_per_uid=100, inflight_total=150))
    budgets.take("inflight", 1, 100)
    with pytest.raises(OverBudget) as refused:
        budgets.take("inflight", 2, 60)
    assert refused.value.scope == "total"


def test_a_budget_of_zero_is_no_limit() -> None:
    budgets = Budgets(BudgetLimits(input_per_uid=0, input_total=0))
    budgets.take("input", 5, 1 << 40)
    assert budgets.held("input", 5) == 1 << 40


def test_budget_given_back_returns_to_zero() -> None:
    budgets = Budgets()
    budgets.take("output", 3, 500)
    budgets.give("output", 3, 500)
    assert budgets.held("output", 3) == 0 and budgets.status()["output"] == {
        "held": 0,
        "refused": 0,
    }
