"""``ctx.platform_actions`` end to end: a plugin on a real hermesd acts on Telegram (the Bot API
stand-in) through the gateway's adapter, when the owner granted it the capability."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_gateway_telegram import OWNER, gateway_config
from tests.support.botapi import BotApiServer
from tests.support.daemon import DaemonProcess, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, reply
from tests.support.plugin_factory import write_plugin

GRANT = (
    "plugins:\n  entries:\n    actor:\n"
    "      granted_capabilities: [gateway.platform_actions, gateway.plugin_status]\n"
)

ACTOR = """
import asyncio, json


def register(ctx):
    async def seen(event, gateway, session_store):
        if event.text == "ack me":
            done = await ctx.platform_actions.add_reaction(
                "telegram", event.source.chat_id, event.message_id, "👀")
            with open("OUT", "a") as f:
                f.write(json.dumps(done) + "\\n")
        return None

    def act(raw):
        verb, _, rest = raw.partition(" ")
        actions = ctx.platform_actions
        if verb == "react":
            chat, message = rest.split()
            return json.dumps(asyncio.run(actions.add_reaction("telegram", chat, message, "👍")))
        if verb == "title":
            chat, thread, title = rest.split(maxsplit=2)
            done = asyncio.run(actions.set_thread_title("telegram", chat, thread, title))
            later = asyncio.run(actions.set_thread_lifecycle_emoji("telegram", chat, thread, "✅"))
            return json.dumps([done, later])
        if verb == "status":
            chat, text = rest.split(maxsplit=1)
            return json.dumps(asyncio.run(actions.send_status(
                text, "progress", platform="telegram", chat_id=chat)))
        return "?"

    ctx.register_hook("pre_gateway_dispatch", seen)
    ctx.register_command("act", act, description="Act on the platform")
"""


@pytest.fixture
def api() -> Iterator[BotApiServer]:
    with BotApiServer() as server:
        yield server


def _start(start, api: BotApiServer, model: ScriptedModelServer, grant: str) -> Path:
    home = short_tmpdir("gwx-")
    write_plugin(home / "plugins", "actor", ACTOR.replace("OUT", str(home / "out")))
    daemon: DaemonProcess = start(home, config=gateway_config(api, model) + grant)
    api.wait_call("getMe")
    assert daemon.alive()
    return home


def _act(api: BotApiServer, line: str) -> Any:
    """The plugin's JSON answer to ``/act line`` (other messages, e.g. a status line, skipped)."""
    before = len(api.texts(OWNER))
    api.user_says(OWNER, f"/act {line}")
    deadline = time.monotonic() + 30
    while True:
        answers = [t for t in api.texts(OWNER)[before:] if t[:1] in "{["]
        if answers:
            return json.loads(answers[0])
        assert time.monotonic() < deadline, "no answer to /act"
        time.sleep(0.05)


def test_a_granted_plugin_reacts_to_an_incoming_message_from_a_gateway_hook(
    start, api: BotApiServer, model: ScriptedModelServer
) -> None:
    home = _start(start, api, model, GRANT)
    model.push(reply("seen it"))
    api.user_says(OWNER, "ack me")
    api.wait_sent(OWNER, "seen it")
    reacted = api.wait_call("setMessageReaction")
    assert reacted["chat_id"] == str(OWNER)
    assert reacted["reaction"] == [{"type": "emoji", "emoji": "👀"}]
    assert json.loads((home / "out").read_text()) == {"ok": True, "action": "add_reaction"}


def test_platform_actions_without_the_capability_are_refused_and_do_nothing(
    start, api: BotApiServer, model: ScriptedModelServer
) -> None:
    _start(start, api, model, "")
    answer = _act(api, f"react {OWNER} 5")
    assert answer["ok"] is False and answer["error"] == "capability_not_granted"
    assert "granted_capabilities" in answer["detail"]
    assert not [c for c, _ in api.calls if c == "setMessageReaction"]


def test_a_status_line_is_posted_once_then_edited_in_place_and_repeats_are_skipped(
    start, api: BotApiServer, model: ScriptedModelServer
) -> None:
    _start(start, api, model, GRANT)
    first = _act(api, f"status {OWNER} step 1 of 3")
    assert first["ok"] is True and first["mode"] == "send"
    posted = api.wait_sent(OWNER, "step 1 of 3")
    second = _act(api, f"status {OWNER} step 2 of 3")
    assert second == {**first, "mode": "edit"}
    edited = api.wait_call("editMessageText")
    assert edited["message_id"] == str(posted["message_id"]) and edited["text"] == "step 2 of 3"
    again = _act(api, f"status {OWNER} step 2 of 3")
    assert again == {"ok": True, "action": "send_status", "mode": "skipped"}


def test_a_forum_topic_is_renamed_and_a_verb_telegram_lacks_says_so(
    start, api: BotApiServer, model: ScriptedModelServer
) -> None:
    _start(start, api, model, GRANT)
    renamed, lifecycle = _act(api, "title -1001 42 Deploy notes")
    assert renamed == {"ok": True, "action": "set_thread_title"}
    topic = api.wait_call("editForumTopic")
    assert topic == {"chat_id": "-1001", "message_thread_id": "42", "name": "Deploy notes"}
    assert lifecycle["ok"] is False and lifecycle["error"] == "unsupported_platform_action"
