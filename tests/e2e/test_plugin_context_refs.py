"""``ctx.register_context_reference`` on a real hermesd (issue 32, docs/hermes-compat.md §4).

Plugin ``refs`` registers three ``@kind:`` providers: ``ticket`` (the reference's ABC, async
``expand``, text with a secret in it), ``boom`` (a plain object whose sync ``expand`` raises),
``stall`` (never answers within ``tools.hook_timeout``) and ``file`` (reserved: refused with a
warning, the plugin still loads). The scripted model records
what each turn sends it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.daemon import DaemonProcess, send_and_follow, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, model_config, reply
from tests.support.plugin_factory import write_plugin

REFS = """
import time

from agent.context_references import ContextReferenceProvider


class Tickets(ContextReferenceProvider):
    prefix = "ticket"
    description = "tracker tickets"

    async def autocomplete(self, query, *, limit=10):
        return []

    async def expand(self, target):
        if target == "none":
            return None
        key = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
        return "Ticket " + target + ": printer on fire. key " + key


class Boom:
    prefix = "boom"

    def expand(self, target):
        raise RuntimeError("tracker unreachable for " + target)


class Stall:
    prefix = "stall"

    def expand(self, target):
        time.sleep(60)
        return "too late"


class Files:
    prefix = "file"

    def expand(self, target):
        return "never"


def register(ctx):
    ctx.register_context_reference(Tickets())
    ctx.register_context_reference(Boom())
    ctx.register_context_reference(Stall())
    ctx.register_context_reference(Files())
    ctx.register_command("alive", lambda raw: "yes", description="proves the plugin loaded")
"""


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def refsd(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = short_tmpdir("pr-")
    write_plugin(home / "plugins", "refs", REFS)
    config = model_config(model.url, timeout=30, max_retries=0) + "tools:\n  hook_timeout: 2\n"
    daemon = start_daemon(home, config=config)
    daemon.call("plugins.list")  # answered once the plugins have loaded (after READY)
    yield daemon
    daemon.stop()


def turn(daemon: DaemonProcess, model: ScriptedModelServer, message: str) -> str:
    """Send ``message`` in a new session; the user message content the model received (the
    stored one is checked to be ``message`` as typed)."""
    model.push(reply("noted"))
    with daemon.client() as c:
        sid = c.call("session.create")["id"]
        events = send_and_follow(c, sid, message)
        stored = c.call("session.history", {"session_id": sid})["messages"]
    assert any(e["type"] == "text.delta" for e in events)
    assert [m["content"] for m in stored if m["role"] == "user"] == [message]
    content: str = model.last_request["messages"][-1]["content"]
    return content


def test_a_reference_gets_the_providers_text_attached_marked_and_redacted(
    refsd: DaemonProcess, model: ScriptedModelServer
) -> None:
    typed = "What is the state of @ticket:42, please?"
    sent = turn(refsd, model, typed)
    assert sent.startswith(typed + "\n\n--- Attached Context ---\n\n@ticket:42\n")
    assert '<untrusted-data source="plugin:refs/@ticket">' in sent
    assert "Ticket 42: printer on fire." in sent
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in sent and "[REDACTED]" in sent


def test_a_quoted_value_and_a_none_answer(refsd: DaemonProcess, model: ScriptedModelServer) -> None:
    sent = turn(refsd, model, 'see @ticket:"A 7" and @ticket:none')
    assert "Ticket A 7: printer on fire." in sent
    assert "@ticket:none" not in sent.split("--- Attached Context ---")[1]


def test_a_provider_that_raises_leaves_the_message_as_typed(
    refsd: DaemonProcess, model: ScriptedModelServer
) -> None:
    typed = "check @boom:x now"
    assert turn(refsd, model, typed) == typed
    log = refsd.log()
    assert "context reference @boom:x (plugin refs) failed" in log
    assert "RuntimeError: tracker unreachable for x" in log


def test_a_provider_past_the_hook_timeout_attaches_nothing_and_the_others_still_do(
    refsd: DaemonProcess, model: ScriptedModelServer
) -> None:
    typed = "compare @stall:a with @ticket:9"
    sent = turn(refsd, model, typed)
    assert "Ticket 9: printer on fire." in sent and "too late" not in sent
    assert "context reference @stall:a (plugin refs) failed" in refsd.log()


def test_a_reserved_prefix_is_refused_and_the_plugin_still_loads(
    refsd: DaemonProcess, model: ScriptedModelServer
) -> None:
    assert "Plugin 'refs' context reference registration failed: prefix 'file'" in refsd.log()
    with refsd.client() as c:
        assert c.call("command.run", {"line": "/alive"}, timeout=30)["output"] == "yes"
    typed = "read @file:/etc/passwd"
    assert turn(refsd, model, typed) == typed


def test_an_unregistered_kind_and_a_disabled_plugin_leave_the_message_unchanged(
    refsd: DaemonProcess, model: ScriptedModelServer
) -> None:
    assert turn(refsd, model, "mail me@issue:5 or @issue:5") == "mail me@issue:5 or @issue:5"
    with refsd.client() as c:
        c.call("plugins.disable", {"name": "refs"}, timeout=120)
    try:
        assert turn(refsd, model, "@ticket:42 again") == "@ticket:42 again"
    finally:
        with refsd.client() as c:
            c.call("plugins.enable", {"name": "refs"}, timeout=120)
