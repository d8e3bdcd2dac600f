"""hermesd's ``agent.memory_provider``: the class memory provider plugins subclass.

The abstract methods and the defaults of the optional ones are the reference's
(docs/hermes-compat.md §11.4); hermesd calls the selected provider per session (docs/memory.md).
Provider calls run with the session's context; `spawn_context_thread` keeps it in a thread.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PRE_COMPRESS_CHECKPOINT_API_VERSION = 2


@dataclass(frozen=True)
class RecallStatus:
    """What a provider recalled, for a status line."""

    provider_label: str
    count: int = 0
    glyph: str = ""


def is_trivial_prompt(message: str) -> bool:
    """True for a prompt too short to recall anything for (a greeting, an acknowledgement)."""
    words = str(message or "").strip().split()
    return len(words) <= 2 and len("".join(words)) <= 12


def spawn_context_thread(
    fn: Callable[[], Any], name: str | None = None, daemon: bool = True
) -> threading.Thread:
    """Start ``fn`` on a thread that carries the caller's context variables (the session)."""
    import contextvars

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(fn,), name=name, daemon=daemon)
    thread.start()
    return thread


class MemoryProvider(ABC):
    """A memory backend: recalls context before a turn, stores what happened after it."""

    @property
    @abstractmethod
    def name(self) -> str:
        """Short identifier of the provider."""

    @abstractmethod
    def is_available(self) -> bool:
        """Whether it can work (configured, reachable); must not use the network."""

    @abstractmethod
    def initialize(self, session_id: str, **kwargs: Any) -> None:
        """Set up for a session."""

    @abstractmethod
    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """Tools the provider offers the model."""

    def system_prompt_block(self) -> str:
        return ""

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        return ""

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        return None

    def sync_turn(
        self,
        user_content: str,
        assistant_content: str,
        *,
        session_id: str = "",
        messages: list[dict[str, Any]] | None = None,
    ) -> None:
        return None

    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        raise NotImplementedError(f"Provider {self.name} does not handle tool {tool_name}")

    def shutdown(self) -> None:
        return None

    def on_turn_start(self, turn_number: int, message: str, **kwargs: Any) -> None:
        return None

    def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        return None

    def on_session_switch(
        self,
        new_session_id: str,
        *,
        parent_session_id: str = "",
        reset: bool = False,
        rewound: bool = False,
        **kwargs: Any,
    ) -> None:
        return None

    def on_pre_compress(self, messages: list[dict[str, Any]]) -> str:
        return ""

    def on_delegation(
        self, task: str, result: str, *, child_session_id: str = "", **kwargs: Any
    ) -> None:
        return None

    def get_config_schema(self) -> list[dict[str, Any]]:
        return []

    def save_config(self, values: dict[str, Any], hermes_home: str) -> None:
        return None

    def on_memory_write(
        self, action: str, target: str, content: str, metadata: dict[str, Any] | None = None
    ) -> None:
        return None

    def backup_paths(self) -> list[str]:
        return []
