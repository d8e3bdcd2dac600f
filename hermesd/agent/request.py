"""What a turn sends the model: its messages (system prompt, memory blocks, history, the user
message with recalled context) and its tools.

Owns the start of a turn in the store (the session read, dangling tool calls closed, the history
read and the user message committed, in one transaction), ``on_session_start`` and
``pre_llm_call``, the memory provider's recall and prompt block, the built-in memory's snapshot,
and the turn's tool list (the daemon's ``tools.enabled_toolsets``, the turn's `Toolsets`, the
memory provider's and the context engine's tools). It produces a `TurnRequest` value; the turn
(``hermesd.agent.turn``) sends it round by round and commits what comes back.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hermesd import redact
from hermesd.agent.scope import TurnScope
from hermesd.runtime.context_refs import expand_references
from hermesd.store import images
from hermesd.store.images import Image

if TYPE_CHECKING:
    from hermesd.agent.loop import AgentLoop
    from hermesd.memory.providers import ActiveProvider

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Toolsets:
    """Which toolsets one turn may use: ``enabled`` (None: the daemon's setting) minus
    ``disabled``, which also refuses a call the model makes to a tool it was not offered."""

    enabled: list[str] | None = None
    disabled: frozenset[str] = frozenset()


@dataclass
class TurnRequest:
    """The model's view of one turn, as it starts."""

    messages: list[dict[str, Any]]  # what the model is sent
    history: list[dict[str, Any]]  # the same as stored: no system prompt, no recalled context
    api_user: dict[str, Any]  # the user message as sent (with recalled context)
    user_seq: int  # ... and its stored seq
    tools: list[dict[str, Any]] = field(default_factory=list)
    provider: ActiveProvider | None = None  # the session's memory provider
    provider_tools: set[str] = field(default_factory=set)  # its tools offered in this turn


@dataclass(frozen=True)
class Speaker:
    """Who sent the turn's message: the client's uid as text and its login name."""

    sender_id: str | None = None
    user_name: str | None = None


def pre_llm_context(results: list[Any]) -> str:
    """Join ``pre_llm_call`` results: ``{"context": x}`` or non-empty strings, blank-line apart."""
    parts = []
    for item in results:
        if isinstance(item, dict) and item.get("context"):
            parts.append(str(item["context"]))
        elif isinstance(item, str) and item.strip():
            parts.append(item)
    return "\n\n".join(parts)


async def build_request(
    agent: AgentLoop,
    scope: TurnScope,
    user_message: str,
    who: Speaker,
    toolsets: Toolsets | None,
    attached: list[Image] | None = None,
) -> TurnRequest:
    """Commit the user message (with its ``attached`` images) and build the turn's first
    request from the stored history."""
    store = agent.store

    def begin() -> tuple[Any, list[dict[str, Any]], int]:  # one trip to the DB thread, not four
        session = store.sessions.get(scope.session_id)  # SessionNotFound: nothing stored
        store.messages.close_dangling_tool_calls(scope.session_id)
        history = store.messages.history(scope.session_id)
        record = store.messages.append(
            scope.session_id, "user", user_message, turn_id=scope.turn_id, attached=attached
        )
        return session, history, record["seq"]

    session, prior, user_seq = await store.run(store.run_in_transaction, begin)
    scope.model = session["model"] or scope.model
    if agent.context is not None:  # the session's engine, started the first time
        await agent.context.open(scope.session_id, platform=scope.platform, model=scope.model)
    first = session["message_count"] == 0
    if first:
        await scope.hook(
            "on_session_start",
            sender_id=who.sender_id,
            user_id=who.sender_id,
            user_name=who.user_name,
        )
    context = ""
    if scope.hooked("pre_llm_call"):
        results = await scope.hook(
            "pre_llm_call",
            user_message=user_message,
            conversation_history=list(prior),
            is_first_turn=first,
            sender_id=who.sender_id,
            user_id=who.sender_id,
            user_name=who.user_name,
        )
        joined = pre_llm_context(results)
        context = redact.redact(joined) if joined else ""  # plugin text bound for the model
    provider, recalled = await _recall(agent, scope, user_message, who)
    if recalled:
        context = context + "\n\n" + recalled if context else recalled
    references = agent.hooks.surfaces.references.by_kind
    if references:  # plugins' @kind:value providers (issue 32); nothing to do without one
        refs = await expand_references(
            user_message, references, agent.hooks.pool, agent.hooks.timeout
        )
        context = refs + "\n\n" + context if refs and context else refs or context
    text = user_message + ("\n\n" + context if context else "")
    api_user = {"role": "user", "content": images.content(text, attached or [])}
    system = await _system_message(agent, scope, provider, first)
    request = TurnRequest(
        messages=[system, *prior, api_user],
        history=[*prior, {"role": "user", "content": images.content(user_message, attached or [])}],
        api_user=api_user,
        user_seq=user_seq,
        provider=provider,
    )
    request.tools = await _tools(agent, scope, toolsets, request)
    return request


async def _recall(
    agent: AgentLoop, scope: TurnScope, user_message: str, who: Speaker
) -> tuple[ActiveProvider | None, str]:
    """The session's memory provider and what it recalls for this message (the API copy only,
    never stored); none for scheduled runs (the reference runs cron with skip_memory=True)."""
    providers = agent.providers
    if providers is None or scope.platform == "cron":
        return None, ""
    provider = await providers.start(
        scope.session_id, platform=scope.platform, user_id=who.sender_id, user_name=who.user_name
    )
    if provider is None:
        return None, ""
    return provider, await providers.recall(provider, user_message) or ""


async def _system_message(
    agent: AgentLoop, scope: TurnScope, provider: ActiveProvider | None, first: bool
) -> dict[str, Any]:
    """The system prompt with the skills index, the memory snapshot and the provider's block."""
    system = agent.settings.system_message()
    blocks = []
    if agent.memory is not None:  # the memory snapshot taken when the session started
        blocks.append(await agent.memory.prompt_block(scope.session_id, fresh=first))
    if agent.providers is not None and provider is not None:
        blocks.append(await agent.providers.system_prompt_block(provider))
    if agent.hooks.surfaces.sections:  # plugins' register_system_prompt_section (issue 32)
        blocks.append(await _plugin_sections(agent, scope, first))
    blocks.append(scope.system_note)  # the client's, last: on top of the daemon's own
    for block in blocks:
        if block:
            system = {**system, "content": system["content"] + "\n\n" + block}
    return system


async def _plugin_sections(agent: AgentLoop, scope: TurnScope, first: bool) -> str:
    """The plugins' sections as the session's first turn rendered them, unless what they
    depend on changed since (`hermesd.agent.prompt_sections`)."""
    surfaces = agent.hooks.surfaces
    compactions = agent.context.generation(scope.session_id) if agent.context else 0
    key = (surfaces.generation, scope.model, scope.platform, compactions)
    kept = None if first else agent.prompt_sections.get(scope.session_id, key)
    if kept is not None:
        return kept
    info = {"session_id": scope.session_id, "platform": scope.platform, "model": scope.model}
    # a section may be plugin code: off the loop, bounded like a hook
    render = asyncio.to_thread(surfaces.render_sections, info)
    try:
        text = await asyncio.wait_for(render, agent.hooks.timeout)
    except TimeoutError:
        log.warning("plugin system prompt sections took over %gs; left out", agent.hooks.timeout)
        return ""
    agent.prompt_sections.keep(scope.session_id, key, text)
    return text


async def _tools(
    agent: AgentLoop, scope: TurnScope, toolsets: Toolsets | None, request: TurnRequest
) -> list[dict[str, Any]]:
    """The tools offered in this turn, pinned so a plugin reload during it changes nothing."""
    registry = agent.registry
    registry.pin()
    await registry.refresh_checks()  # re-run check_fns off the loop before building the list
    tools = registry.openai_tools(agent.settings.enabled_toolsets, scope.session_id)
    narrowing = toolsets or Toolsets()
    if toolsets is not None:
        allowed = allowed_names(agent, narrowing)
        tools = [t for t in tools if t["function"]["name"] in allowed]
    tools = tools + _provider_tools(agent, narrowing, request, tools)
    if agent.context is not None and "context_engine" not in narrowing.disabled:
        tools = tools + await agent.context.tools(
            scope.session_id, tools, [agent.settings.enabled_toolsets, narrowing.enabled]
        )
    return tools


def allowed_names(agent: AgentLoop, toolsets: Toolsets) -> set[str]:
    """The registry's tools the turn's `Toolsets` let through."""
    return {
        entry.name
        for entry in agent.registry.entries()
        if (toolsets.enabled is None or entry.toolset in toolsets.enabled)
        and entry.toolset not in toolsets.disabled
    }


def _provider_tools(
    agent: AgentLoop, toolsets: Toolsets, request: TurnRequest, offered: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The memory provider's tools, when the ``memory`` toolset is on for this turn (the
    daemon's ``tools.enabled_toolsets`` and the turn's narrowing, re-applied here); never
    one named like a tool already offered."""
    providers, active = agent.providers, request.provider
    if providers is None or active is None:
        return []
    for enabled in (agent.settings.enabled_toolsets, toolsets.enabled):
        if enabled is not None and "memory" not in enabled:
            return []
    if "memory" in toolsets.disabled or agent.registry.selection.why_not(("memory",), ""):
        return []
    taken = {t["function"]["name"] for t in offered}
    extra = [t for t in providers.openai_tools(active) if t["function"]["name"] not in taken]
    request.provider_tools = {t["function"]["name"] for t in extra}
    return extra
