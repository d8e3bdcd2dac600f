"""The gateway's hooks on a real hermesd with the Telegram adapter and the Bot API stand-in:
plugin hooks (``pre_gateway_dispatch``, ``post_gateway_admission``,
``gateway_platform_event``) and HOOK.yaml gateway hooks in ``$HERMES_HOME/hooks/``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_gateway_telegram import OWNER, gateway_config
from tests.support.botapi import BotApiServer
from tests.support.daemon import short_tmpdir
from tests.support.modelserver import ScriptedModelServer, reply
from tests.support.plugin_factory import write_plugin

HOOKS_PLUGIN = """
import json

def register(ctx):
    def dispatch(event, gateway, session_store):
        if event.text == "secret":
            return {"action": "skip", "reason": "not for the model"}
        if event.text == "shout":
            return {"action": "rewrite", "text": "SHOUT"}

    def admitted(session_key, platform, source, message_id, text):
        if text == "ping-plugin":
            return {"action": "handled", "reply": f"pong for {source['user_id']} in {session_key}"}

    def platform_event(platform, event_type, payload):
        with open("EVENTS", "a") as f:
            f.write(json.dumps([platform, event_type, payload]) + "\\n")

    ctx.register_hook("pre_gateway_dispatch", dispatch)
    ctx.register_hook("post_gateway_admission", admitted)
    ctx.register_hook("gateway_platform_event", platform_event)
"""

HOOK_HANDLER = """
import json

def handle(event_type, context):
    with open("SEEN", "a") as f:
        f.write(json.dumps([event_type, context]) + "\\n")
"""


@pytest.fixture
def api() -> Iterator[BotApiServer]:
    with BotApiServer() as server:
        yield server


@pytest.fixture
def home(start, api: BotApiServer, model: ScriptedModelServer) -> Path:
    home = short_tmpdir("gwh-")
    write_plugin(home / "plugins", "gwhooks", HOOKS_PLUGIN.replace("EVENTS", str(home / "events")))
    hook = home / "hooks" / "recorder"
    hook.mkdir(parents=True)
    (hook / "HOOK.yaml").write_text("name: recorder\nevents: [agent:end, 'command:*']\n")
    (hook / "handler.py").write_text(HOOK_HANDLER.replace("SEEN", str(home / "seen")))
    start(home, config=gateway_config(api, model))
    api.wait_call("getMe")
    return home


def _lines(path: Path, count: int) -> list[list[object]]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if path.exists() and len(lines := path.read_text().splitlines()) >= count:
            return [json.loads(line) for line in lines]
        time.sleep(0.05)
    raise AssertionError(f"{path} has fewer than {count} lines")


def test_pre_gateway_dispatch_may_skip_or_rewrite_a_message(
    home: Path, api: BotApiServer, model: ScriptedModelServer
) -> None:
    asked = len(model.requests)
    api.user_says(OWNER, "secret")
    model.push(reply("heard you"))
    api.user_says(OWNER, "shout")
    api.wait_sent(OWNER, "heard you")
    assert len(model.requests) == asked + 1
    assert model.requests[-1]["messages"][-1]["content"] == "SHOUT"


def test_post_gateway_admission_may_answer_in_the_models_place(
    home: Path, api: BotApiServer, model: ScriptedModelServer
) -> None:
    asked = len(model.requests)
    api.user_says(OWNER, "ping-plugin")
    api.wait_sent(OWNER, f"pong for {OWNER} in agent:main:telegram:dm:{OWNER}")
    assert len(model.requests) == asked


def test_a_reaction_is_a_gateway_platform_event(home: Path, api: BotApiServer) -> None:
    api.react(OWNER, 1000, "👍")
    [[platform, kind, payload]] = _lines(home / "events", 1)
    assert (platform, kind) == ("telegram", "reaction")
    assert payload["new_reaction"] == ["👍"] and payload["chat_id"] == str(OWNER)


def test_hook_yaml_gateway_hooks_get_agent_end_and_commands(
    home: Path, api: BotApiServer, model: ScriptedModelServer
) -> None:
    model.push(reply("the answer"))
    api.user_says(OWNER, "a question")
    api.wait_sent(OWNER, "the answer")
    api.user_says(OWNER, "/help")
    api.wait_sent(OWNER, "Commands:")
    (end, ended), (command, ran) = _lines(home / "seen", 2)
    assert end == "agent:end" and command == "command:help"
    assert ended["response"] == "the answer" and ended["message"] == "a question"
    assert ended["chat_id"] == str(OWNER) and ended["platform"] == "telegram"
    assert ran["command"] == "help"
