"""Who and where one model request runs: a turn's (or a plugin completion's) ids, its events and
its hooks.

Owns the ids every step of a turn shares (session, turn, model, platform), sending progress
events to the turn's listener, and calling hooks with the ids the hook table
(``hermesd.runtime.hooks.HOOKS``) declares for each hook, after the ``post_tool_call`` callbacks
still running (hooks of one turn run in the order they were called). It does not decide which
hook runs when: the steps of the turn do (``hermesd.agent.request``, ``round``, ``turn``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hermesd.runtime.hooks import HOOKS, HookBus

log = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], None]

_IDS = ("session_id", "task_id", "turn_id", "model", "platform")
#: the hooks of a turn's own model requests, which auxiliary calls do not fire (upstream)
_TURN_REQUEST_HOOKS = frozenset({"pre_api_request", "post_api_request", "api_request_error"})


@dataclass
class TurnScope:
    """The ids of one turn, its event listener and its hook bus."""

    hooks: HookBus
    session_id: str
    turn_id: str
    platform: str
    model: str = ""
    listener: Emit | None = None
    #: the caller's text for this turn's system prompt (never stored)
    system_note: str = ""
    #: ``post_tool_call`` callbacks still running (the tool registry adds them)
    observers: list[asyncio.Task[Any]] = field(default_factory=list)
    #: an auxiliary call (``pre``/``post_auxiliary_call`` observe it): the turn's request
    #: hooks and stream observers do not see it
    auxiliary: bool = False

    def emit(self, kind: str, **data: Any) -> None:
        """Send one event to the turn's listener; a broken listener never breaks the turn."""
        if self.listener is None:
            return
        try:
            self.listener(
                {"type": kind, "session_id": self.session_id, "turn_id": self.turn_id, **data}
            )
        except Exception:
            log.exception("turn event listener failed")

    def hooked(self, name: str) -> bool:
        """Whether a callback is registered for ``name`` (else skip building its arguments)."""
        if self.auxiliary and name in _TURN_REQUEST_HOOKS:
            return False
        return self.hooks.has(name)

    async def hook(self, name: str, **kwargs: Any) -> list[Any]:
        """Call ``name``'s callbacks with ``kwargs`` and the ids its table entry names."""
        if not self.hooked(name):
            return []
        await self.settle_observers()
        spec = HOOKS.get(name)
        ids = {
            "session_id": self.session_id,
            "task_id": self.session_id,
            "turn_id": self.turn_id,
            "model": self.model,
            "platform": self.platform,
        }
        wanted = _IDS if spec is None else spec.kwargs
        return await self.hooks.invoke(
            name, **{k: v for k, v in ids.items() if k in wanted}, **kwargs
        )

    async def settle_observers(self) -> None:
        """Wait for the ``post_tool_call`` callbacks still running."""
        observers, self.observers = self.observers, []
        for task in observers:
            try:
                await task
            except Exception:  # the hook bus reports callback failures itself
                log.exception("post_tool_call observers failed")
