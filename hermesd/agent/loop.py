"""One turn of one session: the OpenAI tool-calling loop.

Owns the order of a turn: commit the user message, run the turn's hooks (docs/hermes-compat.md §5),
let the session's context engine check each request (``hermesd.context.host``), stream model
responses, run the model's tool calls through the tool registry in the model's
order, commit every message as soon as it exists (each write awaited before the turn goes
on, so messages are stored in the order they happened), and report progress as events. It does not
own transport (events go to an ``emit`` callback), the tool pipeline (the registry's job:
hooks, approvals, argument parsing, unknown tools) or the one-turn-per-session rule (the
daemon's ``SessionBusy``).

Invariant: the stored history is valid for the next model request whatever happens: a tool
runs only after the message calling it is committed, its result is committed before the next
request, and a cancelled or failed turn answers its unfinished tool calls with error results.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from hermesd import redact
from hermesd.agent.budget import BudgetExceeded, UsageMeter
from hermesd.model.client import (
    Completion,
    ConfigLike,
    ModelClient,
    ModelError,
    ModelNotConfigured,
    ModelResponseInvalid,
    RetryInfo,
)
from hermesd.model.fastjson import valid_text
from hermesd.model.response import as_chat_completion, completion_from_response
from hermesd.model.stream import canonical_usage
from hermesd.plugins.host import ReloadGate
from hermesd.runtime.hooks import HookBus
from hermesd.runtime.middleware import MiddlewareBus, MiddlewareTimeout
from hermesd.store.sessions import (
    MessageRecord,
    SessionNotFound,
    SessionStore,
    StorageUnavailable,
)
from hermesd.store.usage import RequestUsage
from hermesd.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from hermesd.context.host import ContextHost
    from hermesd.memory.builtin import BuiltinMemory
    from hermesd.memory.providers import ActiveProvider, MemoryProviders

log = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], None]
TurnStatus = Literal["completed", "cancelled", "failed"]

DEFAULT_SYSTEM_PROMPT = (
    "You are Hermes, a helpful assistant with access to tools. Use a tool when it gives a "
    "more reliable answer than guessing (arithmetic, files, commands), then answer the user "
    "plainly and concisely."
)
CANCELLED_RESULT = "Tool call cancelled: the user stopped this turn before it finished"
FAILED_RESULT = "Tool call abandoned: the turn failed before it finished"
PREVIEW_CHARS = 200


@dataclass
class AgentSettings:
    """Per-daemon settings of the loop (``agent.*`` and ``tools.enabled_toolsets``)."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    skills_index: str = ""
    max_iterations: int = 25
    platform: str = "cli"
    enabled_toolsets: list[str] | None = None

    @classmethod
    def from_config(cls, config: ConfigLike, *, skills_index: str = "") -> AgentSettings:
        """Read ``agent.system_prompt``, ``agent.max_iterations``, ``tools.enabled_toolsets``."""
        return cls(
            system_prompt=config.get("agent.system_prompt") or DEFAULT_SYSTEM_PROMPT,
            skills_index=skills_index,
            max_iterations=max(1, int(config.get("agent.max_iterations", 25))),
            enabled_toolsets=config.get("tools.enabled_toolsets"),
        )

    def system_message(self) -> dict[str, Any]:
        text = self.system_prompt.strip()
        if self.skills_index.strip():
            text += "\n\n" + self.skills_index.strip()
        return {"role": "system", "content": text}


@dataclass(frozen=True)
class Toolsets:
    """Which toolsets one turn may use: ``enabled`` (None: the daemon's setting) minus
    ``disabled``, which also refuses a call the model makes to a tool it was not offered."""

    enabled: list[str] | None = None
    disabled: frozenset[str] = frozenset()


@dataclass
class TurnResult:
    """How a turn ended; ``final_text`` is what was stored as the answer."""

    turn_id: str
    status: TurnStatus
    final_text: str | None = None
    error: str | None = None
    error_type: str | None = None
    exit_reason: str = "completed"  # completed | max_iterations | cancelled | failed
    iterations: int = 0
    usage: dict[str, int] = field(
        default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    )
    cost_usd: float | None = None  # of the requests priced (hermesd.agent.budget)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(6)}"


def pre_llm_context(results: list[Any]) -> str:
    """Join ``pre_llm_call`` results: ``{"context": x}`` or non-empty strings, blank-line apart."""
    parts = []
    for item in results:
        if isinstance(item, dict) and item.get("context"):
            parts.append(str(item["context"]))
        elif isinstance(item, str) and item.strip():
            parts.append(item)
    return "\n\n".join(parts)


def _status_of(result: str) -> str:
    try:
        parsed = json.loads(result)
    except ValueError:
        return "ok"
    return "error" if isinstance(parsed, dict) and "error" in parsed else "ok"


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
    ) -> TurnResult:
        """Answer ``user_message`` in the session; cancel the task to stop it cleanly.

        ``toolsets`` narrows the tools of this turn (a scheduled run's). ``sender_id`` (the
        Unix uid of the client, as text) and ``user_name`` say who talks; ``on_session_start``
        and ``pre_llm_call`` get them."""
        turn = _Turn(
            self,
            session_id,
            user_message,
            emit,
            sender_id,
            platform or self.settings.platform,
            turn_id or new_id("turn"),
        )
        turn.toolsets = toolsets
        turn.user_name = user_name
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
    ) -> Completion:
        """One model request for plugin code (``ctx.llm``, ``call_llm``): nothing is stored,
        no tool runs; ``pre_api_request``/``post_api_request`` and middleware see it as they
        see a turn's requests."""
        self.check_ready()
        turn = _Turn(
            self, session_id, "", None, None, platform or self.settings.platform, new_id("turn")
        )
        turn.model = model or self.client.settings.model or ""
        turn.messages = [dict(m) for m in messages]
        turn.result.iterations = 1
        completion = await turn._request(list(tools or ()), extra=options)
        usage, turn._usage = turn._usage, None
        if usage is not None:  # no message stores it: a row of its own
            await self.store.run(self.meter.record, session_id or None, turn.turn_id, usage)
        return completion

    def complete_blocking(
        self, messages: list[dict[str, Any]], timeout: float | None = None, **kwargs: Any
    ) -> Completion:
        """`complete` from a plugin thread, run on the daemon's loop."""
        loop = self.registry.loop
        if loop is None or not loop.is_running():
            raise ModelNotConfigured("the daemon's event loop is not running")
        future = asyncio.run_coroutine_threadsafe(self.complete(messages, **kwargs), loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise


class _Turn:
    """The state of one running turn."""

    def __init__(
        self,
        loop: AgentLoop,
        session_id: str,
        user_message: str,
        emit: Emit | None,
        sender_id: str | None,
        platform: str,
        turn_id: str,
    ) -> None:
        self.loop, self.store, self.hooks = loop, loop.store, loop.hooks
        self.session_id, self.user_message = session_id, user_message
        self._emit_fn, self.sender_id, self.platform = emit, sender_id, platform
        self.user_name: str | None = None
        self._last_request: tuple[str, dict[str, Any]] | None = None  # id, what was sent
        self.result = TurnResult(turn_id=turn_id, status="completed")
        self.model = ""
        self._usage: RequestUsage | None = None  # the last completion's, not yet stored
        self._observers: list[asyncio.Task[Any]] = []  # post_tool_call hooks still running
        self.messages: list[dict[str, Any]] = []  # what the model is sent
        self.stored_history: list[dict[str, Any]] = []  # the same, minus system and context
        self.toolsets: Toolsets | None = None
        self.provider: ActiveProvider | None = None  # the session's memory provider
        self.provider_tools: set[str] = set()  # its tools offered in this turn
        # the context engine's view of this turn (hermesd.context.host)
        self.api_user: dict[str, Any] = {}  # the user message as sent (with recalled context)
        self.user_seq = 0  # ... and its stored seq
        self.context_generation = 0  # the session's compactions when its history was read
        self.measured_tokens: tuple[int, int] | None = None  # real prompt tokens, at len(messages)
        self.compactions = 0  # automatic compactions in this turn

    @property
    def turn_id(self) -> str:
        return self.result.turn_id

    def emit(self, kind: str, **data: Any) -> None:
        if self._emit_fn is None:
            return
        try:
            self._emit_fn(
                {"type": kind, "session_id": self.session_id, "turn_id": self.turn_id, **data}
            )
        except Exception:  # a broken listener must not break the turn
            log.exception("turn event listener failed")

    def hooked(self, name: str) -> bool:
        """Whether a callback is registered for ``name`` (else skip building its arguments)."""
        has = getattr(self.hooks, "has", None)
        return True if has is None else bool(has(name))

    async def hook(self, name: str, **kwargs: Any) -> list[Any]:
        if not self.hooked(name):
            return []
        await self.settle_observers()
        return await self.hooks.invoke(
            name,
            session_id=self.session_id,
            task_id=self.session_id,
            turn_id=self.turn_id,
            model=self.model,
            platform=self.platform,
            **kwargs,
        )

    async def settle_observers(self) -> None:
        """Wait for the ``post_tool_call`` callbacks still running: hooks of one turn run in
        the order they were called, whatever ran in between."""
        observers, self._observers = self._observers, []
        for task in observers:
            try:
                await task
            except Exception:  # the hook bus reports callback failures itself
                log.exception("post_tool_call observers failed")

    async def db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` on the store's thread and wait for it (committed when it returns)."""
        return await self.store.run(fn, *args, **kwargs)

    async def commit(self, role: str, content: str | None, **fields: Any) -> MessageRecord:
        """Commit one message of this turn and wait for it; the usage of the completion that
        produced it (its row and the session's counters) is stored in the same transaction."""
        usage, self._usage = self._usage, None
        store, meter = self.store, self.loop.meter

        def write() -> tuple[MessageRecord, float | None]:
            record = store.append_message(
                self.session_id,
                role,
                content,
                turn_id=self.turn_id,
                usage=usage.counters() if usage else None,
                **fields,
            )
            cost = None if usage is None else meter.record(self.session_id, self.turn_id, usage)
            return record, cost

        record, cost = await self.store.run(store.run_in_transaction, write)
        self._add_cost(cost)
        return record

    def _add_cost(self, cost: float | None) -> None:
        if cost is not None:
            self.result.cost_usd = (self.result.cost_usd or 0.0) + cost

    async def run(self) -> TurnResult:
        self.emit("turn.started", user_message=self.user_message)
        try:
            self.model = self.loop.client.settings.model or ""
            self.loop.check_ready()
            await self._turn()
        except asyncio.CancelledError:
            await self._finish("cancelled", CANCELLED_RESULT)
            raise
        except (ModelError, SessionNotFound, StorageUnavailable, BudgetExceeded) as exc:
            self._fail(exc)
            await self._finish("failed", FAILED_RESULT)
        except Exception as exc:
            log.exception("turn %s of session %s failed", self.turn_id, self.session_id)
            self._fail(exc)
            await self._finish("failed", FAILED_RESULT)
        else:
            await self._finish("completed")
        return self.result

    def _fail(self, exc: Exception) -> None:
        self.result.status = "failed"
        known = isinstance(exc, ModelError | SessionNotFound | StorageUnavailable | BudgetExceeded)
        self.result.error = str(exc) if known else (f"internal error: {type(exc).__name__}: {exc}")
        self.result.error_type = type(exc).__name__

    async def _finish(self, status: TurnStatus, reason: str = "") -> None:
        self.result.status = status
        if status != "completed":
            self.result.exit_reason = status
            store, usage, self._usage = self.store, self._usage, None
            meter = self.loop.meter

            def close() -> float | None:  # the last completion's usage, if its message never was
                cost = None
                if usage is not None:
                    store.add_usage(self.session_id, *usage.counters())
                    cost = meter.record(self.session_id, self.turn_id, usage)
                store.close_dangling_tool_calls(self.session_id, reason, self.turn_id)
                return cost

            try:  # shielded: a second cancel must not leave unanswered tool calls behind
                self._add_cost(await asyncio.shield(self.db(close)))
            except Exception:
                log.exception("could not close tool calls of session %s", self.session_id)
        if status == "completed" and self.loop.meter.settings.active:
            try:  # a budget this turn crossed is announced now, not at the next request
                await self.loop.meter.check(self.session_id, self.model, self.emit, stop=False)
            except Exception:
                log.exception("checking the budgets after turn %s failed", self.turn_id)
        await self.settle_observers()
        if self.loop.context is not None:
            try:
                await self.loop.context.turn_finished(self, status == "completed")
            except Exception:  # the engine's business must not fail a finished turn
                log.exception("context engine after turn %s failed", self.turn_id)
        if status == "completed" and self.provider is not None and self.loop.providers:
            self.loop.providers.turn_done(
                self.provider, self.user_message, self.result.final_text or "", self.stored_history
            )
        await self.hook(
            "on_session_end",
            completed=status == "completed",
            interrupted=status == "cancelled",
            failed=status == "failed",
            turn_exit_reason=self.result.exit_reason,
            reason=self.result.exit_reason,
            api_request_id=self._last_request[0] if self._last_request else None,
        )
        self.emit(
            "turn.finished",
            status=status,
            exit_reason=self.result.exit_reason,
            error=self.result.error,
            error_type=self.result.error_type,
            iterations=self.result.iterations,
            usage=self.result.usage,
            cost_usd=self.result.cost_usd,
            final_text=self.result.final_text,
        )

    async def _turn(self) -> None:
        store = self.store
        if self.loop.reloads is not None:  # hooks and tools half unloaded: wait for them
            await self.loop.reloads.wait()

        engines = self.loop.context
        known = engines.sessions.get(self.session_id) if engines is not None else None
        self.context_generation = known.generation if known is not None else 0

        # one trip to the DB thread, and one transaction, not four
        def begin() -> tuple[Any, list[dict[str, Any]], int]:
            session = store.get_session(self.session_id)  # SessionNotFound: nothing stored
            store.close_dangling_tool_calls(self.session_id)
            history = store.history(self.session_id)
            record = store.append_message(
                self.session_id, "user", self.user_message, turn_id=self.turn_id
            )
            return session, history, record["seq"]

        session, prior, self.user_seq = await self.db(store.run_in_transaction, begin)
        self.model = session["model"] or self.model
        if engines is not None:  # the session's engine, started the first time
            await engines.open(self.session_id, platform=self.platform, model=self.model)
        first = session["message_count"] == 0
        if first:
            await self.hook(
                "on_session_start",
                sender_id=self.sender_id,
                user_id=self.sender_id,
                user_name=self.user_name,
            )
        context = (
            pre_llm_context(
                await self.hook(
                    "pre_llm_call",
                    user_message=self.user_message,
                    conversation_history=list(prior),
                    is_first_turn=first,
                    sender_id=self.sender_id,
                    user_id=self.sender_id,
                    user_name=self.user_name,
                )
            )
            if self.hooked("pre_llm_call")
            else ""
        )
        context = redact.redact(context) if context else ""  # plugin text bound for the model
        # no provider for scheduled runs: the reference runs cron with skip_memory=True
        providers = self.loop.providers if self.platform != "cron" else None
        if providers is not None:  # the provider's recall: the API copy only, never stored
            self.provider = await providers.start(
                self.session_id,
                platform=self.platform,
                user_id=self.sender_id,
                user_name=self.user_name,
            )
        if providers is not None and self.provider is not None:
            recalled = await providers.recall(self.provider, self.user_message)
            if recalled:
                context = context + "\n\n" + recalled if context else recalled
        api_user = {
            "role": "user",
            "content": self.user_message + ("\n\n" + context if context else ""),
        }
        system = self.loop.settings.system_message()
        if self.loop.memory is not None:  # the memory snapshot taken when the session started
            block = await self.loop.memory.prompt_block(self.session_id, fresh=first)
            if block:
                system = {**system, "content": system["content"] + "\n\n" + block}
        if providers is not None and self.provider is not None:
            block = await providers.system_prompt_block(self.provider)
            if block:
                system = {**system, "content": system["content"] + "\n\n" + block}
        self.messages = [system, *prior, api_user]
        self.api_user = api_user
        self.stored_history = [*prior, {"role": "user", "content": self.user_message}]
        pin = getattr(self.loop.registry, "pin", None)
        if pin is not None:  # a plugin reload during this turn must not change its tools
            pin()
        refresh = getattr(self.loop.registry, "refresh_checks", None)
        if refresh is not None:  # re-run check_fns off the loop before building the list
            await refresh()
        tools = self.loop.registry.openai_tools(self.loop.settings.enabled_toolsets)
        if self.toolsets is not None:
            tools = self._narrowed(tools)
        tools = tools + self._provider_tools(tools)
        if engines is not None and "context_engine" not in (self.toolsets or Toolsets()).disabled:
            narrowing = (self.toolsets or Toolsets()).enabled
            tools = tools + await engines.tools(
                self.session_id, tools, [self.loop.settings.enabled_toolsets, narrowing]
            )
        limit = self.loop.settings.max_iterations
        while self.result.iterations < limit:
            self.result.iterations += 1
            completion = await self._request_in_context(tools)
            calls = completion.tool_calls
            if not calls:
                await self._answer(completion.content)
                return
            await self.commit("assistant", completion.content or None, tool_calls=calls)
            self._remember(completion.message)
            for call in calls:
                await self._run_tool(call)
        self.result.exit_reason = "max_iterations"
        await self._store_answer(
            f"I stopped because this turn reached the limit of {limit} model calls "
            "(agent.max_iterations in config.yaml). Ask me to continue, or raise the limit."
        )

    async def _request_in_context(self, tools: list[dict[str, Any]]) -> Completion:
        """`_request` between the context engine's checks: compaction before it (and its
        request-only ``select_context``), ``update_from_response`` after it."""
        context = self.loop.context
        if context is None:
            return await self._request(tools)
        chosen = await context.before_request(self, tools)
        if chosen is None:
            completion = await self._request(tools)
        else:
            kept, self.messages = self.messages, chosen
            try:
                completion = await self._request(tools)
            finally:
                self.messages = kept
        await context.after_response(self, completion.usage)
        return completion

    async def _request(
        self, tools: list[dict[str, Any]], extra: dict[str, Any] | None = None
    ) -> Completion:
        request_id = new_id("req")
        settings = self.loop.client.settings
        # budget.*: announced once crossed; with action stop, no request past it
        await self.loop.meter.check(self.session_id, self.model, self.emit)
        base = {
            "api_request_id": request_id,
            "api_call_count": self.result.iterations,
            "provider": getattr(settings, "provider", "custom"),
        }
        middleware = getattr(self.hooks, "middleware", None)
        request: dict[str, Any] = {"model": self.model, "messages": self.messages, "stream": True}
        if tools:
            request["tools"] = tools
        if extra:
            request.update({k: v for k, v in extra.items() if k not in request})
        wrapped = middleware is not None and (
            middleware.has("llm_request") or middleware.has("llm_execution")
        )
        context: dict[str, Any] = {}
        trace: list[dict[str, Any]] = []
        if wrapped:
            assert middleware is not None
            context = {
                "session_id": self.session_id,
                "task_id": self.session_id,
                "turn_id": self.turn_id,
                "api_request_id": request_id,
                "platform": self.platform,
                "model": self.model,
                "provider": base["provider"],
                "base_url": getattr(settings, "base_url", None) or "",
                "api_mode": "chat_completions",
                "api_call_count": self.result.iterations,
            }
            rewritten = await middleware.apply_request("llm_request", "request", request, context)
            request, trace = rewritten.payload, rewritten.trace
            context["original_request"] = rewritten.original
        self._last_request = (request_id, request)
        if self.hooked("pre_api_request"):  # copying the request costs; skip it unhooked
            messages = request.get("messages")
            messages = messages if isinstance(messages, list) else self.messages
            chars = sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, dict))
            await self.hook(
                "pre_api_request",
                **base,
                base_url=getattr(settings, "base_url", None),
                api_mode="chat_completions",
                request_messages=list(messages),
                message_count=len(messages),
                tool_count=len(request.get("tools") or ()),
                approx_input_tokens=chars // 4,
                request_char_count=chars,
                max_tokens=request.get("max_tokens"),
                user_message=self.user_message,
                conversation_history=list(self.stored_history),
                started_at=time.time(),
                retry_count=0,
                request={**request, "messages": list(messages)},
                middleware_trace=trace,
            )
        started, started_at = time.monotonic(), time.time()
        retries = 0
        shown = redact.StreamRedactor()  # a secret split across two deltas is still caught

        def on_event(event: dict[str, Any]) -> None:
            if event["type"] == "text.delta":
                text = shown.feed(event["text"])
                if text:
                    self.emit("text.delta", text=text)

        async def on_retry(info: RetryInfo) -> None:
            nonlocal retries, shown
            retries = info.attempt
            shown = redact.StreamRedactor()  # what it held belonged to the failed attempt
            self.emit(
                "model.retry",
                attempt=info.attempt,
                max_attempts=info.max_attempts,
                delay=info.delay,
                error=str(info.error),
                discard_partial=info.discarded_output,
            )
            await self._request_error(base, info.error, info.duration, retries - 1, retryable=True)

        async def send(payload: Any) -> Completion:
            if not isinstance(payload, dict):
                payload = request
            messages = payload.get("messages")
            return await self.loop.client.stream_completion(
                messages if isinstance(messages, list) else self.messages,
                payload.get("tools") or None,
                model=str(payload.get("model") or self.model),
                on_event=on_event,
                on_retry=on_retry,
                extra=payload,
            )

        try:
            if wrapped:
                assert middleware is not None
                completion = await self._wrapped_send(middleware, send, request, context, trace)
            else:
                completion = await self.loop.client.stream_completion(
                    self.messages,
                    tools or None,
                    model=self.model,
                    on_event=on_event,
                    on_retry=on_retry,
                    extra=extra,
                )
        except ModelError as exc:
            await self._request_error(
                base, exc, time.monotonic() - started, retries, retryable=False
            )
            raise
        rest = shown.flush()
        if rest:
            self.emit("text.delta", text=rest)
        buckets = canonical_usage(completion.usage)
        # stored with the message this completion produced (``commit``)
        self._usage = used = RequestUsage.from_buckets(self.model, buckets, completion.model)
        if self.hooked("post_api_request"):
            await self.hook(
                "post_api_request",
                **base,
                base_url=getattr(settings, "base_url", None),
                api_mode="chat_completions",
                api_duration=time.monotonic() - started,
                started_at=started_at,
                ended_at=time.time(),
                finish_reason=completion.finish_reason,
                response_model=completion.model or self.model,
                response=completion.message,
                assistant_message=completion.message,
                assistant_content_chars=len(completion.content),
                assistant_tool_call_count=len(completion.tool_calls),
                message_count=len(self.messages),
                usage=canonical_usage(completion.usage),  # a copy: a hook may change it
                middleware_trace=trace,
            )
        if buckets:
            counts = dict(zip(self.result.usage, used.counters(), strict=True))
            for key, count in counts.items():
                self.result.usage[key] += count
            details = {k: v for k, v in buckets.items() if k.startswith(("cache", "reas"))}
            self.emit("usage", **counts, **details)
        return completion

    async def _wrapped_send(
        self,
        middleware: MiddlewareBus,
        send: Callable[[Any], Awaitable[Completion]],
        request: dict[str, Any],
        context: dict[str, Any],
        trace: list[dict[str, Any]],
    ) -> Completion:
        """The model request inside the ``llm_execution`` middleware (retries and streaming
        stay inside its ``next_call``); a refusal it returns becomes the completion."""
        sent: list[tuple[Completion, Any]] = []

        async def real_call(payload: Any) -> Any:
            completion = await send(payload)
            response = as_chat_completion(completion, self.model)
            sent.append((completion, response))
            return response

        try:
            value = await middleware.run_execution(
                "llm_execution",
                "request",
                request,
                real_call,
                {**context, "middleware_trace": list(trace)},
            )
        except MiddlewareTimeout as exc:
            raise ModelResponseInvalid(f"the request was refused: {exc}") from None
        for completion, response in sent:
            if value is response:
                return completion
        return completion_from_response(value)

    async def _request_error(
        self,
        base: dict[str, Any],
        exc: ModelError,
        duration: float,
        retry_count: int,
        *,
        retryable: bool,
    ) -> None:
        status = getattr(exc, "status", None)
        max_retries = getattr(self.loop.client.settings, "max_retries", 0)
        await self.hook(
            "api_request_error",
            **base,
            status_code=status,
            retry_count=retry_count,
            max_retries=max_retries,
            retryable=retryable,
            error_type=type(exc).__name__,
            error_message=str(exc),
            reason=str(exc),
            api_mode="chat_completions",
            api_duration=duration,
            started_at=time.time() - duration,
            ended_at=time.time(),
            request=self._last_request[1] if self._last_request else None,
            error={"type": type(exc).__name__, "message": str(exc), "status": status},
        )

    def _provider_tools(self, offered: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The memory provider's tools, when the ``memory`` toolset is on for this turn (the
        daemon's ``tools.enabled_toolsets`` and the turn's narrowing, re-applied here); never
        one named like a tool already offered."""
        providers, active = self.loop.providers, self.provider
        if providers is None or active is None:
            return []
        narrowing = self.toolsets or Toolsets()
        for enabled in (self.loop.settings.enabled_toolsets, narrowing.enabled):
            if enabled is not None and "memory" not in enabled:
                return []
        if "memory" in narrowing.disabled:
            return []
        taken = {t["function"]["name"] for t in offered}
        extra = [t for t in providers.openai_tools(active) if t["function"]["name"] not in taken]
        self.provider_tools = {t["function"]["name"] for t in extra}
        return extra

    def _narrowed(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        allowed = self._allowed_names()
        return [t for t in tools if t["function"]["name"] in allowed]

    def _allowed_names(self) -> set[str]:
        narrowing = self.toolsets or Toolsets()
        enabled = narrowing.enabled
        return {
            entry.name
            for entry in self.loop.registry.entries()
            if (enabled is None or entry.toolset in enabled)
            and entry.toolset not in narrowing.disabled
        }

    async def _run_tool(self, call: dict[str, Any]) -> None:
        name = call["function"]["name"]
        arguments = call["function"]["arguments"]
        self.emit("tool.started", name=name, arguments=arguments, tool_call_id=call["id"])
        await self.settle_observers()  # the previous call's, before this one's pre_tool_call
        started = time.monotonic()
        context = self.loop.context
        if name in self.provider_tools and self.provider is not None and self.loop.providers:
            result = await self.loop.providers.call_tool(self.provider, name, arguments)
        elif context is not None and context.owns_tool(self.session_id, name):
            result = await context.call_tool(self.session_id, name, arguments, self.messages)
        elif self.toolsets is not None and name not in self._allowed_names():
            result = json.dumps(
                {"error": f"Tool '{name}' is not available in this turn (its toolset is off)"}
            )
        else:
            result = await self.loop.registry.call(
                name,
                arguments,
                session_id=self.session_id,
                tool_call_id=call["id"],
                source="model",
                turn_id=self.turn_id,
                observers=self._observers,
            )
        duration_ms = round((time.monotonic() - started) * 1000, 1)
        await self.commit("tool", result, tool_call_id=call["id"], tool_name=name)
        self._remember({"role": "tool", "tool_call_id": call["id"], "content": result})
        self.emit(
            "tool.finished",
            name=name,
            tool_call_id=call["id"],
            status=_status_of(result),
            duration_ms=duration_ms,
            preview=result[:PREVIEW_CHARS],
        )

    async def _answer(self, text: str) -> None:
        for item in await self.hook("transform_llm_output", response_text=text):
            if isinstance(item, str):
                text = valid_text(item)  # half a surrogate pair: neither stored nor sent
                break
        await self._store_answer(text)

    async def _store_answer(self, text: str) -> None:
        record = await self.commit("assistant", text)
        self.result.final_text = text
        self.emit("message", role="assistant", content=text, message_id=record["id"])
        self._remember({"role": "assistant", "content": text})
        await self.hook(
            "post_llm_call",
            user_message=self.user_message,
            assistant_response=text,
            conversation_history=self.stored_history,
        )

    def _remember(self, message: dict[str, Any]) -> None:
        """Mirror a committed message into the request list and the stored history."""
        self.messages.append(message)
        self.stored_history.append(message)
