"""``image_generate`` and ``text_to_speech`` on a real daemon, backed by a plugin's providers.

A directory plugin in the test's HERMES_HOME registers image-gen providers (one answering with
a small PNG's bytes, one that raises) and TTS providers (one returning audio bytes, one writing
the file it was given as the reference's contract says, one that raises). The scripted model
calls the tools through real turns; each provider records the arguments it got in a file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermesctl.client import Client
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, tool_call
from tests.support.plugin_factory import write_plugin
from tests.support.tool_turns import fresh_tool_turn

Start = Callable[..., DaemonProcess]
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06"

PLUGIN = """
import json
import time
from pathlib import Path

HERE = Path(__file__).parent
PNG = PNG_BYTES


def record(kind, **kwargs):
    with open(HERE / "calls.jsonl", "a") as out:
        out.write(json.dumps({"kind": kind, **kwargs}) + "\\n")


class Pixels:
    def __init__(self, name, broken=False):
        self.name, self.broken = name, broken

    def is_available(self):
        return True

    def generate(self, prompt, aspect_ratio="landscape", **kwargs):
        record("image", prompt=prompt, aspect_ratio=aspect_ratio, **kwargs)
        if self.broken:
            raise RuntimeError("the GPU is on fire")
        if self.name == "sleepy":
            time.sleep(4)
        if self.name == "odd":
            return ["not", "a", "dict"]
        return {"success": True, "image": PNG, "model": kwargs.get("model", "px-1")}


class Voice:
    def __init__(self, name, mode):
        self.name, self.mode = name, mode

    def synthesize(self, text, output_path, *, voice=None, model=None, speed=None,
                   format="mp3", **extra):
        record("tts", text=text, output_path=output_path, voice=voice, format=format)
        if self.mode == "broken":
            raise RuntimeError("the speaker has laryngitis")
        if self.mode == "bytes":
            return b"ID3" + text.encode() * 4
        Path(output_path).write_bytes(b"RIFF" + text.encode())
        return output_path


class Reel:
    name = "reel"

    def generate(self, prompt, **kwargs):
        record("video", prompt=prompt, **kwargs)
        if prompt == "explode":
            raise RuntimeError("the film melted")
        return {"success": True, "video": b"MP4" + prompt.encode(), "model": "reel-1"}


def register(ctx):
    ctx.register_video_gen_provider(Reel())
    ctx.register_image_gen_provider(Pixels("pixels"))
    ctx.register_image_gen_provider(Pixels("smoky", broken=True))
    ctx.register_image_gen_provider(Pixels("sleepy"))
    ctx.register_image_gen_provider(Pixels("odd"))
    ctx.register_tts_provider(Voice("voice", "bytes"))
    ctx.register_tts_provider(Voice("filevoice", "file"))
    ctx.register_tts_provider(Voice("hoarse", "broken"))
""".replace("PNG_BYTES", repr(PNG))


def _home() -> Path:
    home = short_tmpdir("provtools-")
    write_plugin(home / "plugins", "studio", PLUGIN)
    return home


def _config(model: ScriptedModelServer, image: str = "", tts: str = "") -> str:
    text = f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
    if image:
        text += f"image_gen:\n  provider: {image}\n  model: px-9\n"
    if tts:
        text += f"tts:\n  provider: {tts}\n  voice: alto\n  output_format: wav\n"
    return text


def _calls(home: Path) -> list[dict[str, Any]]:
    path = home / "plugins" / "studio" / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _turn(model: ScriptedModelServer, client: Client, *calls: Any) -> list[Any]:
    """One turn in a new session, the model making ``calls``; the tool results, decoded."""
    return [json.loads(r) for r in fresh_tool_turn(model, client, *calls, message="make things")]


def _tools(d: DaemonProcess) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in d.call("tools.list")["tools"]}


def test_image_generate_saves_the_providers_png_and_answers_in_the_reference_shape(
    start: Start, model: ScriptedModelServer
) -> None:
    home = _home()
    d = start(home, config=_config(model, image="pixels"))
    assert _tools(d)["image_generate"]["available"] is True
    args = {"prompt": "a red fox", "aspect_ratio": "PORTRAIT", "image_url": " /tmp/src.png "}
    with d.client() as client:
        [result] = _turn(model, client, tool_call("image_generate", args))
    image = Path(result["image"])
    assert image.parent == home / "cache" / "images" and image.suffix == ".png"
    assert image.read_bytes() == PNG
    assert result == {
        "success": True,
        "image": str(image),
        "model": "px-9",
        "prompt": "a red fox",
        "aspect_ratio": "portrait",
        "modality": "image",
        "provider": "pixels",
    }
    [call] = _calls(home)
    assert call == {
        "kind": "image",
        "prompt": "a red fox",
        "aspect_ratio": "portrait",
        "model": "px-9",
        "image_url": "/tmp/src.png",
    }
    # an aspect ratio the reference does not know falls back to landscape, as there
    with d.client() as client:
        [result] = _turn(
            model, client, tool_call("image_generate", {"prompt": "owl", "aspect_ratio": "wide"})
        )
    assert result["aspect_ratio"] == "landscape" and result["modality"] == "text"
    info = d.call("plugins.info", {"name": "studio"})
    statuses = {p["name"]: p["status"] for p in info["providers"]}
    assert statuses["pixels"].startswith("in use: image_generate calls it")
    assert statuses["voice"].startswith("in use: text_to_speech calls it")


def test_text_to_speech_writes_audio_under_the_cache_with_the_configured_voice(
    start: Start, model: ScriptedModelServer
) -> None:
    home = _home()
    d = start(home, config=_config(model, tts="voice"))
    assert _tools(d)["text_to_speech"]["available"] is True
    with d.client() as client:
        [result] = _turn(model, client, tool_call("text_to_speech", {"text": "good morning"}))
    path = Path(result["file_path"])
    assert path.parent == home / "cache" / "audio" and path.suffix == ".wav"
    assert path.read_bytes() == b"ID3" + b"good morning" * 4
    assert result == {
        "success": True,
        "file_path": str(path),
        "media_tag": f"MEDIA:{path}",
        "provider": "voice",
        "voice_compatible": False,
    }
    [call] = _calls(home)
    assert (call["voice"], call["format"], call["output_path"]) == ("alto", "wav", str(path))
    d.stop()
    # a provider that writes the file itself, and an output name the model chose
    d = start(home, config=_config(model, tts="filevoice"))
    with d.client() as client:
        [result] = _turn(
            model, client, tool_call("text_to_speech", {"text": "hi", "output_path": "greet.wav"})
        )
    assert result["file_path"] == str(home / "cache" / "audio" / "greet.wav")
    assert Path(result["file_path"]).read_bytes() == b"RIFFhi"


def test_without_a_selected_provider_the_tools_are_unavailable_and_say_why(
    start: Start, model: ScriptedModelServer
) -> None:
    home = _home()
    d = start(home, config=_config(model))
    tools = _tools(d)
    image, tts = tools["image_generate"], tools["text_to_speech"]
    assert image["available"] is False and tts["available"] is False
    # as in the reference, a registered provider is not used until the config names it
    assert (
        image["reason"] == "image_gen.provider is not set (registered: odd, pixels, sleepy, smoky)"
    )
    assert tts["reason"] == "tts.provider is not set (registered: filevoice, hoarse, voice)"
    out = run_hermesctl(["--socket", str(d.socket), "tools", "list"])
    assert "image_gen.provider is not set" in out.stdout
    d.stop()
    d = start(home, config=_config(model, image="nosuch", tts="nosuch"))
    reason = _tools(d)["image_generate"]["reason"]
    assert reason == "image_gen.provider names 'nosuch', which no loaded plugin registered"
    assert _calls(home) == []


def test_a_provider_that_raises_gives_a_clear_error_and_the_daemon_carries_on(
    start: Start, model: ScriptedModelServer
) -> None:
    home = _home()
    d = start(home, config=_config(model, image="smoky", tts="hoarse"))
    with d.client() as client:
        image, speech = _turn(
            model,
            client,
            tool_call("image_generate", {"prompt": "a kiln"}),
            tool_call("text_to_speech", {"text": "hello"}),
        )
    assert image == {
        "success": False,
        "image": None,
        "error": "Provider 'smoky' error: the GPU is on fire",
        "error_type": "provider_exception",
        "provider": "smoky",
    }
    assert speech == {
        "success": False,
        "error": "TTS generation failed (hoarse): the speaker has laryngitis",
    }
    assert "image_gen provider smoky failed" in d.log()
    assert "tts provider hoarse failed" in d.log()
    assert d.call("ping") is not None  # still serving


BAD = [
    ("image_generate", {}, "'prompt' must be a non-empty string"),
    ("image_generate", {"prompt": 7}, "'prompt' must be a non-empty string"),
    ("image_generate", {"prompt": "x" * 9000}, "longer than 8000"),
    ("image_generate", {"prompt": "x", "image_url": 3}, "'image_url' must be a string"),
    ("image_generate", {"prompt": "x", "reference_image_urls": [1]}, "list of strings"),
    ("text_to_speech", {"text": "   "}, "'text' must be a non-empty string"),
    ("text_to_speech", {"text": "hi", "output_path": "/etc/passwd"}, "must be under"),
    ("text_to_speech", {"text": "hi", "output_path": "../../x.wav"}, "must stay under"),
    ("text_to_speech", {"text": "hi", "output_path": 5}, "'output_path' must be a string"),
]


def test_bad_arguments_get_an_error_and_reach_no_provider(
    start: Start, model: ScriptedModelServer
) -> None:
    home = _home()
    d = start(home, config=_config(model, image="pixels", tts="filevoice"))
    with d.client() as client:
        results = _turn(model, client, *(tool_call(tool, args) for tool, args, _ in BAD))
    for (tool, _, wanted), result in zip(BAD, results, strict=True):
        assert result["success"] is False and wanted in result["error"], (tool, result)
    assert _calls(home) == []


def test_a_provider_over_its_timeout_or_answering_wrongly_gives_an_error_result(
    start: Start, model: ScriptedModelServer
) -> None:
    home = _home()
    config = _config(model, image="sleepy").replace("model: px-9\n", "timeout: 1\n")
    d = start(home, config=config)
    with d.client() as client:
        [result] = _turn(model, client, tool_call("image_generate", {"prompt": "a snail"}))
    assert result["success"] is False and result["error_type"] == "timeout", result
    assert result["error"] == "'sleepy' did not answer in 1s"
    d.stop()
    d = start(home, config=_config(model, image="odd"))
    with d.client() as client:
        [result] = _turn(model, client, tool_call("image_generate", {"prompt": "a snail"}))
    assert result["error_type"] == "provider_contract" and "non-dict" in result["error"]


def test_video_generate_uses_the_only_video_provider_and_saves_its_bytes(
    start: Start, model: ScriptedModelServer
) -> None:
    home = _home()
    d = start(home, config=_config(model))  # video_gen.provider unset: the only one is used
    assert _tools(d)["video_generate"]["available"] is True
    args = {"prompt": "waves", "duration": 5, "aspect_ratio": "9:16", "audio": True}
    bad = {"prompt": "waves", "duration": "long"}
    with d.client() as client:
        result, wrong, broken = _turn(
            model,
            client,
            tool_call("video_generate", args),
            tool_call("video_generate", bad),
            tool_call("video_generate", {"prompt": "explode"}),
        )
    video = Path(result["video"])
    assert video.parent == home / "cache" / "videos" and video.read_bytes() == b"MP4waves"
    assert result == {
        "success": True,
        "video": str(video),
        "model": "reel-1",
        "prompt": "waves",
        "modality": "text",
        "aspect_ratio": "9:16",
        "duration": 5,
        "provider": "reel",
    }
    assert wrong["error"] == "'duration' must be of type int"
    assert broken["error"] == "Provider 'reel' error: the film melted"
    calls = [c for c in _calls(home) if c["kind"] == "video"]
    assert calls[0] == {"kind": "video", **args} and len(calls) == 2
    d.stop()
    d = start(home, config=_config(model) + "video_gen:\n  provider: other\n")
    reason = _tools(d)["video_generate"]["reason"]
    assert reason == "video_gen.provider names 'other', which no loaded plugin registered"


SPEECH_GUARD = """
def guard(text, provider):
    if "forbidden" in text:
        return {"action": "block", "message": "no forbidden words aloud"}
    if "wobble" in text:
        return {"text": text + "!"}  # rewrites its own rewrite: never stable
    if "broken" in text:
        return ["not", "a", "directive"]
    spoken = text.replace("3", "three")
    return {"text": spoken} if spoken != text else None


def register(ctx):
    ctx.register_hook("pre_tts_synthesis", guard)
"""


def test_pre_tts_synthesis_rewrites_or_refuses_the_text_before_the_provider_hears_it(
    start: Start, model: ScriptedModelServer
) -> None:
    home = _home()
    write_plugin(home / "plugins", "speechguard", SPEECH_GUARD)
    d = start(home, config=_config(model, tts="voice"))
    say = [
        tool_call("text_to_speech", {"text": text})
        for text in ("take 3 steps", "say forbidden", "wobble", "broken", "plain words")
    ]
    with d.client() as client:
        rewritten, blocked, unstable, invalid, plain = _turn(model, client, *say)
    assert rewritten["success"] is True
    assert Path(rewritten["file_path"]).read_bytes() == b"ID3" + b"take three steps" * 4
    assert blocked == {
        "success": False,
        "error": "TTS synthesis refused: no forbidden words aloud",
    }
    assert unstable["success"] is False
    assert "do not agree on the text" in unstable["error"]
    assert invalid["success"] is False and "no directive" in invalid["error"]
    assert plain["success"] is True
    # the provider heard only what the callbacks let through
    assert sorted(c["text"] for c in _calls(home)) == ["plain words", "take three steps"]
