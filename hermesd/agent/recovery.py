"""What a turn does when a model request fails for good (after the client's own retries).

- **Over the window.** The endpoint refused the request as longer than the model's window
  (its words, or a plugin's ``should_compress``): the session is compacted at once and the
  request sent again, once per round. Local servers with small windows and an estimate that
  was short of the real count are what this catches.
- **A failing model.** The error is one another endpoint may not have (a rate limit, an
  outage, a refused key, an unknown model; or a plugin's ``should_fallback``): the turn goes
  on with the next entry of ``fallback_providers`` (`hermesd.model.fallback`), announced to
  the clients as a ``model.fallback`` event. The next turn starts on the configured model.

Anything else is raised as it was.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from hermesd.agent.round import Round, RoundInput, stream_round
from hermesd.context.host import after_overflow
from hermesd.model.errors import ModelError, overflowed, window_from
from hermesd.model.fallback import worth_switching

if TYPE_CHECKING:
    from hermesd.agent.loop import AgentLoop
    from hermesd.agent.request import TurnRequest
    from hermesd.agent.scope import TurnScope
    from hermesd.context.host import TurnWindow
    from hermesd.model.client import ModelClient

log = logging.getLogger(__name__)


class RoundRecovery:
    """One turn's way through failed requests: the client it uses and the fallbacks left."""

    def __init__(self, agent: AgentLoop, scope: TurnScope) -> None:
        self.agent, self.scope = agent, scope
        self.client: ModelClient = agent.client
        self._next = 0  # the fallback entry to try next

    async def send(
        self, sent: RoundInput, request: TurnRequest, window: TurnWindow | None
    ) -> Round:
        """`stream_round` with the recoveries above."""
        compacted = False
        while True:
            try:
                return await stream_round(self.client, self.scope, sent)
            except ModelError as exc:
                if not compacted and overflowed(exc):
                    compacted = True
                    rebuilt = await self._compact(request, window, exc)
                    if rebuilt is not None:
                        sent = dataclasses.replace(sent, messages=rebuilt)
                        continue
                if not self._switch(exc):
                    raise

    async def _compact(
        self, request: TurnRequest, window: TurnWindow | None, error: ModelError
    ) -> list[dict[str, object]] | None:
        context = self.agent.context
        if context is None or window is None:
            return None
        rebuilt = await after_overflow(
            context, window, request.messages, request.tools, window_from(error)
        )
        if rebuilt is None:
            log.warning("session %s: over the window and nothing to compact", window.session_id)
            return None
        context.warn(
            window.session_id,
            "The model endpoint said the conversation is longer than its window "
            f"({str(error)[:200]}); compacted it and sent it again.",
            turn_id=window.turn_id,
        )
        request.messages = rebuilt
        return rebuilt

    def _switch(self, error: ModelError) -> bool:
        """Go on with the next fallback entry when ``error`` is worth it; whether it did."""
        if not worth_switching(error):
            return False
        primary = self.agent.client
        found = primary.others.fallback(primary.settings, self._next)
        if found is None:
            return False
        self.client, spec = found
        self._next += 1
        previous, self.scope.model = self.scope.model, spec.model
        log.warning(
            "session %s: model %s failed (%s); going on with %s",
            self.scope.session_id,
            previous,
            error,
            spec.label(),
        )
        self.scope.emit(
            "model.fallback",
            from_model=previous,
            model=spec.model,
            provider=spec.provider,
            error=str(error)[:500],
        )
        return True
