"""The order of one turn: its request, its rounds, its tool calls, its commits and its end.

Owns the sequence (docs/sessions.md, "A turn"): build the request (``hermesd.agent.request``),
then up to ``agent.max_iterations`` rounds (``hermesd.agent.round``), each checked by the
session's context engine before and after; a round with tool calls commits the assistant
message, runs each call in the model's order and commits its result before the next round; a
round without ends the turn with the answer (``transform_llm_output``, commit, ``message`` event,
``post_llm_call``). Every end runs the same close: unanswered tool calls answered, budgets
announced, the context engine and memory provider told, ``on_session_end``, ``turn.finished``.
Values pass from step to step; the steps do not reach into this one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from hermesd import redact
from hermesd.agent.budget import BudgetExceeded
from hermesd.agent.commit import close_unfinished, commit_message
from hermesd.agent.recovery import RoundRecovery
from hermesd.agent.request import Speaker, Toolsets, TurnRequest, allowed_names, build_request
from hermesd.agent.round import Round, RoundInput
from hermesd.agent.scope import TurnScope
from hermesd.model.errors import ModelError
from hermesd.model.fastjson import valid_text
from hermesd.runtime.hooks import MAX_VERIFY_NUDGES, continue_message
from hermesd.runtime.session import turn_tools
from hermesd.store.dbfile import SessionNotFound, StorageUnavailable
from hermesd.store.images import Image
from hermesd.store.messages import cap_text
from hermesd.store.usage import RequestUsage

if TYPE_CHECKING:
    from hermesd.agent.loop import AgentLoop
    from hermesd.context.host import TurnWindow

log = logging.getLogger(__name__)

TurnStatus = Literal["completed", "cancelled", "failed"]

CANCELLED_RESULT = "Tool call cancelled: the user stopped this turn before it finished"
FAILED_RESULT = "Tool call abandoned: the turn failed before it finished"
PREVIEW_CHARS = 200
_KNOWN = (ModelError, SessionNotFound, StorageUnavailable, BudgetExceeded)


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

    def add_cost(self, cost: float | None) -> None:
        """Count one priced request."""
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost


def new_id(prefix: str) -> str:
    """A fresh id such as ``turn_1a2b3c4d5e6f``."""
    return f"{prefix}_{secrets.token_hex(6)}"


def _status_of(result: str) -> str:
    try:
        parsed = json.loads(result)
    except ValueError:
        return "ok"
    return "error" if isinstance(parsed, dict) and "error" in parsed else "ok"


def _written_path(result: str) -> str:
    """The file a write_file result says it wrote ("" for a failed write)."""
    try:
        parsed = json.loads(result)
    except ValueError:
        return ""
    ok = isinstance(parsed, dict) and "error" not in parsed
    return str(parsed.get("path") or "") if ok else ""


class Turn:
    """One running turn: its scope, its result, and what is not stored yet."""

    def __init__(
        self,
        agent: AgentLoop,
        scope: TurnScope,
        user_message: str,
        who: Speaker,
        toolsets: Toolsets | None,
        images: list[Image] | None = None,
    ) -> None:
        self.agent, self.scope, self.user_message = agent, scope, user_message
        self.images = images or []  # attached to the user message
        self.who, self.toolsets = who, toolsets
        self.result = TurnResult(turn_id=scope.turn_id, status="completed")
        self.request: TurnRequest | None = None
        self.window: TurnWindow | None = None  # the context engine's view (hermesd.context)
        self.unstored: RequestUsage | None = None  # the last round's, until its message is
        self.last_request_id: str | None = None
        self.changed_paths: set[str] = set()  # written by write_file, for pre_verify
        self.verify_nudges = 0
        self.limit: int | None = None  # model rounds (None: agent.max_iterations)
        self.recovery = RoundRecovery(agent, scope)  # overflow and fallback (agent.recovery)

    @property
    def ids(self) -> tuple[str, str]:
        return self.scope.session_id, self.scope.turn_id

    async def run(self) -> TurnResult:
        """Run the turn to its end; a cancel still closes it (and is re-raised)."""
        shown = {"images": [i.summary() for i in self.images]} if self.images else {}
        self.scope.emit("turn.started", user_message=self.user_message, **shown)
        try:
            self.scope.model = self.scope.model or self.agent.client.settings.model or ""
            self.agent.check_ready()
            await self._turn()
        except asyncio.CancelledError:
            await self._finish("cancelled", CANCELLED_RESULT)
            raise
        except _KNOWN as exc:
            self._fail(exc)
            await self._finish("failed", FAILED_RESULT)
        except Exception as exc:
            log.exception("turn %s of session %s failed", self.scope.turn_id, self.scope.session_id)
            self._fail(exc)
            await self._finish("failed", FAILED_RESULT)
        else:
            await self._finish("completed")
        return self.result

    def _fail(self, exc: Exception) -> None:
        self.result.status = "failed"
        known = isinstance(exc, _KNOWN)
        self.result.error = str(exc) if known else (f"internal error: {type(exc).__name__}: {exc}")
        self.result.error_type = type(exc).__name__

    async def _turn(self) -> None:
        agent = self.agent
        if agent.reloads is not None:  # hooks and tools half unloaded: wait for them
            await agent.reloads.wait()
        context = agent.context
        generation = context.generation(self.scope.session_id) if context is not None else 0
        request = await build_request(
            agent, self.scope, self.user_message, self.who, self.toolsets, self.images
        )
        self.request = request
        if context is not None:
            self.window = context.window(
                self.ids, self.user_message, request.api_user, request.user_seq, generation
            )
        limit = self.limit or agent.settings.max_iterations
        while self.result.iterations < limit:
            self.result.iterations += 1
            done = await self._round(request)
            calls = done.completion.tool_calls
            if not calls:
                nudge = await self._verify_gate(done.completion.content)
                if nudge is None:
                    await self._answer(done.completion.content)
                    return
                await self._commit("assistant", done.completion.content or None)
                self._remember({"role": "assistant", "content": done.completion.content})
                request.messages.append({"role": "user", "content": nudge})  # sent, not stored
                continue
            await self._commit("assistant", done.completion.content or None, tool_calls=calls)
            self._remember(done.completion.message)
            for call in calls:
                await self._run_tool(call)
        self.result.exit_reason = "max_iterations"
        await self._store_answer(
            f"I stopped because this turn reached the limit of {limit} model calls "
            "(agent.max_iterations in config.yaml). Ask me to continue, or raise the limit."
        )

    async def _round(self, request: TurnRequest) -> Round:
        """One round between the context engine's checks: compaction before it (and its
        request-only ``select_context``), ``update_from_response`` after it."""
        context, window, sent = self.agent.context, self.window, request.messages
        if context is not None and window is not None:
            request.messages, chosen = await context.before_request(
                window, request.messages, request.history, request.tools
            )
            sent = chosen if chosen is not None else request.messages
        # budget.*: announced once crossed; with action stop, no request past it
        await self.agent.meter.check(self.scope.session_id, self.scope.model, self.scope.emit)
        self.last_request_id = new_id("req")
        done = await self.recovery.send(
            RoundInput(
                messages=sent,
                tools=request.tools,
                call_count=self.result.iterations,
                request_id=self.last_request_id,
                user_message=self.user_message,
                history=request.history,
                max_shown=self.agent.store.messages.max_bytes,
            ),
            request,
            window,
        )
        self.unstored = done.usage  # stored with the message this completion produced
        if done.buckets:
            counts = dict(zip(self.result.usage, done.usage.counters(), strict=True))
            for key, count in counts.items():
                self.result.usage[key] += count
            details = {k: v for k, v in done.buckets.items() if k.startswith(("cache", "reas"))}
            took_ms = round(done.seconds * 1000, 1)
            self.scope.emit("usage", **counts, **details, duration_ms=took_ms)
        if context is not None and window is not None:
            await context.after_response(window, done.completion.usage, len(request.messages))
        return done

    async def _commit(self, role: str, content: str | None, **fields: Any) -> int:
        """Commit one message with the usage of the round that produced it; its id."""
        usage, self.unstored = self.unstored, None
        record, cost = await commit_message(
            self.agent.store, self.agent.meter, self.ids, role, content, usage, **fields
        )
        self.result.add_cost(cost)
        return int(record["id"])

    async def _run_tool(self, call: dict[str, Any]) -> None:
        scope, agent, request = self.scope, self.agent, self.request
        assert request is not None
        name = call["function"]["name"]
        arguments = call["function"]["arguments"]
        scope.emit("tool.started", name=name, arguments=arguments, tool_call_id=call["id"])
        await scope.settle_observers()  # the previous call's, before this one's pre_tool_call
        started = time.monotonic()
        context = agent.context
        allowed = allowed_names(agent, self.toolsets) if self.toolsets is not None else None
        if name in request.provider_tools and request.provider is not None and agent.providers:
            result = await agent.providers.call_tool(request.provider, name, arguments)
        elif context is not None and context.owns_tool(scope.session_id, name):
            result = await context.call_tool(scope.session_id, name, arguments, request.messages)
        elif agent.registry.config_hides(name) or (allowed is not None and name not in allowed):
            result = json.dumps(
                {"error": f"Tool '{name}' is not available in this turn (its toolset is off)"}
            )
        else:
            # issue 33: execute_code's script keeps to the turn's narrowed tools too
            narrowed = turn_tools.set(None if allowed is None else frozenset(allowed))
            try:
                result = await agent.registry.call(
                    name,
                    arguments,
                    session_id=scope.session_id,
                    tool_call_id=call["id"],
                    source="model",
                    turn_id=scope.turn_id,
                    observers=scope.observers,
                )
            finally:
                turn_tools.reset(narrowed)
        duration_ms = round((time.monotonic() - started) * 1000, 1)
        if name == "write_file":
            self.changed_paths.add(_written_path(result))
        await self._commit("tool", result, tool_call_id=call["id"], tool_name=name)
        self._remember({"role": "tool", "tool_call_id": call["id"], "content": result})
        scope.emit(
            "tool.finished",
            name=name,
            tool_call_id=call["id"],
            status=_status_of(result),
            duration_ms=duration_ms,
            preview=result[:PREVIEW_CHARS],
        )

    async def _verify_gate(self, text: str) -> str | None:
        """A ``pre_verify`` callback's message when one keeps a turn that wrote files going
        (at most `MAX_VERIFY_NUDGES` times a turn); None lets the turn end."""
        if not self.changed_paths - {""} or self.verify_nudges >= MAX_VERIFY_NUDGES:
            return None
        message = continue_message(
            await self.scope.hook(
                "pre_verify",
                coding=True,  # hermesd's file tools are what marks a turn as coding
                attempt=self.verify_nudges,
                final_response=text,
                changed_paths=sorted(self.changed_paths - {""}),
            )
        )
        self.verify_nudges += message is not None
        return message

    async def _answer(self, text: str) -> None:
        for item in await self.scope.hook("transform_llm_output", response_text=text):
            if isinstance(item, str):
                text = valid_text(item)  # half a surrogate pair: neither stored nor sent
                break
        await self._store_answer(text)

    async def _store_answer(self, text: str) -> None:
        text = cap_text(text, self.agent.store.messages.max_bytes)  # what is stored of it
        message_id = await self._commit("assistant", text)
        # a huge answer is redacted on a thread once, not scanned on the loop for each event
        shown = await redact.redact_large(text)
        self.result.final_text = shown
        self.scope.emit("message", role="assistant", content=shown, message_id=message_id)
        self._remember({"role": "assistant", "content": text})
        await self.scope.hook(
            "post_llm_call",
            user_message=self.user_message,
            assistant_response=text,
            conversation_history=self.history,
        )

    @property
    def history(self) -> list[dict[str, Any]]:
        """The turn's conversation as stored so far (empty before the request was built)."""
        return self.request.history if self.request is not None else []

    def _remember(self, message: dict[str, Any]) -> None:
        """Mirror a committed message into the request list and the stored history."""
        assert self.request is not None
        self.request.messages.append(message)
        self.request.history.append(message)

    async def _finish(self, status: TurnStatus, reason: str = "") -> None:
        result, agent, scope = self.result, self.agent, self.scope
        result.status = status
        completed = status == "completed"
        if not completed:
            result.exit_reason = status
            usage, self.unstored = self.unstored, None
            result.add_cost(
                await close_unfinished(agent.store, agent.meter, self.ids, reason, usage)
            )
        if completed and agent.meter.settings.active:
            try:  # a budget this turn crossed is announced now, not at the next request
                await agent.meter.check(scope.session_id, scope.model, scope.emit, stop=False)
            except Exception:
                log.exception("checking the budgets after turn %s failed", scope.turn_id)
        await scope.settle_observers()
        await self._tell_context(completed)
        request = self.request
        if completed and request is not None and request.provider is not None and agent.providers:
            agent.providers.turn_done(
                request.provider, self.user_message, result.final_text or "", request.history
            )
        await scope.hook(
            "on_session_end",
            completed=completed,
            interrupted=status == "cancelled",
            failed=status == "failed",
            turn_exit_reason=result.exit_reason,
            reason=result.exit_reason,
            api_request_id=self.last_request_id,
        )
        scope.emit(
            "turn.finished",
            status=status,
            exit_reason=result.exit_reason,
            error=result.error,
            error_type=result.error_type,
            iterations=result.iterations,
            usage=result.usage,
            cost_usd=result.cost_usd,
            final_text=result.final_text,
        )

    async def _tell_context(self, completed: bool) -> None:
        """The context engine hears the turn ended (never failing the finished turn)."""
        context, window = self.agent.context, self.window
        if context is None or window is None or self.request is None:
            return
        try:
            await context.turn_finished(
                window, completed, self.request.history, self.request.messages, self.result.usage
            )
        except Exception:
            log.exception("context engine after turn %s failed", self.scope.turn_id)
