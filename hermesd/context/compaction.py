"""The values a compaction and a turn's context checks pass around, and the texts they report.

Owns `Compaction` (what was asked: forced, a focus, the tokens counted, why, for which turn),
`TurnWindow` (what the context host keeps of one running turn: the user message as sent and its
stored seq, the session's compactions when the turn read its history, the last real token count,
the turn's compactions), the result dict of ``ContextHost.compact`` and its
``context.compacted`` event, and the memory provider's ``on_pre_compress`` text. Deciding when
to compact and running the engine is ``hermesd.context.host``'s business.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermesd.context.engine import sanitize_memory_context

if TYPE_CHECKING:
    from hermesd.memory.providers import MemoryProviders

log = logging.getLogger(__name__)

REPEAT_WARNING = (
    "Session compressed {n} times — accuracy may degrade. Consider /new to start fresh."
)
SUMMARY_ABORTED = (
    "Compaction failed: the summary model did not answer ({}); nothing was compacted "
    "(compression.abort_on_summary_failure is set)."
)
FALLBACK_SUMMARY = (
    "The summary model failed ({error}); the {n} compacted messages are described by a "
    "mechanical summary instead. Every message stays stored."
)

WINDOW_TOO_SMALL = (
    "The model's window ({window:,} tokens, {source}) is too small for this conversation "
    "even after compaction: from now on hermesd sends the model a shortened view (older turns "
    "left out, long messages and tool results truncated and marked so). Nothing stored is "
    "lost. For the whole conversation, serve the model with a larger window (Hermes asks for "
    "at least 64,000 tokens) and set model.context_length, or start fresh with /new."
)
TOOLS_TOO_BIG = (
    " The tool list alone takes about {tools:,} tokens of the window: offer fewer tools "
    "(tools.enabled_toolsets) or the requests cannot fit."
)

SOURCES = {  # where a window came from (hermesd.model.context_length), as the warning says it
    "config": "set in model.context_length",
    "endpoint": "as the server reports it",
    "table": "the model's published window",
    "default": "assumed: nothing reports it",
}


@dataclass(frozen=True)
class Compaction:
    """One compaction asked for: by a turn (``turn_id``), between turns, or by ``/compress``."""

    force: bool = False
    focus: str | None = None
    current_tokens: int | None = None
    reason: str = "threshold"
    turn_id: str | None = None


@dataclass
class TurnWindow:
    """What the context host keeps of one running turn between its requests."""

    session_id: str
    turn_id: str
    user_message: str
    api_user: dict[str, Any]  # the user message as sent (with recalled context)
    user_seq: int  # ... and its stored seq
    generation: int  # the session's compactions when its history was read
    measured: tuple[int, int] | None = None  # real prompt tokens, at this many messages
    compactions: int = 0  # automatic compactions in this turn


def outcome(engine: str, messages: int, reason: str) -> dict[str, Any]:
    """The result of a compaction that has not happened (yet)."""
    return {
        "compacted": False,
        "engine": engine,
        "messages_before": messages,
        "messages_after": messages,
        "replaced": 0,
        "reason": reason,
    }


def refused(result: dict[str, Any], why_not: str) -> dict[str, Any]:
    """``result`` saying why nothing was compacted."""
    result["why_not"] = why_not
    return result


def compacted_event(session_id: str, turn_id: str | None, result: dict[str, Any]) -> dict[str, Any]:
    """The ``context.compacted`` event of a compaction's ``result``."""
    return {
        "type": "context.compacted",
        "session_id": session_id,
        "turn_id": turn_id,
        "engine": result["engine"],
        "reason": result["reason"],
        "replaced": result["replaced"],
        "messages_before": result["messages_before"],
        "messages_after": result["messages_after"],
        "compression_count": result["compression_count"],
        "summary_fallback": result["summary_fallback"],
    }


async def memory_context(
    providers: MemoryProviders | None, session_id: str, messages: list[dict[str, Any]]
) -> str:
    """What the session's memory provider wants kept (``on_pre_compress``), redacted and
    capped; "" when there is no provider or it fails."""
    if providers is None:
        return ""
    try:  # isolated there too (a raise or an overrun gives ""); this is a last guard
        result = await providers.on_pre_compress(session_id, list(messages))
    except Exception:
        log.warning(
            "memory provider on_pre_compress failed (session %s)", session_id, exc_info=True
        )
        return ""
    return sanitize_memory_context(result) if isinstance(result, str) and result else ""
