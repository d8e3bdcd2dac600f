"""``image_generate`` (toolset ``image_gen``) and ``text_to_speech`` (toolset ``tts``): tools
backed by the image-generation and text-to-speech providers plugins register.

hermesd has no built-in image or speech backend, so each tool is available only when its config
key names a registered provider that says it is available: ``image_gen.provider`` (as in the
reference, an unset key never opts a user into a backend, even the only one registered) and
``tts.provider``. ``hermesctl tools list`` shows why a tool is not available.

A provider is plugin code: it runs on a worker thread with a timeout (``image_gen.timeout``,
``tts.timeout``), never on the event loop, and whatever it raises or returns wrongly becomes an
error result (the traceback goes to the log). Before speech is made, ``pre_tts_synthesis``
callbacks see the text (`approved_script`): one may refuse it or rewrite it, and a rewrite must
pass every callback again unchanged, or nothing is synthesised. Files land under
``$HERMES_HOME/cache/images/`` and ``$HERMES_HOME/cache/audio/``. Results have the reference's
shapes: ``{"success", "image", "model", "prompt", "aspect_ratio", "modality", "provider"}`` and
``{"success", "file_path", "media_tag", "provider", "voice_compatible"}``; failures
``{"success": false, "error", ...}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.runtime.hooks import HookBus
from hermesd.tools.checks import available_unless
from hermesd.tools.registry import BUILTIN

if TYPE_CHECKING:
    from hermesd.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

Providers = Callable[[str], list[Any]]  # kind ("image_gen", "tts") -> registered provider objects

ASPECT_RATIOS = ("landscape", "square", "portrait")
MAX_PROMPT = 8000  # characters of an image prompt
MAX_REFERENCES = 8
TTS_FORMATS = ("mp3", "wav", "ogg", "opus", "flac", "aac", "pcm")

IMAGE_SCHEMA: dict[str, Any] = {
    "name": "image_generate",
    "description": (
        "Generate an image from a text prompt, or edit an existing image when image_url is "
        "given and the configured backend supports editing. The backend and model are chosen "
        "by the user's configuration. The result's 'image' field holds the image's URL or "
        "absolute file path; mention it in your reply to show the image."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "prompt": {
                "type": "string",
                "description": "A detailed description of the image, or of the edit to make",
            },
            "aspect_ratio": {
                "type": "string",
                "enum": list(ASPECT_RATIOS),
                "description": "landscape (16:9), square (1:1) or portrait (9:16)",
                "default": "landscape",
            },
            "image_url": {
                "type": "string",
                "description": "Optional image (URL or absolute path) to edit",
            },
            "reference_image_urls": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Optional style or composition reference images",
            },
        },
        "required": ["prompt"],
    },
}

TTS_SCHEMA: dict[str, Any] = {
    "name": "text_to_speech",
    "description": (
        "Turn text into spoken audio with the user's configured voice. Returns the audio "
        "file's path and a MEDIA: tag a client can deliver as audio."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "The text to speak"},
            "output_path": {
                "type": "string",
                "description": (
                    "Optional file name for the audio, kept under $HERMES_HOME/cache/audio/ "
                    "(default: a timestamped name)"
                ),
            },
        },
        "required": ["text"],
    },
}


def stamp(prefix: str, ext: str) -> str:
    """A fresh file name: ``<prefix>_<time>_<id>.<ext>``."""
    return f"{prefix}_{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:8]}.{ext}"


def _available(provider: Any) -> bool:
    check = getattr(provider, "is_available", None)
    try:
        return True if check is None else bool(check())
    except Exception:  # a broken provider is an unavailable one
        log.warning("provider %r: is_available() raised", provider, exc_info=True)
        return False


def choose(
    config: Any, providers: Providers, kind: str, only_one: bool = False, section: str = ""
) -> Any:
    """The provider ``<section or kind>.provider`` selects, or the sentence saying why there is
    none; with ``only_one``, an unset key picks the one available provider (video_gen does so)."""
    key = f"{section or kind}.provider"
    wanted = str(config.get(key) or "").strip()
    registered = providers(kind)
    names = ", ".join(sorted(str(getattr(p, "name", "?")) for p in registered))
    if not wanted and only_one:
        usable = [p for p in registered if _available(p)]
        if len(usable) == 1:
            return usable[0]
    if not wanted:
        offer = f" (registered: {names})" if names else " (no plugin registered one)"
        return f"{key} is not set{offer}"
    for provider in registered:
        if str(getattr(provider, "name", "")).strip().lower() == wanted.lower():
            if _available(provider):
                return provider
            return f"the {kind} provider '{wanted}' says it is not available now"
    return f"{key} names '{wanted}', which no loaded plugin registered"


def _text(config: Any, key: str) -> str | None:
    value = config.get(key)
    return value.strip() if isinstance(value, str) and value.strip() else None


class ProviderTools:
    """The two tools' handlers and checks, reading the configuration of the moment."""

    def __init__(
        self,
        config: Callable[[], Any],
        providers: Providers,
        home: Path,
        hooks: HookBus | None = None,
    ) -> None:
        self.config = config
        self.providers = providers
        self.hooks = hooks
        self.images = home / "cache" / "images"
        self.audio = home / "cache" / "audio"

    def unavailable(self, kind: str) -> str | None:
        """Why the ``kind`` tool cannot run now, or None."""
        chosen = choose(self.config(), self.providers, kind)
        return chosen if isinstance(chosen, str) else None

    # --- image_generate --------------------------------------------------------------------

    async def image(self, args: dict[str, Any], **_: Any) -> str:
        """The ``image_generate`` handler."""
        prompt, aspect = args.get("prompt"), args.get("aspect_ratio") or "landscape"
        if not isinstance(prompt, str) or not prompt.strip():
            return _image_error("'prompt' must be a non-empty string", "bad_arguments")
        if len(prompt) > MAX_PROMPT:
            return _image_error(f"'prompt' is longer than {MAX_PROMPT} characters", "bad_arguments")
        # the reference coerces an unknown aspect ratio to the default rather than failing
        aspect = aspect.strip().lower() if isinstance(aspect, str) else "landscape"
        aspect = aspect if aspect in ASPECT_RATIOS else "landscape"
        kwargs: dict[str, Any] = {"prompt": prompt, "aspect_ratio": aspect}
        image_url, refs = args.get("image_url"), args.get("reference_image_urls")
        if image_url is not None and not isinstance(image_url, str):
            return _image_error("'image_url' must be a string", "bad_arguments")
        if isinstance(refs, str):
            refs = [refs]
        if refs is not None and not (
            isinstance(refs, list) and all(isinstance(r, str) for r in refs)
        ):
            return _image_error("'reference_image_urls' must be a list of strings", "bad_arguments")
        if image_url and image_url.strip():
            kwargs["image_url"] = image_url.strip()
        if cleaned := [r.strip() for r in refs or [] if r.strip()][:MAX_REFERENCES]:
            kwargs["reference_image_urls"] = cleaned
        config = self.config()
        if model := _text(config, "image_gen.model"):
            kwargs["model"] = model
        provider = await asyncio.to_thread(choose, config, self.providers, "image_gen")
        if isinstance(provider, str):
            return _image_error(provider, "provider_not_available")
        name = str(provider.name)
        timeout = float(config.get("image_gen.timeout"))
        result = await generate(provider, "image_gen", timeout, kwargs)
        if isinstance(result, ProviderFailure):
            return _image_error(result.message, result.kind, name)
        answer = await asyncio.to_thread(self._image_result, result, name, kwargs)
        return json.dumps(answer, ensure_ascii=False, default=str)  # a provider may put a Path in

    def _image_result(self, result: Any, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The provider's answer in the reference's shape; bytes it returned saved as a file."""
        if isinstance(result, bytes | bytearray):
            result = {"success": True, "image": bytes(result)}
        if not isinstance(result, dict):
            return _image_failure("the provider returned a non-dict result", "provider_contract")
        answer = dict(result)
        image = answer.get("image")
        if isinstance(image, bytes | bytearray):
            self.images.mkdir(parents=True, exist_ok=True)
            path = self.images / stamp("image", "png")
            path.write_bytes(bytes(image))
            answer["image"] = str(path)
        elif answer.get("success", True) and not isinstance(image, str):
            return _image_failure(
                "the provider's result has no 'image' (URL, path or bytes)", "provider_contract"
            )
        answer["success"] = bool(answer.get("success", True))
        if not answer["success"]:
            answer["image"] = None
            answer.setdefault("error", "image generation failed")
        answer.setdefault("model", kwargs.get("model", ""))
        answer.setdefault("prompt", kwargs["prompt"])
        answer.setdefault("aspect_ratio", kwargs["aspect_ratio"])
        answer.setdefault("modality", "image" if "image_url" in kwargs else "text")
        answer.setdefault("provider", name)
        return answer

    # --- text_to_speech --------------------------------------------------------------------

    async def speak(self, args: dict[str, Any], **_: Any) -> str:
        """The ``text_to_speech`` handler."""
        text, wanted_path = args.get("text"), args.get("output_path")
        if not isinstance(text, str) or not text.strip():
            return _tts_error("'text' must be a non-empty string")
        config = self.config()
        fmt = (_text(config, "tts.output_format") or "mp3").lower()
        fmt = fmt if fmt in TTS_FORMATS else "mp3"
        try:
            path = self._audio_path(wanted_path, fmt)
        except ValueError as exc:
            return _tts_error(str(exc))
        provider = await asyncio.to_thread(choose, config, self.providers, "tts")
        if isinstance(provider, str):
            return _tts_error(provider)
        name = str(provider.name)
        speed = config.get("tts.speed")
        kwargs: dict[str, Any] = {
            "voice": _text(config, "tts.voice"),
            "model": _text(config, "tts.model"),
            "speed": float(speed) if isinstance(speed, int | float) else None,
            "format": fmt,
        }
        text = text[: int(config.get("tts.max_text_length"))]  # over-long input is cut
        if self.hooks is not None and self.hooks.has("pre_tts_synthesis"):
            try:
                text = await approved_script(self.hooks, text, name)
            except ValueError as exc:
                return _tts_error(f"TTS synthesis refused: {exc}")
        timeout = float(config.get("tts.timeout"))
        try:
            await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
            written = await call(timeout, lambda: provider.synthesize(text, str(path), **kwargs))
            final = await asyncio.to_thread(self._audio_file, written, path)
        except TimeoutError:
            return _tts_error(f"TTS generation failed ({name}): no answer in {timeout:g}s")
        except Exception as exc:
            log.exception("tts provider %s failed", name)
            return _tts_error(f"TTS generation failed ({name}): {exc}")
        if final is None:
            return _tts_error(f"TTS generation produced no output (provider: {name})")
        voice = bool(getattr(provider, "voice_compatible", False)) and final.suffix == ".ogg"
        media = f"MEDIA:{final}"
        return json.dumps(
            {
                "success": True,
                "file_path": str(final),
                "media_tag": f"[[audio_as_voice]]\n{media}" if voice else media,
                "provider": name,
                "voice_compatible": voice,
            },
            ensure_ascii=False,
        )

    def _audio_path(self, wanted: Any, fmt: str) -> Path:
        """Where the audio goes: always under cache/audio/ (the model picks at most a name)."""
        if wanted is None or wanted == "":
            return self.audio / stamp("tts", fmt)
        if not isinstance(wanted, str):
            raise ValueError("'output_path' must be a string")
        path = Path(wanted)
        if path.is_absolute():
            path = path.resolve()
            if not path.is_relative_to(self.audio.resolve()):
                raise ValueError(f"'output_path' must be under {self.audio}")
            return path
        path = (self.audio / path).resolve()
        if not path.is_relative_to(self.audio.resolve()):
            raise ValueError(f"'output_path' must stay under {self.audio}")
        return path

    def _audio_file(self, written: Any, path: Path) -> Path | None:
        """The file the provider produced (bytes it returned are written to ``path``)."""
        if isinstance(written, bytes | bytearray):
            path.write_bytes(bytes(written))
        elif isinstance(written, str) and written:
            path = Path(written)
        if not path.is_file() or path.stat().st_size == 0:
            return None
        return path


async def approved_script(hooks: HookBus, text: str, provider: str) -> str:
    """The text ``pre_tts_synthesis`` callbacks let through (the reference's policy): each
    non-None return must be ``{"text": t}`` (t not blank: the text from then on) or
    ``{"action": "block", "message": m}``; anything else, a block, or a rewrite the callbacks
    rewrite again raises ValueError with the reason."""

    async def apply(script: str) -> str:
        result = script
        for value in await hooks.invoke("pre_tts_synthesis", text=script, provider=provider):
            if not isinstance(value, dict):
                raise ValueError("a pre_tts_synthesis callback returned no directive")
            if value.get("action") == "block" and set(value) <= {"action", "message"}:
                raise ValueError(str(value.get("message") or "a plugin blocked the speech"))
            rewritten = value.get("text")
            if set(value) != {"text"} or not isinstance(rewritten, str) or not rewritten.strip():
                raise ValueError("a pre_tts_synthesis callback returned an invalid directive")
            result = rewritten
        return result

    approved = await apply(text)
    if approved != text and await apply(approved) != approved:
        raise ValueError("the pre_tts_synthesis callbacks do not agree on the text")
    return approved


async def call(timeout: float, fn: Callable[[], Any]) -> Any:
    """``fn()`` (plugin code) on a worker thread, at most ``timeout`` seconds."""
    return await asyncio.wait_for(asyncio.to_thread(fn), timeout)


@dataclass(frozen=True)
class ProviderFailure:
    """Why a provider's ``generate`` gave no result: its message and ``error_type``."""

    message: str
    kind: str  # "timeout" or "provider_exception"


async def generate(provider: Any, kind: str, timeout: float, kwargs: dict[str, Any]) -> Any:
    """``provider.generate(**kwargs)`` (plugin code) off the loop within ``timeout`` seconds;
    a `ProviderFailure` when it timed out or raised (the traceback goes to the log)."""
    name = str(provider.name)
    try:
        return await call(timeout, lambda: provider.generate(**kwargs))
    except TimeoutError:
        return ProviderFailure(f"'{name}' did not answer in {timeout:g}s", "timeout")
    except Exception as exc:
        log.exception("%s provider %s failed", kind, name)
        return ProviderFailure(f"Provider '{name}' error: {exc}", "provider_exception")


def _image_failure(error: str, kind: str, provider: str = "") -> dict[str, Any]:
    return {
        "success": False,
        "image": None,
        "error": error,
        "error_type": kind,
        "provider": provider,
    }


def _image_error(error: str, kind: str, provider: str = "") -> str:
    return json.dumps(_image_failure(error, kind, provider))


def _tts_error(error: str) -> str:
    return json.dumps({"success": False, "error": error}, ensure_ascii=False)


def register_provider_tools(
    tools: ToolRegistry, config: Callable[[], Any], providers: Providers, home: Path
) -> ProviderTools:
    """Register ``image_generate`` (toolset ``image_gen``) and ``text_to_speech`` (``tts``)."""
    made = ProviderTools(config, providers, home, tools.hooks)
    tools.register(
        "image_generate",
        "image_gen",
        IMAGE_SCHEMA,
        made.image,
        check_fn=lambda: available_unless(made.unavailable("image_gen")),
        is_async=True,
        emoji="🎨",
        owner=BUILTIN,
        check_arguments=False,
    )
    tools.register(
        "text_to_speech",
        "tts",
        TTS_SCHEMA,
        made.speak,
        check_fn=lambda: available_unless(made.unavailable("tts")),
        is_async=True,
        emoji="🔊",
        owner=BUILTIN,
        check_arguments=False,
    )
    return made
