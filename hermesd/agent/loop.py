"""The agent loop: the daemon's one entry point for turns and for plugin completions.

`AgentLoop` holds what every turn of every session shares (store, tool registry, hooks, model
client, memory, usage meter, context engines) and starts turns: the request is built by
``hermesd.agent.request``, each model round streamed by ``hermesd.agent.round``, what it produced
committed by ``hermesd.agent.commit``, in the order ``hermesd.agent.turn`` keeps. `complete` is
``ctx.llm``'s own short path: one round, nothing stored but its usage, no tool runs.
It does not own transport (events go to an ``emit`` callback), the tool pipeline (the registry's
job: hooks, approvals, argument parsing, unknown tools) or the one-turn-per-session rule (the
daemon's ``SessionBusy``).

Invariant: the stored history is valid for the next model request whatever happens: a tool
runs only after the message calling it is committed, its result is committed before the next
request, and a cancelled or failed turn answers its unfinished tool calls with error results.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermesd.agent.budget import UsageMeter
from hermesd.agent.prompt_sections import FrozenSections
from hermesd.agent.request import Speaker, Toolsets, pre_llm_context
from hermesd.agent.round import Round, RoundInput, stream_round
from hermesd.agent.scope import Emit, TurnScope
from hermesd.agent.turn import (
    CANCELLED_RESULT,
    FAILED_RESULT,
    Turn,
    TurnResult,
    TurnStatus,
    new_id,
)
from hermesd.model.client import Completion, ConfigLike, ModelClient, ModelNotConfigured
from hermesd.plugins.host import ReloadGate
from hermesd.runtime.auxiliary import AuxiliaryCall, run_auxiliary
from hermesd.runtime.hooks import HookBus
from hermesd.store.facade import SessionStore
from hermesd.store.images import Image
from hermesd.tools.registry import ToolRegistry
from hermesd.tools.toolsets import ToolSelection

if TYPE_CHECKING:
    from hermesd.context.host import ContextHost
    from hermesd.memory.builtin import BuiltinMemory
    from hermesd.memory.providers import MemoryProviders
    from hermesd.model.fallback import EndpointSpec

log = logging.getLogger(__name__)

__all__ = [
    "CANCELLED_RESULT",
    "FAILED_RESULT",
    "AgentLoop",
    "AgentSettings",
    "BlockingOnLoop",
    "Emit",
    "Toolsets",
    "TurnResult",
    "TurnStatus",
    "new_id",
    "pre_llm_context",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are Hermes, a helpful assistant with access to tools. Use a tool when it gives a "
    "more reliable answer than guessing (arithmetic, files, commands), then answer the user "
    "plainly and concisely."
)
DEFAULT_LLM_TIMEOUT = 120.0


class BlockingOnLoop(RuntimeError):
    """A blocking completion (``ctx.llm.complete``, ``call_llm``) was asked for on the daemon's
    event loop, which it would freeze."""


@dataclass
class AgentSettings:
    """Per-daemon settings of the loop (``agent.*``, ``tools.enabled_toolsets`` and
    ``plugins.llm_timeout``)."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    skills_index: str = ""
    max_iterations: int = 25
    platform: str = "cli"
    enabled_toolsets: list[str] | None = None
    llm_timeout: float = DEFAULT_LLM_TIMEOUT  # seconds a plugin's ctx.llm completion may take

    @classmethod
    def from_config(cls, config: ConfigLike, *, skills_index: str = "") -> AgentSettings:
        """Read ``agent.system_prompt``, ``agent.max_iterations``, ``tools.enabled_toolsets``
        and ``plugins.llm_timeout``."""
        return cls(
            system_prompt=config.get("agent.system_prompt") or DEFAULT_SYSTEM_PROMPT,
            skills_index=skills_index,
            max_iterations=max(1, int(config.get("agent.max_iterations", 25))),
            enabled_toolsets=ToolSelection.from_config(config).toolset_names(),
            llm_timeout=float(config.get("plugins.llm_timeout", DEFAULT_LLM_TIMEOUT)),
        )

    def system_message(self) -> dict[str, Any]:
        """The system prompt with the skills index."""
        text = self.system_prompt.strip()
        if self.skills_index.strip():
            text += "\n\n" + self.skills_index.strip()
        return {"role": "system", "content": text}


class AgentLoop:
    """Runs turns; one instance serves every session of the daemon."""

    def __init__(
        self,
        store: SessionStore,
        registry: ToolRegistry,
        hooks: HookBus,
        client: ModelClient,
        settings: AgentSettings | None = None,
        reloads: ReloadGate | None = None,
        memory: BuiltinMemory | None = None,
        providers: MemoryProviders | None = None,
        meter: UsageMeter | None = None,
        context: ContextHost | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.hooks = hooks
        self.client = client
        self.settings = settings or AgentSettings()
        self.reloads = reloads  # a turn starts once no plugin reload runs
        self.memory = memory  # the built-in memory's prompt snapshot (hermesd.memory)
        self.providers = providers  # the external memory provider (memory.provider)
        self.meter = meter or UsageMeter(store)  # usage rows, prices and budget.*
        self.context = context  # the sessions' context engines (hermesd.context.host)
        self.prompt_sections = FrozenSections()  # plugins' sections, rendered once a session

    def check_ready(self) -> None:
        """Raise ``ModelNotConfigured`` when no endpoint is configured (call before a turn)."""
        self.client.settings.check()

    async def run_turn(
        self,
        session_id: str,
        user_message: str,
        *,
        emit: Emit | None = None,
        sender_id: str | None = None,
        platform: str | None = None,
        turn_id: str | None = None,
        toolsets: Toolsets | None = None,
        user_name: str | None = None,
        images: list[Image] | None = None,
        model: str | None = None,
        max_iterations: int | None = None,
        system: str | None = None,
        endpoint: EndpointSpec | None = None,
    ) -> TurnResult:
        """Answer ``user_message`` in the session; cancel the task to stop it cleanly.

        ``toolsets`` narrows the tools of this turn (a scheduled run's). ``sender_id`` (the
        Unix uid of the client, as text) and ``user_name`` say who talks; ``on_session_start``
        and ``pre_llm_call`` get them. ``images`` go with the user message (checked by
        `hermesd.store.images.read_images`). ``model``, ``max_iterations`` and ``endpoint``
        (another model endpoint) replace the daemon's (a delegated child's turn). ``system``
        is added to the system prompt of this turn's requests only (an API client's system
        messages)."""
        scope = TurnScope(
            self.hooks,
            session_id,
            turn_id or new_id("turn"),
            platform or self.settings.platform,
            model=model or "",
            listener=emit,
            system_note=system or "",
        )
        who = Speaker(sender_id=sender_id, user_name=user_name)
        turn = Turn(self, scope, user_message, who, toolsets, images or [])
        turn.limit = max_iterations
        if endpoint is not None:
            turn.recovery.client = self.client.others.client(self.client.settings, endpoint)
        return await turn.run()

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        model: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        options: dict[str, Any] | None = None,
        session_id: str = "",
        platform: str | None = None,
        aux_task: str | None = None,
        endpoint: EndpointSpec | None = None,
    ) -> Completion:
        """One model request for plugin code (``ctx.llm``, ``call_llm``) or a tool
        (``vision_analyze``): nothing is stored but its usage, no tool runs; middleware sees it
        as it sees a turn's requests. With ``aux_task`` it is an auxiliary call:
        ``pre``/``post_auxiliary_call`` observe it instead of ``pre``/``post_api_request``.
        ``endpoint`` sends it to another endpoint than the daemon's (an auxiliary task's own)."""
        self.check_ready()
        client = self.client
        if endpoint is not None:
            client = self.client.others.client(self.client.settings, endpoint)
            model = endpoint.model
        scope = TurnScope(
            self.hooks,
            session_id,
            new_id("turn"),
            platform or self.settings.platform,
            model=model or client.settings.model or "",
            auxiliary=aux_task is not None,
        )
        await self.meter.check(session_id, scope.model, scope.emit)  # budget.action: stop
        sent = RoundInput([dict(m) for m in messages], list(tools or ()), 1, new_id("req"))
        sent.extra = options
        rounds: list[Round] = []

        async def send() -> Completion:
            rounds.append(await stream_round(client, scope, sent))
            return rounds[-1].completion

        if aux_task is None:
            await send()
        else:
            settings = client.settings
            call = AuxiliaryCall(
                aux_task, scope.model, settings.provider, settings.base_url or "", session_id
            )
            await run_auxiliary(self.hooks, call, sent.messages, send, options)
        done = rounds[-1]
        # no message stores it: a row of its own
        await self.store.run(self.meter.record, session_id or None, scope.turn_id, done.usage)
        return done.completion

    def complete_blocking(
        self, messages: list[dict[str, Any]], timeout: float | None = None, **kwargs: Any
    ) -> Completion:
        """`complete` from a plugin's worker thread, run on the daemon's loop and waited for
        at most ``timeout`` seconds (default ``plugins.llm_timeout``). Raises `BlockingOnLoop`
        on the loop's own thread (an async hook), whose wait would freeze the daemon."""
        loop = self.registry.loop
        if loop is None or not loop.is_running():
            raise ModelNotConfigured("the daemon's event loop is not running")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            raise BlockingOnLoop(
                "ctx.llm.complete and call_llm wait for the model, so they cannot be called on "
                "the daemon's event loop (from an async hook or handler); call them from a "
                "plain (sync) function, which runs on a worker thread"
            )
        future = asyncio.run_coroutine_threadsafe(self.complete(messages, **kwargs), loop)
        limit = self.settings.llm_timeout if timeout is None else timeout
        try:
            return future.result(limit)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"the model did not answer within {limit:g} s") from None
