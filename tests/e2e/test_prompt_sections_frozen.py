"""A session's plugin system-prompt sections are rendered once and kept, as the reference keeps
its system prompt for prompt caching, and rendered again on the events that rebuild it there.

The plugin's section counts its renders and says which model it was rendered for, so a fresh
render changes the system message; the scripted model server shows what each request carried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hermesctl.client import Client
from tests.support.daemon import DaemonProcess, send_and_follow, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, model_config, reply
from tests.support.plugin_factory import write_plugin

Start = Callable[..., DaemonProcess]

PLUGIN = """
import itertools

renders = itertools.count(1)


def section(info):
    return f"render #{next(renders)} for {info['model']} on {info['platform']}"


def register(ctx):
    ctx.register_system_prompt_section("counter", section)
"""


@pytest.fixture
def d(start: Start, model: ScriptedModelServer) -> DaemonProcess:
    model.clear_script()
    home = short_tmpdir("frozen-")
    write_plugin(home / "plugins", "counter", PLUGIN)
    extra = "compression:\n  protect_first_n: 1\n  protect_last_n: 2\n"
    daemon = start(home, config=model_config(model.url) + extra)
    daemon.call("plugins.list")  # the plugin is loaded
    return daemon


def _turn(model: ScriptedModelServer, c: Client, sid: str, text: str = "hello") -> str:
    """One turn; the system message the model got, as sent."""
    model.push(reply("ok"))
    events = send_and_follow(c, sid, text, timeout=30)
    assert events[-1]["status"] == "completed", events[-1]
    system: dict[str, Any] = model.last_request["messages"][0]
    assert system["role"] == "system"
    return str(system["content"])


def test_the_system_message_is_byte_identical_across_a_sessions_turns(
    d: DaemonProcess, model: ScriptedModelServer
) -> None:
    with d.client(timeout=30) as c:
        sid = c.call("session.create")["id"]
        first = _turn(model, c, sid)
        second = _turn(model, c, sid, "and again")
        third = _turn(model, c, sid, "once more")
    assert "## Plugin Context: counter\n\nrender #" in first
    assert first == second == third


def test_a_new_session_renders_the_sections_again(
    d: DaemonProcess, model: ScriptedModelServer
) -> None:
    with d.client(timeout=30) as c:
        one = _turn(model, c, c.call("session.create")["id"])
        other = _turn(model, c, c.call("session.create")["id"])
    assert one != other


def test_a_model_switch_renders_the_sections_again(
    d: DaemonProcess, model: ScriptedModelServer
) -> None:
    with d.client(timeout=30) as c:
        sid = c.call("session.create")["id"]
        before = _turn(model, c, sid)
        c.call("command.run", {"line": "/model other-model", "session_id": sid})
        after = _turn(model, c, sid)
    assert "for scripted-model" in before and "for other-model" in after


def test_a_compaction_renders_the_sections_again(
    d: DaemonProcess, model: ScriptedModelServer
) -> None:
    with d.client(timeout=60) as c:
        sid = c.call("session.create")["id"]
        before = [_turn(model, c, sid, f"question {n}") for n in range(3)][-1]
        model.push(reply("SUMMARY: three questions"))
        out = c.call("command.run", {"line": "/compress", "session_id": sid}, timeout=60)
        assert "Compacted" in out["output"], out
        after = _turn(model, c, sid, "after the summary")
        again = _turn(model, c, sid, "and after that")
    assert before != after and after == again


def test_an_undo_renders_the_sections_again(d: DaemonProcess, model: ScriptedModelServer) -> None:
    with d.client(timeout=30) as c:
        sid = c.call("session.create")["id"]
        before = _turn(model, c, sid)
        _turn(model, c, sid, "a turn to take back")
        c.call("session.undo", {"session_id": sid})
        after = _turn(model, c, sid)
    assert before != after
