"""Voice messages: a chat's voice note becomes the text of the turn, through the transcription
provider a plugin registered (``ctx.register_transcription_provider``).

`Transcriber` picks the provider ``stt.provider`` names (hermesd has no built-in speech
recogniser, so an unset key means none), calls its ``transcribe(file_path, model=, language=)``
on a worker thread within ``stt.timeout`` (``model``/``language`` from the provider's own
``stt.<provider>`` section, then from ``pre_transcription`` callbacks), and turns whatever it
returns or raises into the reference's envelope ``{success, transcript, provider, error}``.
`Transcriber.enrich` puts the transcripts into a message's text the way the reference does: each
as a quoted line before the caption, or the neutral marker `NOT_TRANSCRIBED` when it failed (the
cause goes to the log only, so the model answers the person instead of repeating setup advice);
with ``stt.enabled`` off, a line naming the file. Only voice notes are transcribed (Telegram
``voice``, Matrix ``m.audio`` with the MSC3245 voice flag); an audio *file* stays an
attachment, as in the reference.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermesd.gateway.base import MessageEvent, MessageType
from hermesd.runtime.hooks import HookBus
from hermesd.tools.provider_tools import choose

log = logging.getLogger(__name__)

MAX_AUDIO = 25 * 1024 * 1024  # the reference's limit for one file sent to a provider
AUDIO_SUFFIXES = {".mp3", ".mp4", ".mpeg", ".mpga", ".m4a", ".wav", ".webm", ".ogg", ".oga"}
AUDIO_SUFFIXES |= {".opus", ".aac", ".flac"}
NOT_TRANSCRIBED = "[voice message could not be transcribed]"
_ASKED = ("model", "language", "prompt")  # what the provider is asked with


def is_voice(event: MessageEvent, index: int) -> bool:
    """Whether attachment ``index`` of ``event`` is a voice note to transcribe: the message is
    a voice message, or the attachment is audio in a message that is not an audio file or a
    document."""
    if event.message_type in (MessageType.AUDIO, MessageType.DOCUMENT):
        return False
    kind = event.media_types[index] if index < len(event.media_types) else ""
    return event.message_type == MessageType.VOICE or kind.startswith("audio/")


def failure(error: str, provider: str = "") -> dict[str, Any]:
    """The reference's failed-transcription envelope."""
    return {"success": False, "transcript": "", "error": error, "provider": provider}


@dataclass
class Transcriber:
    """Voice notes to text with the configured provider."""

    config: Callable[[], Any]  # the configuration of the moment
    providers: Callable[[str], list[Any]]  # kind -> registered provider objects
    hooks: HookBus | None = None  # for ``pre_transcription``

    async def transcribe(self, path: str) -> dict[str, Any]:
        """``{success, transcript, provider[, error]}`` for the audio file at ``path``."""
        problem = await asyncio.to_thread(_check_file, Path(path))
        if problem is not None:
            return failure(problem)
        config = self.config()
        provider = await asyncio.to_thread(
            choose, config, self.providers, "transcription", False, "stt"
        )
        if isinstance(provider, str):
            return failure(provider)
        name = str(provider.name).strip().lower()
        own = config.get(f"stt.{name}")
        own = own if isinstance(own, dict) else {}
        asked = await self._asked(path, name, own)
        timeout = float(config.get("stt.timeout"))
        try:
            result = await asyncio.wait_for(
                asyncio.to_thread(lambda: provider.transcribe(path, **asked)), timeout
            )
        except TimeoutError:
            return failure(f"STT plugin '{name}' did not answer in {timeout:g}s", name)
        except Exception as exc:
            log.exception("transcription provider %s failed", name)
            return failure(f"STT plugin '{name}' raised: {exc}", name)
        if not isinstance(result, dict):
            return failure(f"STT plugin '{name}' returned a non-dict result", name)
        result = dict(result)
        result.setdefault("provider", name)
        if result.get("success") and not isinstance(result.get("transcript"), str):
            return failure(f"STT plugin '{name}' returned no transcript text", name)
        return result

    async def _asked(self, path: str, name: str, own: dict[str, Any]) -> dict[str, Any]:
        """``model``/``language`` (and ``prompt``) for the provider: its ``stt.<name>``
        section, then what ``pre_transcription`` callbacks return (the last one wins)."""
        asked = {key: own.get(key) for key in _ASKED}
        if self.hooks is not None and self.hooks.has("pre_transcription"):
            changes = await self.hooks.invoke(
                "pre_transcription",
                file_path=path,
                provider=name,
                model=asked["model"],
                language=asked["language"],
                prompt=asked["prompt"],
                source="gateway",
            )
            for change in changes:
                if isinstance(change, dict):
                    asked.update(
                        (k, v)
                        for k, v in change.items()
                        if k in _ASKED and isinstance(v, str | None)
                    )
        if not asked["prompt"]:
            del asked["prompt"]  # sent only when set: providers take it among their **extra
        return asked

    async def enrich(self, event: MessageEvent) -> tuple[str, list[str]]:
        """The message's text with its voice notes in front of it, and the transcripts that
        worked (for the echo)."""
        paths = [p for i, p in enumerate(event.media_urls) if is_voice(event, i)]
        if not paths:
            return event.text, []
        parts: list[str] = []
        heard: list[str] = []
        if not self.config().get("stt.enabled"):
            parts = [f"[The user sent a voice message: {p}]" for p in paths]
        else:
            for path in paths:
                result = await self.transcribe(path)
                if result.get("success"):
                    heard.append(str(result["transcript"]))
                    parts.append(f'"{result["transcript"]}"')
                else:
                    log.info("voice message %s not transcribed: %s", path, result.get("error"))
                    parts.append(NOT_TRANSCRIBED)
        if event.text:
            parts.append(event.text)
        return "\n\n".join(parts), heard

    def echoes(self) -> bool:
        """Whether transcripts are sent back to the chat before the turn."""
        return bool(self.config().get("stt.echo_transcripts"))


def _check_file(path: Path) -> str | None:
    """Why ``path`` cannot go to a provider (the reference's checks), or None."""
    if path.is_symlink() or not path.is_file():
        return f"audio file not found: {path}"
    if path.suffix.lower() not in AUDIO_SUFFIXES:
        return f"unsupported audio format: {path.suffix or '(none)'}"
    size = path.stat().st_size
    if size > MAX_AUDIO:
        return f"audio file too large: {size} bytes (at most {MAX_AUDIO})"
    return None
