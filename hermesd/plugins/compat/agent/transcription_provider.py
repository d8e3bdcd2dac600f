"""hermesd's ``agent.transcription_provider``: the class speech-to-text backends subclass.

Plugins subclass `TranscriptionProvider` and hand an instance to
``ctx.register_transcription_provider``; hermesd's messaging gateway sends voice messages to it
when ``stt.provider`` names it (docs/gateway.md). The surface — abstract ``name`` and
``transcribe``, the optional ``display_name``, ``is_available``, ``list_models``,
``default_model`` and ``get_setup_schema`` — is the reference's, so a provider written for it
imports and registers unchanged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class TranscriptionProvider(ABC):
    """A speech-to-text backend."""

    @property
    @abstractmethod
    def name(self) -> str:
        """Short stable id, lower case (``stt.provider`` names it)."""

    @property
    def display_name(self) -> str:
        """A label for people; ``name`` in title case unless overridden."""
        return self.name.title()

    def is_available(self) -> bool:
        """Whether the backend can serve calls now (keys set, SDK importable); never raises."""
        return True

    def list_models(self) -> list[dict[str, Any]]:
        """Models one may pick: dicts with ``id`` (and ``display``, ``languages``, …)."""
        return []

    def default_model(self) -> str | None:
        """The model used when none is configured: the first listed, if any."""
        models = self.list_models()
        return str(models[0].get("id")) if models else None

    def get_setup_schema(self) -> dict[str, Any]:
        """How a setup screen would present it (name, badge, tag, env_vars)."""
        return {"name": self.display_name, "badge": "", "tag": "", "env_vars": []}

    @abstractmethod
    def transcribe(
        self,
        file_path: str,
        *,
        model: str | None = None,
        language: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Transcribe the audio file at ``file_path``: ``{"success": True, "transcript",
        "provider"}``, or ``{"success": False, "transcript": "", "error", "provider"}``."""
