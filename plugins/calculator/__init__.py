"""Calculator plugin: registers calculate and unit_convert, a post_tool_call log, and its skills.

This is the bundled, safe rewrite of the plugin guide's calculator: same tools, schemas shapes and
results, but expressions go through an allow-list evaluator (evaluator.py), never eval().
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from . import schemas, tools

logger = logging.getLogger(__name__)

CALL_LOG_SIZE = 100
_SKILLS_DIR = Path(__file__).parent / "skills"

# deque.append is atomic, so hooks running in worker threads need no lock.
_call_log: deque[dict[str, Any]] = deque(maxlen=CALL_LOG_SIZE)


class PluginContext(Protocol):
    """The part of the host's plugin context this plugin uses."""

    def register_tool(
        self, *, name: str, toolset: str, schema: dict[str, Any], handler: Callable[..., str]
    ) -> object:
        """Add a tool to the registry."""

    def register_hook(self, hook_name: str, callback: Callable[..., object], /) -> object:
        """Subscribe to a lifecycle hook."""


def recent_calls() -> list[dict[str, Any]]:
    """Return the logged tool calls, oldest first (at most CALL_LOG_SIZE)."""
    return list(_call_log)


def _on_post_tool_call(
    tool_name: str = "", task_id: str = "", duration_ms: int | None = None, **kwargs: Any
) -> None:
    """Record a tool call (any tool, not only ours) in the bounded in-memory log."""
    _call_log.append({"tool": tool_name, "session": task_id, "duration_ms": duration_ms})
    logger.debug("tool called: %s (session %s)", tool_name, task_id)


def register(ctx: PluginContext) -> None:
    """Wire schemas to handlers, subscribe the call log, and register the bundled skills."""
    ctx.register_tool(
        name="calculate", toolset="calculator", schema=schemas.CALCULATE, handler=tools.calculate
    )
    ctx.register_tool(
        name="unit_convert",
        toolset="calculator",
        schema=schemas.UNIT_CONVERT,
        handler=tools.unit_convert,
    )
    ctx.register_hook("post_tool_call", _on_post_tool_call)

    register_skill = getattr(ctx, "register_skill", None)
    if register_skill is None:
        logger.debug("host has no register_skill; calculator skills not registered")
        return
    for child in sorted(_SKILLS_DIR.iterdir()) if _SKILLS_DIR.is_dir() else ():
        skill_md = child / "SKILL.md"
        if child.is_dir() and skill_md.exists():
            register_skill(child.name, skill_md)
