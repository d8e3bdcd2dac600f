"""``video_generate`` (toolset ``video_gen``): a video from a prompt, by a plugin's provider.

The provider is the one ``video_gen.provider`` names or, that key unset, the only registered
one that says it is available (as in the reference). It runs like the image and speech
providers of `hermesd.tools.provider_tools`: on a worker thread under ``video_gen.timeout``,
its failures turned into error results. The provider's dict comes back as the reference's
``{"success", "video", "model", "prompt", "modality", "aspect_ratio", "duration", "provider"}``;
bytes it gives as ``video`` are saved under ``$HERMES_HOME/cache/videos/``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.tools.checks import available_unless
from hermesd.tools.provider_tools import ProviderFailure, Providers, choose, generate, stamp
from hermesd.tools.registry import BUILTIN

if TYPE_CHECKING:
    from hermesd.tools.registry import ToolRegistry


ASPECT_RATIOS = ("16:9", "9:16", "1:1", "4:3", "3:4", "3:2", "2:3")
RESOLUTIONS = ("480p", "540p", "720p", "1080p")
MAX_PROMPT = 8000

SCHEMA: dict[str, Any] = {
    "name": "video_generate",
    "description": (
        "Generate a short video from a text prompt, or animate a still image when image_url "
        "is given. The backend is chosen by the user's configuration. The result's 'video' "
        "field holds the video's URL or absolute file path."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "The video to make: subject, motion"},
            "image_url": {"type": "string", "description": "Optional still image to animate"},
            "reference_image_urls": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Optional style or character reference images",
            },
            "duration": {"type": "integer", "description": "Seconds (the provider clamps)"},
            "aspect_ratio": {"type": "string", "enum": list(ASPECT_RATIOS), "default": "16:9"},
            "resolution": {"type": "string", "enum": list(RESOLUTIONS), "default": "720p"},
            "negative_prompt": {"type": "string", "description": "What to keep out"},
            "audio": {"type": "boolean", "description": "Ask for sound, where supported"},
            "seed": {"type": "integer", "description": "Seed, for reproducible output"},
            "model": {"type": "string", "description": "Model override (default: configured)"},
        },
        "required": ["prompt"],
    },
}

_TYPES: dict[str, type | tuple[type, ...]] = {
    "image_url": str,
    "duration": int,
    "aspect_ratio": str,
    "resolution": str,
    "negative_prompt": str,
    "audio": bool,
    "seed": int,
    "model": str,
}


def _error(error: str, kind: str, provider: str = "", prompt: str = "") -> str:
    return json.dumps(
        {
            "success": False,
            "video": None,
            "error": error,
            "error_type": kind,
            "provider": provider,
            "prompt": prompt,
        }
    )


def read_arguments(args: dict[str, Any]) -> dict[str, Any]:
    """The provider's keyword arguments from the model's; ValueError names a wrong one."""
    prompt = args.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("'prompt' must be a non-empty string")
    if len(prompt) > MAX_PROMPT:
        raise ValueError(f"'prompt' is longer than {MAX_PROMPT} characters")
    if "operation" in args or "video_url" in args:
        raise ValueError("video_generate makes new videos; it does not edit or extend one")
    kwargs: dict[str, Any] = {"prompt": prompt.strip()}
    for key, kind in _TYPES.items():
        value = args.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"'{key}' must be of type {getattr(kind, '__name__', kind)}")
        kwargs[key] = value.strip() if isinstance(value, str) else value
    refs = args.get("reference_image_urls")
    if refs is not None:
        if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
            raise ValueError("'reference_image_urls' must be a list of strings")
        if cleaned := [r.strip() for r in refs if r.strip()]:
            kwargs["reference_image_urls"] = cleaned
    return kwargs


class VideoTool:
    """The ``video_generate`` handler and check."""

    def __init__(self, config: Callable[[], Any], providers: Providers, home: Path) -> None:
        self.config = config
        self.providers = providers
        self.videos = home / "cache" / "videos"

    def unavailable(self) -> str | None:
        """Why ``video_generate`` cannot run now, or None."""
        chosen = choose(self.config(), self.providers, "video_gen", only_one=True)
        return chosen if isinstance(chosen, str) else None

    async def generate(self, args: dict[str, Any], **_: Any) -> str:
        """The ``video_generate`` handler."""
        try:
            kwargs = read_arguments(args)
        except ValueError as exc:
            return _error(str(exc), "bad_arguments")
        config = self.config()
        provider = await asyncio.to_thread(
            choose, config, self.providers, "video_gen", only_one=True
        )
        if isinstance(provider, str):
            return _error(provider, "provider_not_available", prompt=kwargs["prompt"])
        name = str(provider.name)
        if "model" not in kwargs and (model := str(config.get("video_gen.model") or "")):
            kwargs["model"] = model
        timeout = float(config.get("video_gen.timeout"))
        result = await generate(provider, "video_gen", timeout, kwargs)
        if isinstance(result, ProviderFailure):
            return _error(result.message, result.kind, name)
        if not isinstance(result, dict):
            return _error("the provider returned a non-dict result", "provider_contract", name)
        answer = await asyncio.to_thread(self._complete, dict(result), name, kwargs)
        return json.dumps(answer, ensure_ascii=False, default=str)

    def _complete(self, answer: dict[str, Any], name: str, kwargs: dict[str, Any]) -> Any:
        """The reference's keys filled in; bytes given as ``video`` saved as a file."""
        video = answer.get("video")
        if isinstance(video, bytes | bytearray):
            self.videos.mkdir(parents=True, exist_ok=True)
            path = self.videos / stamp("video", "mp4")
            path.write_bytes(bytes(video))
            answer["video"] = str(path)
        answer["success"] = bool(answer.get("success", True))
        answer.setdefault("video", None)
        answer.setdefault("model", kwargs.get("model", ""))
        answer.setdefault("prompt", kwargs["prompt"])
        answer.setdefault("modality", "image" if "image_url" in kwargs else "text")
        answer.setdefault("aspect_ratio", kwargs.get("aspect_ratio", "16:9"))
        answer.setdefault("duration", kwargs.get("duration", 0))
        answer.setdefault("provider", name)
        return answer


def register_video_tool(
    tools: ToolRegistry, config: Callable[[], Any], providers: Providers, home: Path
) -> VideoTool:
    """Register ``video_generate`` (toolset ``video_gen``)."""
    made = VideoTool(config, providers, home)
    tools.register(
        "video_generate",
        "video_gen",
        SCHEMA,
        made.generate,
        check_fn=lambda: available_unless(made.unavailable()),
        is_async=True,
        emoji="🎬",
        owner=BUILTIN,
        check_arguments=False,
    )
    return made
