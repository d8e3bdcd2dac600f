"""The context engine interface: the class hermesd's built-in compressor and every plugin
engine subclass.

The abstract methods, the state the host reads and the defaults of the optional methods are the
reference's (docs/hermes-compat.md §11.5); plugins import it as ``agent.context_engine``
(``hermesd/plugins/compat/agent/context_engine.py`` re-exports it).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from hermesd import redact

MEMORY_CONTEXT_MAX_CHARS = 6_000
_HEAD_CHARS = 4_000
_TAIL_CHARS = 1_500
_TRUNCATED = "\n...[memory provider context truncated]...\n"


def sanitize_memory_context(memory_context: str) -> str:
    """Memory text bound for a model: secrets masked, cut to 6,000 characters (head and tail)."""
    text = redact.redact(str(memory_context or "").strip())
    if len(text) <= MEMORY_CONTEXT_MAX_CHARS:
        return text
    return text[:_HEAD_CHARS] + _TRUNCATED + text[-_TAIL_CHARS:]


class ContextEngine(ABC):
    """Decides when and how a conversation is made to fit the model's window."""

    last_prompt_tokens: int = 0
    last_completion_tokens: int = 0
    last_total_tokens: int = 0
    threshold_tokens: int = 0
    context_length: int = 0
    compression_count: int = 0
    threshold_percent: float = 0.75
    protect_first_n: int = 3
    protect_last_n: int = 6

    @property
    @abstractmethod
    def name(self) -> str:
        """Short identifier of the engine."""

    @abstractmethod
    def update_from_response(self, usage: dict[str, Any]) -> None:
        """Take the token counts of a response."""

    @abstractmethod
    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Whether the conversation must be compressed now."""

    @abstractmethod
    def compress(
        self,
        messages: list[dict[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[dict[str, Any]]:
        """The compressed message list (valid OpenAI messages)."""

    def should_compress_preflight(self, messages: list[dict[str, Any]]) -> bool:
        return False

    def should_defer_preflight_to_real_usage(self, rough_tokens: int) -> bool:
        return False

    def has_content_to_compress(self, messages: list[dict[str, Any]]) -> bool:
        return True

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        return None

    def on_session_end(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        return None

    def on_session_reset(self) -> None:
        self.last_prompt_tokens = 0
        self.last_completion_tokens = 0
        self.last_total_tokens = 0
        self.compression_count = 0

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return []

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        return json.dumps({"error": f"Unknown context engine tool: {name}"})

    def get_status(self) -> dict[str, Any]:
        last = self.last_prompt_tokens if self.last_prompt_tokens > 0 else 0
        return {
            "last_prompt_tokens": last,
            "threshold_tokens": self.threshold_tokens,
            "context_length": self.context_length,
            "usage_percent": (
                min(100, last / self.context_length * 100) if self.context_length else 0
            ),
            "compression_count": self.compression_count,
        }

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        self.context_length = context_length
        self.threshold_tokens = int(context_length * self.threshold_percent)
