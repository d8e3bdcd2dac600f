"""The Matrix adapter end to end: a real hermesd, a real synapse, the scripted model.

The person's phone is a plain client-server API client (tests/support/synapse.py) in rooms
with the daemon's bot account. Each test registers its own users and rooms on the homeserver
the test process shares (the ``homeserver`` fixture).
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.approvals import wait_pending
from tests.support.cron import MINUTE, advance, start_cron
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir
from tests.support.matrix_e2ee import EncryptedPhone
from tests.support.matrix_gateway import matrix_config, start_matrix_daemon, wait_connected
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)
from tests.support.plugin_factory import write_plugin, written_lines
from tests.support.synapse import Homeserver, MatrixUser

TERMINAL = "terminal:\n  cwd: /tmp\n"


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    """A fresh script per test: each test says what the model answers."""
    with ScriptedModelServer() as server:
        yield server


def _room_with_bot(person: MatrixUser, bot: MatrixUser, **kw: Any) -> str:
    """A room ``person`` made and invited the bot to, once the bot has joined."""
    return _room_with_bot_joined(person, bot, person.create_room([bot.user_id], **kw))


def _room_with_bot_joined(person: MatrixUser, bot: MatrixUser, room: str) -> str:
    deadline = time.monotonic() + 20
    while bot.user_id not in person.members(room):
        assert time.monotonic() < deadline, "the bot did not join the room"
        time.sleep(0.1)
    person.sync(0)
    return room


def _from(bot: MatrixUser, text: str | None = None) -> Any:
    def match(event: dict[str, Any]) -> bool:
        body = str(event["content"].get("body", ""))
        return event["sender"] == bot.user_id and (text is None or text in body)

    return match


def _matrix_state(daemon: DaemonProcess) -> str:
    platforms = daemon.call("gateway.status")["platforms"]
    return str(next(p["state"] for p in platforms if p["name"] == "matrix"))


def _owner_setup(
    start: Any, model: ScriptedModelServer, homeserver: Homeserver, extra: str = ""
) -> tuple[DaemonProcess, MatrixUser, MatrixUser, str]:
    bot, me = homeserver.register(), homeserver.register()
    daemon = start_matrix_daemon(
        start, model.url, homeserver, bot, owners=[me.user_id], extra=extra
    )
    return daemon, bot, me, _room_with_bot(me, bot)


def test_a_message_in_a_room_becomes_a_turn_and_the_answer_comes_back(
    start, model, homeserver
) -> None:
    _daemon, bot, me, room = _owner_setup(start, model, homeserver)
    model.push(reply("The answer is **42**."))
    me.send(room, "what is the answer?")
    answer = me.wait_for(room, _from(bot))
    assert answer["content"]["body"] == "The answer is **42**."
    assert "<strong>42</strong>" in answer["content"]["formatted_body"]
    users = [m for m in model.last_request["messages"] if m["role"] == "user"]
    assert "what is the answer?" in str(users[-1]["content"])


def test_an_approval_is_answered_with_approve_in_the_room(start, model, homeserver) -> None:
    _daemon, bot, me, room = _owner_setup(start, model, homeserver, extra=TERMINAL)
    target = short_tmpdir("mxa-")
    model.push(
        call_tools(tool_call("terminal", {"command": f"rm -r {target}"})), reply("removed it")
    )
    me.send(room, "clean up please")
    asked = me.wait_for(room, _from(bot, "/approve"))
    assert f"rm -r {target}" in asked["content"]["body"]
    me.send(room, "/approve")
    me.wait_for(room, _from(bot, "removed it"))
    assert not target.exists()


def test_an_approval_answered_from_hermesctl_closes_the_one_in_the_room(
    start, model, homeserver
) -> None:
    daemon, bot, me, room = _owner_setup(start, model, homeserver, extra=TERMINAL)
    target = short_tmpdir("mxa-")
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {target}"})), reply("gone"))
    me.send(room, "clean up please")
    me.wait_for(room, _from(bot, "/approve"))
    approval = wait_pending(daemon)[0]["id"]
    done = run_hermesctl(["--socket", str(daemon.socket), "approvals", "approve", approval])
    assert done.returncode == 0, done.stderr
    # the question in the room is edited to say it was decided elsewhere
    closed = me.wait_for(room, _from(bot, "Decided elsewhere"))
    relation = closed["content"]["m.relates_to"]
    assert relation["rel_type"] == "m.replace"
    assert closed["content"]["m.new_content"]["body"].startswith("Decided elsewhere: once")
    me.wait_for(room, _from(bot, "gone"))
    assert not target.exists()
    assert daemon.call("approvals.pending")["pending"] == []


def test_an_unknown_user_is_paired_by_the_owner_and_then_answered(start, model, homeserver) -> None:
    daemon, bot, _me, _room = _owner_setup(start, model, homeserver)
    stranger = homeserver.register()
    direct = _room_with_bot(stranger, bot, is_direct=True)
    stranger.send(direct, "hello?")
    offer = stranger.wait_for(direct, _from(bot, "pairing code"))
    code = re.search(r"pair ([A-Z0-9]{8})", offer["content"]["body"])
    assert code, offer
    assert len(model.requests) == 0  # a stranger's message never reaches the model
    paired = run_hermesctl(["--socket", str(daemon.socket), "gateway", "pair", code.group(1)])
    assert paired.returncode == 0, paired.stderr
    stranger.wait_for(direct, _from(bot, "You are paired"))  # told in their direct chat
    model.push(reply("welcome aboard"))
    stranger.send(direct, "hello again")
    stranger.wait_for(direct, _from(bot, "welcome aboard"))


def test_a_cron_job_delivers_into_the_room(start, model, homeserver) -> None:
    bot, me = homeserver.register(), homeserver.register()
    daemon = start_cron(start, model, extra=matrix_config(homeserver, bot, owners=[me.user_id]))
    wait_connected(daemon)
    room = _room_with_bot(me, bot)
    model.push(reply("Disk is 42% full."))
    job = daemon.call(
        "cron.create",
        {"schedule": "30m", "prompt": "check the disk", "deliver": f"matrix:{room}"},
    )
    advance(daemon, 30 * MINUTE)
    delivered = me.wait_for(room, _from(bot, "Disk is 42% full."))
    assert delivered["sender"] == bot.user_id
    run = daemon.call("cron.get", {"job_id": job["id"]})["job"]
    assert run["last_status"] == "ok", run


def test_a_cron_job_delivers_into_a_thread_of_the_room(start, model, homeserver) -> None:
    bot, me = homeserver.register(), homeserver.register()
    daemon = start_cron(start, model, extra=matrix_config(homeserver, bot, owners=[me.user_id]))
    wait_connected(daemon)
    room = _room_with_bot(me, bot)
    # a notice starts the thread: the adapter answers m.text, not notices (no turn of its own)
    root = me.send(room, "Disk reports go here", msgtype="m.notice")
    model.push(reply("Disk is 43% full."))
    target = f"matrix:{room}:{root}"
    daemon.call("cron.create", {"schedule": "30m", "prompt": "check the disk", "deliver": target})
    advance(daemon, 30 * MINUTE)
    delivered = me.wait_for(room, _from(bot, "Disk is 43% full."))
    assert delivered["content"]["m.relates_to"]["rel_type"] == "m.thread"
    assert delivered["content"]["m.relates_to"]["event_id"] == root


def test_messages_after_the_homeserver_restarts_are_answered(start, model, homeserver) -> None:
    daemon, bot, me, room = _owner_setup(start, model, homeserver)
    homeserver.stop()
    try:
        deadline = time.monotonic() + 30
        while _matrix_state(daemon) != "disconnected":  # and retrying, with backoff
            assert time.monotonic() < deadline, _matrix_state(daemon)
            time.sleep(0.1)
    finally:
        homeserver.start()
    wait_connected(daemon)
    model.push(reply("still here"))
    me.send(room, "are you there?")
    me.wait_for(room, _from(bot, "still here"), timeout=60)


def test_an_encrypted_room_is_read_and_answered_encrypted(start, model, homeserver) -> None:
    bot, me = homeserver.register(), homeserver.register()
    start_matrix_daemon(
        start, model.url, homeserver, bot, owners=[me.user_id], adapter={"encryption": True}
    )
    phone = EncryptedPhone(homeserver, me)
    try:
        room = _room_with_bot_joined(me, bot, phone.create_encrypted_room([bot.user_id]))
        model.push(reply("a secret answer"))
        phone.send(room, "a secret question")
        answer = phone.wait_for(room, lambda sender, body: sender == bot.user_id)
    finally:
        phone.close()
    assert answer == "a secret answer"
    users = [m for m in model.last_request["messages"] if m["role"] == "user"]
    assert "a secret question" in str(users[-1]["content"])
    # what the homeserver holds of the bot's answer is ciphertext only
    recent = me.api("GET", f"/rooms/{quote(room, safe='')}/messages?dir=b&limit=20")["chunk"]
    from_bot = [e for e in recent if e["sender"] == bot.user_id and e["type"].startswith("m.room.")]
    assert any(e["type"] == "m.room.encrypted" for e in from_bot)
    assert not any(e["type"] == "m.room.message" for e in from_bot)


def test_a_message_in_a_thread_is_answered_in_that_thread(start, model, homeserver) -> None:
    _daemon, bot, me, room = _owner_setup(start, model, homeserver)
    model.push(reply("first answer"), reply("answer in the thread"))
    root = me.send(room, "start a topic")
    me.wait_for(room, _from(bot, "first answer"))
    thread = {"rel_type": "m.thread", "event_id": root}
    me.send(room, "more on that", **{"m.relates_to": thread})
    answer = me.wait_for(room, _from(bot, "answer in the thread"))
    assert answer["content"]["m.relates_to"]["rel_type"] == "m.thread"
    assert answer["content"]["m.relates_to"]["event_id"] == root


def test_the_bot_is_typing_while_a_turn_runs(start, model, homeserver) -> None:
    _daemon, bot, me, room = _owner_setup(start, model, homeserver)
    model.push(reply("took a while", delay=3.0))
    me.send(room, "think hard")
    me.wait_for(room, _from(bot, "took a while"))
    assert (room, bot.user_id) in me.typing


def test_a_long_answer_and_a_file_arrive_as_parts_and_an_upload(start, model, homeserver) -> None:
    _daemon, bot, me, room = _owner_setup(start, model, homeserver)
    picture = short_tmpdir("mxm-") / "chart.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    long = "\n\n".join(f"paragraph {i} " + "words " * 60 for i in range(30))
    model.push(reply(f"{long}\nMEDIA:{picture}"))
    me.send(room, "report please")
    parts = [me.wait_for(room, _from(bot, f"({i}/")) for i in (1, 2, 3)]
    assert all(len(p["content"]["body"]) <= 4000 for p in parts)
    image = me.wait_for(room, lambda e: e["content"].get("msgtype") == "m.image")
    assert image["content"]["body"] == "chart.png"
    assert image["content"]["url"].startswith("mxc://")
    assert image["content"]["info"]["mimetype"] == "image/png"


PNG = base64.b64decode(  # one white pixel
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def _image_seen_by_model(model: ScriptedModelServer) -> str:
    """The data URL of the image in the model's last user message."""
    parts = model.last_request["messages"][-1]["content"]
    return str(next(p["image_url"]["url"] for p in parts if p.get("type") == "image_url"))


def _kept(daemon: DaemonProcess) -> list[Path]:
    return list((daemon.home / "gateway" / "media" / "matrix").iterdir())


def test_a_picture_sent_in_the_room_reaches_the_model_as_an_image(start, model, homeserver) -> None:
    daemon, bot, me, room = _owner_setup(start, model, homeserver)
    uri = me.upload(PNG, "image/png", "dot.png")
    model.push(reply("a white dot"))
    info = {"mimetype": "image/png", "size": len(PNG)}
    me.send(room, "what is this?", msgtype="m.image", url=uri, info=info, filename="dot.png")
    me.wait_for(room, _from(bot, "a white dot"))
    assert _image_seen_by_model(model) == "data:image/png;base64," + base64.b64encode(PNG).decode()
    parts = model.last_request["messages"][-1]["content"]
    assert {"type": "text", "text": "what is this?"} in parts  # the caption
    [kept] = _kept(daemon)
    assert kept.read_bytes() == PNG and kept.name.endswith("dot.png")


def test_an_invite_from_someone_not_admitted_is_not_joined(start, model, homeserver) -> None:
    daemon, bot, _me, _room = _owner_setup(start, model, homeserver)
    stranger = homeserver.register()
    room = stranger.create_room([bot.user_id], name="not yours")
    deadline = time.monotonic() + 30
    while f"invite to {room} from {stranger.user_id} not accepted" not in daemon.log():
        assert time.monotonic() < deadline, daemon.log()[-2000:]
        time.sleep(0.1)
    assert bot.user_id not in stranger.members(room)


def test_a_strangers_direct_invite_is_not_joined_when_strangers_are_ignored(
    start, model, homeserver
) -> None:
    bot, me = homeserver.register(), homeserver.register()
    daemon = start_matrix_daemon(
        start,
        model.url,
        homeserver,
        bot,
        owners=[me.user_id],
        gateway={"unauthorized_dm_behavior": "ignore"},
    )
    _room_with_bot(me, bot)  # the owner's invite is still joined
    stranger = homeserver.register()
    direct = stranger.create_room([bot.user_id], is_direct=True)
    deadline = time.monotonic() + 30
    while f"invite to {direct} from {stranger.user_id} not accepted" not in daemon.log():
        assert time.monotonic() < deadline, daemon.log()[-2000:]
        time.sleep(0.1)
    assert bot.user_id not in stranger.members(direct)


def test_in_a_group_room_only_messages_that_mention_the_agent_are_answered(
    start, model, homeserver
) -> None:
    bot, me, friend = homeserver.register(), homeserver.register(), homeserver.register()
    start_matrix_daemon(start, model.url, homeserver, bot, owners=[me.user_id, friend.user_id])
    room = me.create_room([bot.user_id, friend.user_id], name="team")
    friend.join(room)
    _room_with_bot_joined(me, bot, room)
    model.push(reply("answered the mention"))
    me.send(room, "lunch at noon, everyone?")
    me.send(room, f"{bot.user_id}: how much disk is left?")
    me.wait_for(room, _from(bot, "answered the mention"))
    asked = [m for r in model.requests for m in r["messages"] if m["role"] == "user"]
    assert len(model.requests) == 1
    assert "how much disk is left?" in str(asked[-1]["content"])
    assert bot.user_id not in str(asked[-1]["content"])


def test_a_picture_in_an_encrypted_room_reaches_the_model_decrypted(
    start, model, homeserver
) -> None:
    bot, me = homeserver.register(), homeserver.register()
    adapter = {"encryption": True}
    daemon = start_matrix_daemon(
        start, model.url, homeserver, bot, owners=[me.user_id], adapter=adapter
    )
    phone = EncryptedPhone(homeserver, me)
    try:
        room = _room_with_bot_joined(me, bot, phone.create_encrypted_room([bot.user_id]))
        model.push(reply("a secret dot"))
        phone.send_file(room, PNG, "image/png", "dot.png")
        phone.wait_for(room, lambda sender, body: sender == bot.user_id)
    finally:
        phone.close()
    assert _image_seen_by_model(model) == "data:image/png;base64," + base64.b64encode(PNG).decode()
    [kept] = _kept(daemon)
    assert kept.read_bytes() == PNG


def test_a_revoked_access_token_stops_the_adapter_with_the_reason(start, model, homeserver) -> None:
    daemon, bot, me, room = _owner_setup(start, model, homeserver)
    bot.api("POST", "/logout", {})
    me.send(room, "wake the long-poll")  # its next sync is the one refused
    deadline = time.monotonic() + 30
    while not _matrix_state(daemon).startswith("error"):
        assert time.monotonic() < deadline, _matrix_state(daemon)
        time.sleep(0.1)
    assert "M_UNKNOWN_TOKEN" in _matrix_state(daemon)
    status = run_hermesctl(["--socket", str(daemon.socket), "gateway", "status"])
    assert "M_UNKNOWN_TOKEN" in status.stdout


REACTIONS_PLUGIN = """
import json

def register(ctx):
    def platform_event(platform, event_type, payload):
        with open("EVENTS", "a") as f:
            f.write(json.dumps([platform, event_type, payload]) + "\\n")

    ctx.register_hook("gateway_platform_event", platform_event)
"""


def test_a_reaction_in_the_room_is_a_gateway_platform_event(start, model, homeserver) -> None:
    home = short_tmpdir("mxh-")
    events = home / "events"
    write_plugin(home / "plugins", "mxhooks", REACTIONS_PLUGIN.replace("EVENTS", str(events)))
    bot, me = homeserver.register(), homeserver.register()
    start_matrix_daemon(start, model.url, homeserver, bot, owners=[me.user_id], home=home)
    room = _room_with_bot(me, bot)
    model.push(reply("here you are"))
    me.send(room, "hello")
    answer = me.wait_for(room, _from(bot, "here you are"))
    reaction = {"m.relates_to": {"rel_type": "m.annotation", "event_id": answer["event_id"]}}
    reaction["m.relates_to"]["key"] = "👍"
    me.api("PUT", f"/rooms/{quote(room, safe='')}/send/m.reaction/r{time.time_ns()}", reaction)
    first = written_lines(events, "a gateway_platform_event")[0]
    [platform, kind, payload] = json.loads(first)
    assert (platform, kind) == ("matrix", "reaction")
    assert payload == {
        "chat_id": room,
        "message_id": answer["event_id"],
        "user_id": me.user_id,
        "new_reaction": ["👍"],
        "old_reaction": [],
    }


def test_a_clarify_question_is_answered_by_the_next_message_in_the_room(
    start, model, homeserver
) -> None:
    _daemon, bot, me, room = _owner_setup(start, model, homeserver)
    question = {"question": "Which target?", "choices": ["staging", "prod"]}
    model.push(call_tools(tool_call("clarify", question)), reply("deploying"))
    me.send(room, "deploy it")
    asked = me.wait_for(room, _from(bot, "Which target?"))
    assert "1. staging" in asked["content"]["body"] and "2. prod" in asked["content"]["body"]
    me.send(room, "2")
    me.wait_for(room, _from(bot, "deploying"))
    sent = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert json.loads(sent["content"])["user_response"] == "prod"
    edited = me.wait_for(room, lambda e: "m.new_content" in e["content"])
    assert edited["content"]["m.relates_to"]["event_id"] == asked["event_id"]
    assert "prod" in edited["content"]["m.new_content"]["body"]


def test_the_agent_may_log_in_with_a_password_file(start, model, homeserver) -> None:
    bot, me = homeserver.register(), homeserver.register()
    config = model_config(model.url) + matrix_config(
        homeserver, bot, owners=[me.user_id], password=True
    )
    daemon = start(config=config)
    assert wait_connected(daemon)["state"] == "connected"
    room = _room_with_bot(me, bot)
    model.push(reply("logged in with a password"))
    me.send(room, "how did you log in?")
    me.wait_for(room, _from(bot, "logged in with a password"))


def test_an_invite_sent_while_the_daemon_was_stopped_is_joined_at_start(
    start, model, homeserver
) -> None:
    bot, me = homeserver.register(), homeserver.register()
    room = me.create_room([bot.user_id])
    start_matrix_daemon(start, model.url, homeserver, bot, owners=[me.user_id])
    _room_with_bot_joined(me, bot, room)
    model.push(reply("joined late"))
    me.send(room, "you there?")
    me.wait_for(room, _from(bot, "joined late"))
