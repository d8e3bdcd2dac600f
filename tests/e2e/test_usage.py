"""Usage, cost and budgets on a real hermesd: what every model request used is stored with its
estimated cost (priced offline), shown by ``/usage``, ``usage.get`` and ``hermesctl usage``,
kept across a restart, and held to ``budget.*``.

The model is the scripted OpenAI-compatible server; it reports the usage each step scripts
(with OpenAI's ``*_details`` and Anthropic-style cache fields) in the stream's last chunk.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hermesctl.client import RpcError
from tests.support.daemon import (
    DaemonProcess,
    daemon_env,
    run_hermesctl,
    send_and_follow,
    short_tmpdir,
)
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)

# gpt-4o in the genai-prices table this package pins: $2.50 in, $1.25 cached in, $10 out /MTok
GPT4O_USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 500,
    "total_tokens": 1500,
    "prompt_tokens_details": {"cached_tokens": 200},
    "completion_tokens_details": {"reasoning_tokens": 120},
}
GPT4O_COST = (800 * 2.5 + 200 * 1.25 + 500 * 10) / 1e6  # 0.00725


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


def config(url: str, name: str = "gpt-4o", extra: str = "") -> str:
    return model_config(url).replace("default: scripted-model", f"default: {name}") + extra


def ctl(d: DaemonProcess, *args: str) -> Any:
    """``hermesctl --json ARGS`` against ``d``, parsed."""
    out = run_hermesctl(["--socket", str(d.socket), "--json", *args])
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def turn(d: DaemonProcess, sid: str | None = None, text: str = "hi") -> list[dict[str, Any]]:
    with d.client() as c:
        sid = sid or c.call("session.create")["id"]
        return send_and_follow(c, sid, text)


def test_usage_and_cost_of_each_request_are_stored_and_shown(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    model.push(reply("one", usage=GPT4O_USAGE), reply("two", usage=GPT4O_USAGE))
    d = start(config=config(model.url))
    with d.client() as c:
        sid = c.call("session.create")["id"]
        first = send_and_follow(c, sid, "hello")
        send_and_follow(c, sid, "again")
        ran = c.call("command.run", {"line": "/usage", "session_id": sid})
    assert model.requests[0]["stream_options"] == {"include_usage": True}
    usage_event = next(e for e in first if e["type"] == "usage")
    assert usage_event["cache_read_tokens"] == 200 and usage_event["reasoning_tokens"] == 120
    assert first[-1]["cost_usd"] == pytest.approx(GPT4O_COST)
    report = ran["usage"]
    assert report["totals"] == {
        "requests": 2,
        "input_tokens": 1600,
        "output_tokens": 1000,
        "cache_read_tokens": 400,
        "cache_write_tokens": 0,
        "reasoning_tokens": 240,
        "total_tokens": 3000,
        "cost_usd": pytest.approx(2 * GPT4O_COST),
        "unpriced_requests": 0,
        "unreported_requests": 0,
    }
    assert report["session"]["total_tokens"] == 3000  # the session's counters agree
    assert "2 requests · 3,000 tokens" in ran["output"] and "$0.0145" in ran["output"]
    assert report["today"]["cost_usd"] == pytest.approx(2 * GPT4O_COST)


def test_usage_survives_a_restart_and_hermesctl_usage_shows_it(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    usage = {"prompt_tokens": 300, "completion_tokens": 20, "cache_creation_input_tokens": 100}
    model.push(reply("one", usage=usage))
    d = start(config=config(model.url, "claude-sonnet-4-5"))
    sid = turn(d)[0]["session_id"]
    d.stop()
    with sqlite3.connect(d.home / "state.db") as db:  # as if counted before the usage table
        db.execute("UPDATE sessions SET total_tokens = total_tokens + 1000 WHERE id = ?", (sid,))
    d = start(d.home, config=config(model.url, "claude-sonnet-4-5"))
    ran = d.call("command.run", {"line": "/usage", "session_id": sid})
    assert "(and 1,000 tokens counted before per-request records were kept)" in ran["output"]
    report = ctl(d, "usage", "--session", sid)
    totals = report["totals"]
    assert (totals["input_tokens"], totals["cache_write_tokens"]) == (200, 100)
    assert totals["output_tokens"] == 20 and totals["cost_usd"] > 0
    assert [m["model"] for m in report["by_model"]] == ["claude-sonnet-4-5"]
    text = run_hermesctl(["--socket", str(d.socket), "usage"])
    assert text.returncode == 0, text.stderr
    assert f"session {sid}" in text.stdout and "100 cache write" in text.stdout


def test_since_and_until_choose_the_window(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    model.push(reply("old", usage=GPT4O_USAGE), reply("new", usage=GPT4O_USAGE))
    d = start(config=config(model.url))
    old = turn(d)[0]["session_id"]
    new = turn(d)[0]["session_id"]
    d.stop()
    ten_days_ago = time.time() - 10 * 86400
    with sqlite3.connect(d.home / "state.db") as db:  # the first request, ten days back
        db.execute("UPDATE usage SET created_at = ? WHERE session_id = ?", (ten_days_ago, old))
    d = start(d.home, config=config(model.url))
    week = ctl(d, "usage", "--since", "7d")
    assert week["totals"]["requests"] == 1
    assert [s["session_id"] for s in week["by_session"]] == [new]
    day = time.strftime("%Y-%m-%d", time.localtime(ten_days_ago - 86400))
    assert ctl(d, "usage", "--since", day)["totals"]["requests"] == 2
    before = ctl(d, "usage", "--until", "7d")
    assert [s["session_id"] for s in before["by_session"]] == [old]
    bad = run_hermesctl(["--socket", str(d.socket), "usage", "--since", "last tuesday"])
    assert bad.returncode == 2 and "not a date" in bad.stderr


def test_an_unpriced_model_has_an_unknown_cost_not_zero(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    model.push(reply("local", usage={"prompt_tokens": 10, "completion_tokens": 5}))
    d = start(config=config(model.url, "my-local-llm"))
    events = turn(d)
    assert events[-1]["cost_usd"] is None
    totals = ctl(d, "usage")["totals"]
    assert totals["cost_usd"] is None and totals["unpriced_requests"] == 1
    assert totals["total_tokens"] == 15


def test_a_configured_price_prices_a_local_model(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    model.push(reply("local", usage={"prompt_tokens": 1_000_000, "completion_tokens": 500_000}))
    prices = "pricing:\n  my-local-llm: {input_per_mtok: 0.5, output_per_mtok: 2}\n"
    d = start(config=config(model.url, "my-local-llm", prices))
    assert turn(d)[-1]["cost_usd"] == pytest.approx(0.5 + 1.0)


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -50, "completion_tokens": "lots", "total_tokens": None},
        {"prompt_tokens": 1e300, "completion_tokens": 3, "prompt_tokens_details": "cached"},
        {"prompt_tokens": 10, "completion_tokens": 2, "cache_read_input_tokens": 99},
        "a lot",
        None,
    ],
    ids=["negative-and-strings", "huge-float", "more-cached-than-prompt", "not-a-map", "missing"],
)
def test_garbage_usage_neither_breaks_the_turn_nor_the_totals(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer, usage: Any
) -> None:
    step = reply("fine", usage=usage) if usage is not None else reply("fine", send_usage=False)
    model.push(step, reply("and again", usage={"prompt_tokens": 7, "completion_tokens": 3}))
    d = start(config=config(model.url))
    with d.client() as c:
        sid = c.call("session.create")["id"]
        first = send_and_follow(c, sid, "hi")
        second = send_and_follow(c, sid, "hi")
        session = c.call("session.get", {"session_id": sid})
    assert first[-1]["status"] == "completed" and first[-1]["final_text"] == "fine"
    assert second[-1]["status"] == "completed"
    totals = ctl(d, "usage", "--session", sid)["totals"]
    assert totals["requests"] == 2
    for key in ("input_tokens", "output_tokens", "cache_read_tokens", "total_tokens"):
        assert isinstance(totals[key], int) and 0 <= totals[key] <= 2**41, (key, totals)
    assert session["total_tokens"] == totals["total_tokens"]
    assert totals["unreported_requests"] == (1 if usage in (None, "a lot") else 0)


def budget(text: str) -> str:
    return "budget:\n" + "".join(f"  {line}\n" for line in text.split(";"))


def warnings_in(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "budget.warning"]


def test_a_session_token_budget_warns_once_when_crossed(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    usage = {"prompt_tokens": 60, "completion_tokens": 10}
    model.push(*(reply(f"answer {i}", usage=usage) for i in range(3)))
    d = start(config=config(model.url, extra=budget("session_tokens: 100")))
    with d.client() as c:
        sid = c.call("session.create")["id"]
        first = send_and_follow(c, sid, "one")  # 70 tokens: under
        second = send_and_follow(c, sid, "two")  # 140: crossed, announced after the turn
        third = send_and_follow(c, sid, "three")  # still over: not announced again
    assert warnings_in(first) == []
    [warning] = warnings_in(second)
    assert warning["budget"] == "session_tokens" and warning["used"] == 140
    assert "budget.session_tokens (100)" in warning["message"]
    assert warnings_in(third) == [] and third[-1]["status"] == "completed"


def test_a_session_token_budget_with_stop_ends_the_turn_before_the_next_request(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    big = {"prompt_tokens": 500, "completion_tokens": 50}
    model.push(call_tools(tool_call("calculator", {"expression": "1+1"}), usage=big))
    d = start(config=config(model.url, extra=budget("session_tokens: 100;action: stop")))
    with d.client() as c:
        sid = c.call("session.create")["id"]
        events = send_and_follow(c, sid, "add")
        with pytest.raises(RpcError) as refused:
            c.call("session.send", {"session_id": sid, "message": "more"})
        other = c.call("session.create")["id"]
    finished = events[-1]
    assert finished["status"] == "failed" and finished["error_type"] == "BudgetExceeded"
    assert "budget.session_tokens" in finished["error"]
    assert "hermesctl config set budget.session_tokens" in finished["error"]
    assert len(model.requests) == 1  # the tool ran; the request after it never went out
    assert [e["name"] for e in events if e["type"] == "tool.finished"] == ["calculator"]
    assert refused.value.code == "hermes.error.BudgetExceeded"
    assert refused.value.data["budget"] == "session_tokens"
    model.push(reply("a fresh session has its own budget"))
    assert turn(d, other)[-1]["status"] == "completed"


def test_a_daily_usd_budget_stops_every_session_of_the_day(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    prices = "pricing:\n  metered: {input_per_mtok: 1000, output_per_mtok: 1000}\n"
    usage = {"prompt_tokens": 900, "completion_tokens": 100}  # $1.00 a request
    model.push(reply("first", usage=usage), reply("second", usage=usage))
    cfg = config(model.url, "metered", prices + budget("daily_usd: 1.5;action: stop"))
    d = start(config=cfg)
    with d.client() as watcher:  # attached to a session that never runs a turn
        idle = watcher.call("session.create")["id"]
        assert turn(d)[-1]["status"] == "completed"  # $1.00
        second = turn(d)  # $2.00: crossed, announced to every attached client
        assert second[-1]["status"] == "completed"
        note = watcher.next_notification(timeout=10)
    assert note is not None and note.params[0]["type"] == "budget.warning"
    assert note.params[0]["session_id"] == idle and note.params[0]["budget"] == "daily_usd"
    assert warnings_in(second)[0]["used"] == pytest.approx(2.0)
    with d.client() as c, pytest.raises(RpcError) as refused:
        c.call("session.send", {"session_id": idle, "message": "hi"})
    assert refused.value.code == "hermes.error.BudgetExceeded"
    assert "Today's model spending is $2.0000, over budget.daily_usd ($1.5)" in str(refused.value)
    assert len(model.requests) == 2


def test_a_usd_budget_warns_once_that_an_unpriced_model_cannot_be_held_to_it(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    model.push(reply("one"), reply("two"))
    d = start(config=config(model.url, "my-local-llm", budget("monthly_usd: 10")))
    with d.client() as c:
        sid = c.call("session.create")["id"]
        first = send_and_follow(c, sid, "one")
        second = send_and_follow(c, sid, "two")
    [warning] = warnings_in(first)
    assert warning["reason"] == "unpriced" and warning["model"] == "my-local-llm"
    assert "budget.monthly_usd cannot be enforced" in warning["message"]
    assert "pricing.my-local-llm" in warning["message"]
    assert warnings_in(second) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("budget: {session_tokens: -5}", "'budget.session_tokens' must not be negative"),
        ("budget: {daily_usd: ten}", "'budget.daily_usd' must be an integer or a number"),
        ("budget: {monthly_usd: 0}", "'budget.monthly_usd' must be more than 0"),
        ("budget: {action: halt}", "'budget.action' must be one of warn, stop"),
        ("pricing: {m: {input_per_mtok: 1}}", "entry 'm' needs output_per_mtok"),
        ("pricing: {m: {input_per_mtok: 1, output_per_mtok: x}}", "output_per_mtok must be a"),
        ("pricing: [gpt-4o]", "'pricing' must be a mapping"),
    ],
)
def test_bad_budget_and_pricing_settings_are_refused_by_check_config(
    text: str, problem: str
) -> None:
    home = short_tmpdir()
    (home / "config.yaml").write_text(text + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "hermesd", "--check-config"],
        env=daemon_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 78, out
    assert problem in out.stderr


def test_the_chat_repl_shows_a_budget_warning_and_usage(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    import os

    from tests.support.terminal import Terminal

    model.push(reply("counted", usage={"prompt_tokens": 90, "completion_tokens": 20}))
    d = start(config=config(model.url, extra=budget("session_tokens: 100")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(d.home), TERM="xterm")
    t = Terminal([sys.executable, "-m", "hermesctl", "--socket", str(d.socket), "chat"], env)
    try:
        t.expect("› ")
        t.wait_reading()
        t.sendline("spend")
        t.expect("counted")
        t.expect(r"This session has used 110 tokens, over budget.session_tokens \(100\)")
        t.expect("› ")
        t.wait_reading()
        t.sendline("/usage")
        t.expect(r"1 request . 110 tokens \(90 in, 20 out\) . \$0\.0004")
        t.expect(r"Budgets \(warn\): session_tokens 100")
        t.sendline("/quit")
        assert t.wait() == 0
    finally:
        t.close()


ASKING_PLUGIN = """
import json

def register(ctx):
    def ask(args):
        try:
            result = ctx.llm.complete([{"role": "user", "content": "plugin question"}])
        except Exception as exc:
            return json.dumps({"error": f"{type(exc).__name__}: {exc}"})
        return json.dumps({"text": result.text})

    schema = {"description": "Ask the model", "parameters": {"type": "object",
              "properties": {}}}
    ctx.register_tool("ask_model", "asking", schema, ask)
"""


def test_a_plugins_own_model_calls_are_counted_and_held_to_the_budget(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    from tests.support.approvals import tool
    from tests.support.plugin_factory import write_plugin

    home = short_tmpdir()
    write_plugin(home / "plugins", "asking", ASKING_PLUGIN)
    prices = "pricing:\n  metered: {input_per_mtok: 1000, output_per_mtok: 1000}\n"
    d = start(
        home, config=config(model.url, "metered", prices + budget("daily_usd: 1;action: stop"))
    )
    model.push(reply("plugin answer", usage={"prompt_tokens": 1000, "completion_tokens": 500}))
    with d.client() as c:
        c.call("plugins.list")
        assert tool(c, "ask_model", {}) == {"text": "plugin answer"}
        second = tool(c, "ask_model", {})
    assert second["error"].startswith("BudgetExceeded: Today's model spending is $1.5000")
    assert len(model.requests) == 1
    report = ctl(d, "usage")
    assert report["today"]["requests"] == 1 and report["today"]["cost_usd"] == pytest.approx(1.5)
    assert [(s["session_id"], s["requests"]) for s in report["by_session"]] == [(None, 1)]


def test_deleting_a_session_does_not_take_back_what_it_spent(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    model.push(reply("spent", usage=GPT4O_USAGE))
    d = start(config=config(model.url))
    sid = turn(d)[0]["session_id"]
    d.call("session.delete", {"session_id": sid})
    report = ctl(d, "usage")
    assert report["today"]["cost_usd"] == pytest.approx(GPT4O_COST)
    [group] = report["by_session"]
    assert group["session_id"] == sid and group["deleted"] is True
