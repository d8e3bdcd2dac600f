"""The context engine host: which engine each session uses, when it is called, and what is kept
of what it returns (docs/sessions.md, "The view model"; docs/hermes-compat.md §11.5).

Owns, per session: its engine (made by ``hermesd.context.engines``), started with
``update_model`` (the window from ``hermesd.model.context_length``) and ``on_session_start`` the
first time the session is used; the lock that lets one compaction at a time run on it; the
compactions of the running turn (at most `MAX_PER_TURN`); compaction off the hot path between
turns (none recorded when the engine gives back what it was given); the memory provider's
``on_pre_compress`` text; and, last before each request, a request over the window shortened to
fit it (``hermesd.context.fit``) with one ``context.warning`` the first time. A compaction is
recorded as a view (``SessionStore.compactions.record``), never by changing stored messages.

Failures: an engine call that raises, hangs or returns something that is not a message list is
logged with its traceback, the attached clients get a ``context.warning`` event, and the session
goes on with the built-in compressor; the turn is never failed by it. A turn is known here only
by the small `TurnWindow` value it hands to `before_request`, `after_response` and
`turn_finished` (``hermesd.agent.turn``). Not owned here: the turn loop, the built-in engine
itself (``hermesd.context.compressor``), storage (``hermesd.store``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.context.compaction import (
    FALLBACK_SUMMARY,
    REPEAT_WARNING,
    SUMMARY_ABORTED,
    Compaction,
    TurnWindow,
    compacted_event,
    memory_context,
    outcome,
    refused,
)
from hermesd.context.compressor import SummaryFailed, estimate_tokens, is_summary
from hermesd.context.engines import (
    ContextSettings,
    EngineFailed,
    Engines,
    SessionContext,
    supported_kwargs,
    valid_messages,
)
from hermesd.context.fit import shorten, too_small
from hermesd.model import context_length
from hermesd.model.client import ModelClient
from hermesd.model.stream import canonical_usage
from hermesd.plugins.context_engines import EngineRegistrations
from hermesd.runtime.workers import WorkTimeout
from hermesd.store.compactions import View, split_view
from hermesd.store.facade import SessionStore

if TYPE_CHECKING:
    from hermesd.memory.providers import MemoryProviders

log = logging.getLogger(__name__)

__all__ = ["ContextHost", "ContextSettings", "TurnWindow", "supported_kwargs"]

MAX_PER_TURN = 3
BACKGROUND_SHARE = 0.9  # an idle session this close to its threshold is compacted now

Emit = Callable[[dict[str, Any]], None]
Msgs = list[Any]


class ContextHost:
    """The engines of the daemon's sessions; one per daemon."""

    def __init__(
        self,
        store: SessionStore,
        client: ModelClient,
        settings: ContextSettings,
        *,
        home: Path,
        env: dict[str, str] | None = None,
        registrations: EngineRegistrations | None = None,
        providers: MemoryProviders | None = None,
    ) -> None:
        self.store = store
        self.client = client
        self.engines = Engines(client, settings, home=home, env=env, registrations=registrations)
        self.home = home
        self.providers = providers
        self.emit: Emit | None = None  # every attached client of a session (SessionService.emit)
        self.sessions: dict[str, SessionContext] = {}
        self._opening: dict[str, asyncio.Future[SessionContext]] = {}

    # --- engines -----------------------------------------------------------------------------

    async def open(self, session_id: str, *, platform: str, model: str) -> SessionContext:
        """The session's engine, made and started the first time (``update_model`` with the
        resolved window, then ``on_session_start``)."""
        ctx = self.sessions.get(session_id)
        if ctx is not None:
            return ctx
        opening = self._opening.get(session_id)
        if opening is None:  # a turn and a /compress at once still make one engine
            opening = asyncio.ensure_future(self._start(session_id, platform, model))
            self._opening[session_id] = opening
            opening.add_done_callback(lambda _: self._opening.pop(session_id, None))
        return await asyncio.shield(opening)

    async def _start(self, session_id: str, platform: str, model: str) -> SessionContext:
        engine, name, builtin = await self.engines.select(model)
        ctx = SessionContext(session_id, engine, name, builtin, model=model)
        length, source = await context_length.resolve(
            model,
            configured=self.settings.context_length,
            base_url=self.client.settings.base_url,
            api_key=self.client.settings.api_key,
        )
        ctx.context_length, ctx.length_source = length, source
        try:
            await self.engines.call(ctx, "update_model", model, length, **self.engines.endpoint())
            await self.engines.call(
                ctx,
                "on_session_start",
                session_id,
                hermes_home=str(self.home),
                platform=platform,
                model=model,
                context_length=length,
                conversation_id=session_id,
            )
        except EngineFailed as exc:
            await self._fall_back(ctx, exc)
        await self._refresh_status(ctx)
        self.sessions[session_id] = ctx
        return ctx

    async def _fall_back(self, ctx: SessionContext, exc: Exception) -> None:
        """The session's plugin engine failed: the built-in takes over, the clients hear of it."""
        failed = ctx.name
        ctx.engine, ctx.name, ctx.builtin = self.engines.builtin(ctx.model), "compressor", True
        ctx.tool_names = set()
        ctx.engine.update_model(ctx.model, ctx.context_length, **self.engines.endpoint())
        self.warn(
            ctx.session_id,
            f"The context engine '{failed}' failed ({exc}); this session continues with the "
            "built-in compressor.",
            engine=failed,
        )

    async def _refresh_status(self, ctx: SessionContext) -> None:
        try:
            status = await self.engines.call(ctx, "get_status")
        except EngineFailed:
            status = None
        ctx.status = {
            **(status if isinstance(status, dict) else {}),
            "engine": ctx.name,
            "context_length": ctx.context_length,
            "context_length_source": ctx.length_source,
        }

    def status(self, session_id: str) -> dict[str, Any] | None:
        """The session's engine status (``get_status()`` as of its last call), or None."""
        ctx = self.sessions.get(session_id)
        return dict(ctx.status) if ctx is not None else None

    def warn(
        self, session_id: str, message: str, *, turn_id: str | None = None, **data: Any
    ) -> None:
        """A ``context.warning`` event to every client attached to the session (and the log);
        with the ``turn_id`` of the turn it concerns, when one does."""
        log.warning("session %s: %s", session_id, message)
        if self.emit is not None:
            event = {"type": "context.warning", "session_id": session_id, "turn_id": turn_id}
            self.emit({**event, "message": message, **data})

    # --- compaction --------------------------------------------------------------------------

    async def compact(
        self,
        session_id: str,
        *,
        force: bool = False,
        focus: str | None = None,
        current_tokens: int | None = None,
        reason: str = "threshold",
        turn_id: str | None = None,
    ) -> dict[str, Any]:
        """Run the session's engine over what the model is sent of it and keep the result as a
        view. Returns ``{compacted, engine, replaced, messages_before, messages_after, ...}``."""
        ctx = self.sessions.get(session_id)
        if ctx is None:
            raise KeyError(session_id)
        ask = Compaction(force, focus, current_tokens, reason, turn_id)
        async with ctx.lock:
            return await self._compact_locked(ctx, ask)

    async def _compact_locked(self, ctx: SessionContext, ask: Compaction) -> dict[str, Any]:
        sid = ctx.session_id
        view = await self.store.run(self.store.messages.view, sid)
        result = outcome(ctx.name, len(view.messages), ask.reason)
        if not view.messages:
            return refused(result, "the session has no messages")
        inputs = copy.deepcopy(view.messages)
        try:
            if ask.force and not await self.engines.call(ctx, "has_content_to_compress", inputs):
                return refused(result, "nothing between the protected head and tail to compact")
        except EngineFailed:
            pass  # compress() will tell
        kwargs = supported_kwargs(
            ctx.engine.compress,
            current_tokens=ask.current_tokens or estimate_tokens(view.messages),
            focus_topic=ask.focus,
            force=ask.force,
            memory_context=await memory_context(self.providers, sid, view.messages),
        )
        log.info(
            "compacting session %s with context engine '%s' (%s; %d messages; arguments: %s)",
            sid,
            ctx.name,
            ask.reason,
            len(inputs),
            ", ".join(["messages", *kwargs]),
        )
        output, why_not = await self._compress(ctx, inputs, kwargs)
        if why_not is not None:
            return refused(result, why_not)
        if output == view.messages:  # nothing new to compact: no view, no event, no warning
            return refused(result, "the engine kept every message")
        split = split_view(view.messages, view.seqs, output, view.upto_seq)
        if split is None:
            return refused(result, "the engine kept every message")
        if not any(s is not None and view.upto_seq < s <= split[1] for s in view.seqs):
            # right after a compaction: storing another would replace nothing
            return refused(result, "nothing new since the last compaction")
        await self._record(ctx, view, split, ask, result)
        return result

    async def _compress(
        self, ctx: SessionContext, inputs: list[dict[str, Any]], kwargs: dict[str, Any]
    ) -> tuple[Any, str | None]:
        """The engine's ``compress`` output, or why there is none (each failure reported)."""
        sid, timeout = ctx.session_id, self.settings.timeout
        try:
            if ctx.builtin:  # its summary request must not hold the event loop
                call = functools.partial(ctx.engine.compress, inputs, **kwargs)
                output = await self.engines.threads.run(call, timeout, ctx.name)
            else:
                output = await self.engines.call(ctx, "compress", inputs, timeout=timeout, **kwargs)
        except SummaryFailed as exc:
            self.warn(sid, SUMMARY_ABORTED.format(exc), engine=ctx.name)
            return None, "summary failed"
        except WorkTimeout:
            log.error("the built-in compressor did not finish within %.0f s", timeout)
            self.warn(sid, "Compaction took too long and was abandoned; nothing was compacted.")
            return None, "timed out"
        except EngineFailed as exc:
            await self._fall_back(ctx, exc)
            return None, str(exc)
        except Exception as exc:  # the built-in's own bug: the turn goes on uncompressed
            log.exception("the built-in compressor failed on session %s", sid)
            self.warn(sid, f"Compaction failed ({type(exc).__name__}: {exc}); nothing compacted.")
            return None, "the compressor failed"
        if not valid_messages(output):
            failed = EngineFailed(f"compress() returned {type(output).__name__}, not messages")
            await self._fall_back(ctx, failed)
            return None, "the engine returned no messages"
        return output, None

    async def _record(
        self,
        ctx: SessionContext,
        view: View,
        split: tuple[list[dict[str, Any]], int],
        ask: Compaction,
        result: dict[str, Any],
    ) -> None:
        """Keep a compaction as the session's view; tell the memory provider and the clients."""
        sid, (prefix, upto) = ctx.session_id, split
        replaced = sum(1 for s in view.seqs if s is not None and view.upto_seq < s <= upto)
        summary = next((str(m["content"]) for m in prefix if is_summary(m)), None)
        error = getattr(ctx.engine, "last_summary_error", None) if ctx.builtin else None
        await self.store.run(
            self.store.compactions.record,
            sid,
            prefix,
            upto,
            engine=ctx.name,
            summary=summary,
            replaced=replaced,
            fallback=bool(error),
            focus=ask.focus,
            reason=ask.reason,
        )
        ctx.generation += 1
        count = int(getattr(ctx.engine, "compression_count", 0) or 0)
        result.update(
            compacted=True,
            replaced=replaced,
            messages_after=len(prefix) + sum(1 for s in view.seqs if s is not None and s > upto),
            compression_count=count,
            summary_fallback=bool(error),
        )
        await self._refresh_status(ctx)
        if self.providers is not None:  # the reference tells the memory provider (in place)
            self.providers.on_session_switch(sid, sid, reason="compression")
        if self.emit is not None:
            self.emit(compacted_event(sid, ask.turn_id, result))
        if error:
            self.warn(sid, FALLBACK_SUMMARY.format(error=error, n=replaced), engine=ctx.name)
        if count >= 2:
            self.warn(sid, REPEAT_WARNING.format(n=count), compression_count=count)

    # --- call points of a turn (hermesd.agent.turn) ------------------------------------------

    def generation(self, session_id: str) -> int:
        """The session's compactions so far (read before a turn reads its history)."""
        ctx = self.sessions.get(session_id)
        return ctx.generation if ctx is not None else 0

    def window(
        self,
        ids: tuple[str, str],
        user_message: str,
        api_user: dict[str, Any],
        user_seq: int,
        generation: int,
    ) -> TurnWindow:
        """The context host's record of a turn that starts (ids: session and turn)."""
        session_id, turn_id = ids
        return TurnWindow(session_id, turn_id, user_message, api_user, user_seq, generation)

    async def before_request(
        self,
        window: TurnWindow,
        messages: list[dict[str, Any]],
        history: list[dict[str, Any]],
        tools: list[dict[str, Any]],
    ) -> tuple[list[dict[str, Any]], list[Any] | None]:
        """Before a model request: compact when the engine says so (at most `MAX_PER_TURN` a
        turn). Returns the turn's messages (rebuilt from the new view after a compaction) and
        the request-only selection of ``select_context`` (None: send those messages)."""
        ctx = self.sessions.get(window.session_id)
        if ctx is None:
            return messages, None
        if ctx.generation != window.generation:  # a compaction between turns finished
            messages = await self._rebuild(window, ctx, messages)
        estimate = estimate_tokens(messages, tools)
        measured = window.measured
        if measured is not None:  # the last response's real count, plus what came after it
            estimate = measured[0] + estimate_tokens(messages[measured[1] :])
        if window.compactions < MAX_PER_TURN and await self._due(ctx, estimate, measured is None):
            window.compactions += 1
            done = await self.compact(
                window.session_id, current_tokens=estimate, turn_id=window.turn_id
            )
            if done["compacted"]:
                messages = await self._rebuild(window, ctx, messages)
        chosen = await self.engines.select_context(ctx, messages, history, window.user_message)
        sent = chosen if chosen is not None else messages
        return messages, self._fit(ctx, window.turn_id, sent, tools, chosen)

    def _fit(
        self, ctx: SessionContext, turn_id: str, sent: Msgs, tools: Msgs, chosen: Msgs | None
    ) -> Msgs | None:
        """What is sent, shortened to fit the window when it is over it (the first time, the
        clients are told); ``chosen`` as it was when it fits."""
        fitted = shorten(ctx, sent, tools)
        if fitted is None:
            return chosen
        if not ctx.window_warned:
            ctx.window_warned = True
            facts = {**fitted.facts(), "context_length": ctx.context_length}
            self.warn(ctx.session_id, too_small(ctx, fitted), turn_id=turn_id, **facts)
        return fitted.messages

    async def _due(self, ctx: SessionContext, estimate: int, rough: bool) -> bool:
        """Whether the engine wants a compaction now; it may ask to wait for a real count
        rather than act on a ``rough`` one."""
        try:
            defer = rough and bool(
                await self.engines.call(ctx, "should_defer_preflight_to_real_usage", estimate)
            )
            return not defer and bool(await self.engines.call(ctx, "should_compress", estimate))
        except EngineFailed as exc:
            await self._fall_back(ctx, exc)
            return bool(ctx.engine.should_compress(estimate))

    async def _rebuild(
        self, window: TurnWindow, ctx: SessionContext, messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        view = await self.store.run(self.store.messages.view, window.session_id)
        rebuilt = [messages[0]]
        for msg, seq in zip(view.messages, view.seqs, strict=True):
            rebuilt.append(window.api_user if seq == window.user_seq else msg)
        window.measured = None
        window.generation = ctx.generation
        return rebuilt

    async def after_response(
        self, window: TurnWindow, usage: dict[str, Any] | None, message_count: int
    ) -> None:
        """After every model response: ``update_from_response`` with the response's counts
        (``prompt_tokens``, ``completion_tokens``, ``total_tokens`` and the reference's buckets),
        ``{}`` without usage; ``message_count`` is how many messages the turn had sent."""
        ctx = self.sessions.get(window.session_id)
        if ctx is None:
            return
        counts: dict[str, Any] = {}
        if usage:
            counts = {**usage, **(canonical_usage(usage) or {})}
            counts.setdefault("completion_tokens", int(usage.get("completion_tokens") or 0))
            if usage.get("prompt_tokens"):
                window.measured = (int(usage["prompt_tokens"]), message_count)
        try:
            await self.engines.call(ctx, "update_from_response", counts)
        except EngineFailed as exc:
            await self._fall_back(ctx, exc)
        await self._refresh_status(ctx)

    async def turn_finished(
        self,
        window: TurnWindow,
        completed: bool,
        history: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        usage: dict[str, int],
    ) -> None:
        """``on_turn_complete`` when the engine has it; then, for an idle session close to its
        threshold, a compaction in the background so the next turn does not wait for it."""
        ctx = self.sessions.get(window.session_id)
        if ctx is None or not completed:
            return
        if hasattr(ctx.engine, "on_turn_complete"):
            with contextlib.suppress(EngineFailed):  # best effort, as the contract says
                await self.engines.call(ctx, "on_turn_complete", list(history), usage=dict(usage))
        threshold = int(getattr(ctx.engine, "threshold_tokens", 0) or 0)
        measured = window.measured
        if not self.settings.background or threshold <= 0 or measured is None:
            return
        tokens = measured[0] + estimate_tokens(messages[measured[1] :])
        if tokens < threshold * BACKGROUND_SHARE or window.compactions >= MAX_PER_TURN:
            return
        if ctx.background is not None and not ctx.background.done():
            return
        ctx.background = asyncio.get_running_loop().create_task(
            self._background(window.session_id, tokens)
        )

    async def _background(self, session_id: str, tokens: int) -> None:
        try:
            await self.compact(session_id, current_tokens=tokens, reason="background")
        except Exception:
            log.exception("background compaction of session %s failed", session_id)

    # --- engine tools ------------------------------------------------------------------------

    async def tools(
        self, session_id: str, offered: list[dict[str, Any]], enabled: list[list[str] | None]
    ) -> list[dict[str, Any]]:
        """The engine's tools (``get_tool_schemas``) when every setting in ``enabled`` lets the
        ``context_engine`` toolset in; never one named like a tool already offered."""
        ctx = self.sessions.get(session_id)
        if ctx is None or any(e is not None and "context_engine" not in e for e in enabled):
            return []
        return await self.engines.tools(ctx, offered)

    def owns_tool(self, session_id: str, name: str) -> bool:
        """Whether ``name`` is one of the tools the session's engine offered."""
        ctx = self.sessions.get(session_id)
        return ctx is not None and name in ctx.tool_names

    async def call_tool(
        self, session_id: str, name: str, arguments: str, messages: list[dict[str, Any]]
    ) -> str:
        """``handle_tool_call(name, args, messages=…)``; an error result when it fails."""
        ctx = self.sessions[session_id]
        return await self.engines.call_tool(ctx, name, arguments, messages, self.settings.timeout)

    # --- session boundaries ------------------------------------------------------------------

    async def end_session(self, session_id: str) -> None:
        """A real boundary (deleted, daemon stopping): ``on_session_end(id, messages)``."""
        ctx = self.sessions.pop(session_id, None)
        if ctx is None:
            return
        if ctx.background is not None:
            ctx.background.cancel()
        try:
            messages = await self.store.run(self.store.messages.history, session_id)
        except Exception:
            messages = []
        with contextlib.suppress(EngineFailed):
            await self.engines.call(ctx, "on_session_end", session_id, messages)

    async def reset_session(self, session_id: str) -> None:
        """``/new`` left the session: ``on_session_reset()``; its engine is dropped."""
        ctx = self.sessions.pop(session_id, None)
        if ctx is None:
            return
        with contextlib.suppress(EngineFailed):
            await self.engines.call(ctx, "on_session_reset")

    @property
    def settings(self) -> ContextSettings:
        return self.engines.settings

    def reload(self, config: Any) -> None:
        """New settings apply to sessions opened from now on."""
        self.engines.settings = ContextSettings.from_config(config)
        context_length.forget()

    async def close(self) -> None:
        """End every session's engine, then stop the threads (a hung engine's is left)."""
        for sid in list(self.sessions):
            await self.end_session(sid)
        await self.engines.close()


# --- a request the endpoint refused as over its window (hermesd.agent.recovery) -------------


async def after_overflow(
    host: ContextHost,
    window: TurnWindow,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    real_window: int | None,
) -> list[dict[str, Any]] | None:
    """The endpoint refused a request of the turn ``window`` as over its window: learn the
    window when the error said it (``real_window``, when smaller than the one the session
    had), compact now (within the turn's `MAX_PER_TURN`) and return the turn's messages
    rebuilt from the new view; None when nothing could be compacted."""
    ctx = host.sessions.get(window.session_id)
    if ctx is None or window.compactions >= MAX_PER_TURN:
        return None
    if real_window is not None and 0 < real_window < ctx.context_length:
        await _resize(host, ctx, real_window)
    window.compactions += 1
    estimate = estimate_tokens(messages, tools)
    done = await host.compact(
        window.session_id,
        force=True,
        current_tokens=estimate,
        reason="overflow",
        turn_id=window.turn_id,
    )
    if not done["compacted"]:
        return None
    return await host._rebuild(window, ctx, messages)


async def _resize(host: ContextHost, ctx: SessionContext, length: int) -> None:
    """The session's window is ``length`` tokens, as its endpoint said in an error."""
    log.warning(
        "session %s: the endpoint says the window is %d tokens (it was taken as %d)",
        ctx.session_id,
        length,
        ctx.context_length,
    )
    ctx.context_length, ctx.length_source = length, "the endpoint's error"
    ctx.window_warned = False
    try:
        await host.engines.call(ctx, "update_model", ctx.model, length, **host.engines.endpoint())
    except EngineFailed as exc:
        await host._fall_back(ctx, exc)
    await host._refresh_status(ctx)
