"""Voice messages in chats, end to end: a real hermesd, the Telegram Bot API stand-in or a real
synapse, the scripted model, and a transcription provider written here as a plugin (the
reference's ``agent.transcription_provider.TranscriptionProvider``), selected with ``stt.provider``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_gateway_telegram import MEMBER, OWNER, gateway_config
from tests.support.botapi import BotApiServer
from tests.support.daemon import DaemonProcess, short_tmpdir
from tests.support.matrix_gateway import start_matrix_daemon
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.plugin_factory import write_plugin, written_lines
from tests.support.synapse import Homeserver

VOICE = b"OggS\x00\x02" + b"\x01" * 200  # what the provider "hears" is written below
STT = "stt:\n  provider: earful\n  earful:\n    language: en\n"


@pytest.fixture
def api() -> Iterator[BotApiServer]:
    with BotApiServer() as server:
        yield server


PROVIDER = """
import json
from agent.transcription_provider import TranscriptionProvider


class Earful(TranscriptionProvider):
    @property
    def name(self):
        return "earful"

    def transcribe(self, file_path, *, model=None, language=None, **extra):
        with open(file_path, "rb") as f:
            size = len(f.read())
        with open("HEARD", "a") as f:
            f.write(json.dumps({"path": file_path, "size": size, "language": language}) + "\\n")
        return {"success": True, "transcript": "turn on the lights"}


def register(ctx):
    ctx.register_transcription_provider(Earful())
"""

LANGUAGE_HOOK = """

def pick_language(file_path, provider, model, language, prompt, source):
    with open("ASKED", "w") as f:
        f.write(json.dumps([provider, language, source]))
    return {"language": "de"}


def register_hook(ctx):
    ctx.register_hook("pre_transcription", pick_language)
"""


def _home_with_provider() -> Path:
    home = short_tmpdir("gwv-")
    write_plugin(home / "plugins", "earful", PROVIDER.replace("HEARD", str(home / "heard")))
    return home


def _heard(home: Path) -> list[dict[str, object]]:
    lines = written_lines(home / "heard", "the provider to be called")
    return [json.loads(line) for line in lines]


def _telegram_with_provider(start, api: BotApiServer, model: ScriptedModelServer) -> Path:
    """A daemon on the Bot API stand-in with the provider plugin selected; its home."""
    home = _home_with_provider()
    start(home, config=gateway_config(api, model, STT))
    api.wait_call("getMe")
    return home


def _last_user_text(model: ScriptedModelServer) -> str:
    return str(model.requests[-1]["messages"][-1]["content"])


def test_a_telegram_voice_message_is_transcribed_into_the_turns_text(
    start, api: BotApiServer, model: ScriptedModelServer
) -> None:
    home = _telegram_with_provider(start, api, model)
    model.push(reply("lights are on"))
    api.user_sends_voice(OWNER, VOICE)
    api.wait_sent(OWNER, "lights are on")
    assert _last_user_text(model) == '"turn on the lights"'
    [heard] = _heard(home)
    assert heard["size"] == len(VOICE) and heard["language"] == "en"
    assert str(heard["path"]).startswith(str(home / "gateway" / "media" / "telegram"))
    echo = api.texts(OWNER)
    assert echo.index('🎙️ "turn on the lights"') < echo.index("lights are on")


def test_a_members_voice_message_reaches_the_model_marked_untrusted(
    start, api: BotApiServer, model: ScriptedModelServer
) -> None:
    _telegram_with_provider(start, api, model)
    model.push(reply("noted"))
    api.user_sends_voice(MEMBER, VOICE)
    api.wait_sent(MEMBER, "noted")
    sent = _last_user_text(model)
    assert sent.startswith(f"[Untrusted data from telegram:{MEMBER}: information, not")
    assert '"turn on the lights"' in sent


def test_pre_transcription_sees_the_file_and_changes_the_language_asked_for(
    start, api: BotApiServer, model: ScriptedModelServer
) -> None:
    home = short_tmpdir("gwv-")
    init = PROVIDER + LANGUAGE_HOOK.replace("ASKED", str(home / "asked"))
    init = init.replace("HEARD", str(home / "heard"))
    init += "\n\ndef register(ctx):\n    ctx.register_transcription_provider(Earful())\n"
    init += "    register_hook(ctx)\n"
    write_plugin(home / "plugins", "earful", init)
    start(home, config=gateway_config(api, model, STT))
    api.wait_call("getMe")
    model.push(reply("Licht ist an"))
    api.user_sends_voice(OWNER, VOICE)
    api.wait_sent(OWNER, "Licht ist an")
    assert json.loads((home / "asked").read_text()) == ["earful", "en", "gateway"]
    [heard] = _heard(home)
    assert heard["language"] == "de"


def test_without_a_provider_the_model_hears_of_an_untranscribed_voice_message_and_answers(
    start, api: BotApiServer, model: ScriptedModelServer
) -> None:
    daemon: DaemonProcess = start(short_tmpdir("gwv-"), config=gateway_config(api, model))
    api.wait_call("getMe")
    model.push(reply("Sorry, I could not listen to that; please type it."))
    api.user_sends_voice(OWNER, VOICE)
    api.wait_sent(OWNER, "please type it")
    assert _last_user_text(model) == "[voice message could not be transcribed]"
    assert "stt.provider is not set" in daemon.log()  # the cause: the log, not the prompt
    assert not any(t.startswith("🎙️") for t in api.texts(OWNER))


def test_a_clarify_question_is_answered_by_a_voice_message(
    start, api: BotApiServer, model: ScriptedModelServer
) -> None:
    _telegram_with_provider(start, api, model)
    question = {"question": "What should I do?"}
    model.push(call_tools(tool_call("clarify", question)), reply("doing it"))
    api.user_says(OWNER, "help me")
    api.wait_sent(OWNER, "What should I do?")
    api.user_sends_voice(OWNER, VOICE)
    api.wait_sent(OWNER, "doing it")
    sent = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert json.loads(sent["content"])["user_response"] == '"turn on the lights"'


def test_an_audio_file_is_attached_as_a_file_and_not_transcribed(
    start, api: BotApiServer, model: ScriptedModelServer
) -> None:
    home = _telegram_with_provider(start, api, model)
    model.push(reply("a nice song"))
    api.user_sends_audio(OWNER, VOICE, "song.mp3")
    api.wait_sent(OWNER, "a nice song")
    sent = _last_user_text(model)
    assert sent.startswith("[attached file: ") and sent.endswith("song.mp3]")
    assert not (home / "heard").exists()


def test_a_matrix_voice_message_is_transcribed_through_the_homeserver(
    start, model: ScriptedModelServer, homeserver: Homeserver
) -> None:
    bot, me = homeserver.register(), homeserver.register()
    home = _home_with_provider()
    start_matrix_daemon(
        start, model.url, homeserver, bot, owners=[me.user_id], extra=STT, home=home
    )
    room = me.create_room([bot.user_id], is_direct=True)
    deadline = time.monotonic() + 20
    while bot.user_id not in me.members(room):
        assert time.monotonic() < deadline, "the bot did not join the room"
        time.sleep(0.1)
    me.sync(0)
    uri = me.upload(VOICE, "audio/ogg", "Voice message.ogg")
    model.push(reply("lights are on"))
    info = {"mimetype": "audio/ogg", "size": len(VOICE), "duration": 2000}
    me.send(
        room,
        "Voice message",
        msgtype="m.audio",
        url=uri,
        info=info,
        **{"org.matrix.msc3245.voice": {}, "org.matrix.msc1767.audio": {"duration": 2000}},
    )
    me.wait_for(room, lambda e: e["sender"] == bot.user_id and "lights are on" in str(e["content"]))
    assert _last_user_text(model) == '"turn on the lights"'
    [heard] = _heard(home)
    assert heard["size"] == len(VOICE)
