"""`ToolPipeline`: the one way a tool call runs, step by step, for `ToolRegistry.call`.

A call goes through named steps, each handing the next a value: `arguments` (parse, the
``tool_request`` middleware, the schema check) → `gate` (``pre_tool_call`` hooks, the tool's
own ``prepare`` step, approval; a block message or the `Consent` to run under) → `execute`
(the handler on a worker, bounded in time, inside the ``tool_execution`` middleware when there
is one) → `finish` (redaction and the result budget, ``post_tool_call``,
``transform_tool_result``). Every failure becomes an `Outcome` with a ``{"error": ...}``
result; nothing raises to the caller. The settings it runs with (timeout, result budget,
approver, redactor, hooks, worker pool) are the registry's, read at each call, so changing
them on the registry takes effect at once. It does not know about plugins, sessions or RPC.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hermesd.runtime.middleware import MiddlewareTimeout
from hermesd.runtime.workers import WorkTimeout, call_bounded
from hermesd.tools.consent import Consent
from hermesd.tools.results import as_result, error_result, parse_args, redact_and_clip
from hermesd.tools.schema import check_args

if TYPE_CHECKING:
    from collections.abc import Mapping

    from hermesd.tools.registry import ToolEntry, ToolRegistry

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What a call came to: the result string, its status and, on failure, why."""

    result: str
    status: str
    error_type: str | None = None
    error_message: str | None = None

    @classmethod
    def failed(cls, status: str, error_type: str, message: str, shown: str) -> Outcome:
        """A failure whose result is ``{"error": shown}``."""
        return cls(error_result(shown), status, error_type, message)


@dataclass
class ToolCall:
    """One call on its way through the pipeline: the tool, its arguments, who it is for."""

    entry: ToolEntry
    args: dict[str, Any]
    ids: dict[str, str]  # task_id, session_id, tool_call_id, turn_id, api_request_id
    original_args: dict[str, Any] = field(default_factory=dict)
    trace: list[Any] = field(default_factory=list)  # what the tool_request middleware did
    consent: Consent | None = None  # the tool's prepare step's answer, when it has one


class ToolPipeline:
    """The steps of a tool call, with the settings of the registry it serves."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry

    async def run(
        self,
        entry: ToolEntry,
        raw_args: Mapping[str, Any] | str | None,
        ids: dict[str, str],
        source: str,
        observers: list[asyncio.Task[Any]] | None,
    ) -> str:
        """Run one call of ``entry`` through every step; the result string."""
        started = time.monotonic()
        call, problem = await self.arguments(entry, raw_args, ids)
        if problem is not None:
            shown = f"Invalid arguments for tool '{entry.name}': {problem}"
            outcome = Outcome.failed("error", "invalid_arguments", problem, shown)
        else:
            block = await self.gate(call)
            if block is not None:
                outcome = Outcome.failed("blocked", "blocked", block, block)
            else:
                outcome = await self.execute(call)
        outcome.result = self.redact_and_clip(outcome.result)
        duration_ms = int((time.monotonic() - started) * 1000)
        log.debug(
            "tool %s (%s) for session %s: %s in %d ms",
            entry.name,
            source,
            ids["session_id"] or "-",
            outcome.status,
            duration_ms,
        )
        return await self.finish(call, outcome, duration_ms, observers)

    # -- the steps ------------------------------------------------------------------------

    async def arguments(
        self, entry: ToolEntry, raw_args: Mapping[str, Any] | str | None, ids: dict[str, str]
    ) -> tuple[ToolCall, str | None]:
        """Parse the arguments, let the ``tool_request`` middleware rewrite them, check them
        against the schema; the call, and what is wrong with its arguments (None: nothing)."""
        args, problem = parse_args(raw_args)
        call = ToolCall(entry, args, ids, original_args=args)
        middleware = self.registry.hooks.middleware
        if problem is None and middleware.has("tool_request"):
            rewritten = await middleware.apply_request(
                "tool_request", "args", args, {"tool_name": entry.name, **ids}
            )
            call.args, call.original_args = rewritten.payload, rewritten.original
            call.trace = rewritten.trace
        if problem is None and entry.check_arguments:
            problem = check_args(entry.schema["parameters"], call.args)
        return call, problem

    async def gate(self, call: ToolCall) -> str | None:
        """``pre_tool_call`` hooks, the tool's ``prepare`` step, approval: a block message, or
        None to run (with ``call.consent`` set when the tool prepared)."""
        name, args, session_id = call.entry.name, call.args, call.ids["session_id"]
        ids = call.ids
        verdict = await self.registry.hooks.pre_tool_verdict(
            tool_name=name,
            args=args,
            task_id=ids["task_id"],
            session_id=session_id,
            tool_call_id=ids["tool_call_id"],
            turn_id=ids["turn_id"],
            api_request_id=ids["api_request_id"],
            middleware_trace=call.trace,
        )
        if verdict.block is not None:
            return verdict.block
        if call.entry.prepare is not None:
            call.consent, block = await self.prepare(call.entry, args, session_id)
            if block is not None:
                return block
        asks = call.consent.ask if call.consent is not None else None
        if self.registry.approver is not None:
            block = await self.approve(name, args, session_id, verdict.approve, verdict.rule_key)
            if block is None and call.consent is not None and asks is not None:
                block = await self.approve(name, args, session_id, asks, call.consent.rule_key)
            return block
        if verdict.approve is not None:  # nobody to ask: fail closed
            return f"BLOCKED: plugin approval required for {name}"
        if asks is not None:
            return f"BLOCKED: {asks} needs approval and nobody can be asked"
        return None

    async def execute(self, call: ToolCall) -> Outcome:
        """The handler, inside the ``tool_execution`` middleware when there is one."""
        if self.registry.hooks.middleware.has("tool_execution"):
            return await self.run_wrapped(call)
        return await self.run_handler(call, call.args)

    async def finish(
        self,
        call: ToolCall,
        outcome: Outcome,
        duration_ms: int,
        observers: list[asyncio.Task[Any]] | None,
    ) -> str:
        """``post_tool_call`` (started as an observer task when allowed), then
        ``transform_tool_result``; the result string the caller gets."""
        hooks, ids = self.registry.hooks, call.ids
        report = {  # spelled out: the hook-site test checks these names against HOOKS
            "tool_name": call.entry.name,
            "args": call.args,
            "result": outcome.result,
            "task_id": ids["task_id"],
            "session_id": ids["session_id"],
            "tool_call_id": ids["tool_call_id"],
            "turn_id": ids["turn_id"],
            "api_request_id": ids["api_request_id"],
            "duration_ms": duration_ms,
            "status": outcome.status,
            "error_type": outcome.error_type,
            "error_message": outcome.error_message,
        }
        if hooks.has("post_tool_call"):
            observed = hooks.invoke("post_tool_call", **report, middleware_trace=call.trace)
            if observers is not None and not hooks.has("transform_tool_result"):
                observers.append(asyncio.ensure_future(observed))
            else:
                await observed
        replaced = await hooks.transform("transform_tool_result", **report)
        return outcome.result if replaced is None else self.redact_and_clip(replaced)

    # -- parts of the steps ---------------------------------------------------------------

    async def approve(
        self,
        name: str,
        args: dict[str, Any],
        session_id: str,
        asked: str | None,
        rule_key: str | None,
    ) -> str | None:
        """The registry's approver: a block message or None (a failing approver blocks)."""
        approver = self.registry.approver
        assert approver is not None
        try:
            if asked is None:
                return await approver(name, args, session_id)
            # A pre_tool_call hook asked for a person: the approver learns why and the key.
            return await approver(name, args, session_id, asked=asked, rule_key=rule_key)
        except Exception:
            log.exception("Approval check for tool '%s' failed; blocking the call", name)
            return f"BLOCKED: approval check failed for {name}"

    async def prepare(
        self, entry: ToolEntry, args: dict[str, Any], session_id: str
    ) -> tuple[Consent | None, str | None]:
        """The tool's consent step on a worker thread: the `Consent`, or a block message."""
        assert entry.prepare is not None
        registry = self.registry
        try:
            consent = await call_bounded(
                registry.pool,
                entry.prepare,
                (dict(args),),
                {"session_id": session_id},
                registry.timeout,
                f"tool:{entry.owner}",
            )
        except Exception:
            log.exception("The prepare step of tool '%s' failed; blocking the call", entry.name)
            return None, f"BLOCKED: could not check the call to {entry.name}"
        if not isinstance(consent, Consent):
            log.error("The prepare step of tool '%s' returned %r", entry.name, consent)
            return None, f"BLOCKED: could not check the call to {entry.name}"
        return consent, consent.refuse

    async def run_handler(self, call: ToolCall, args: dict[str, Any]) -> Outcome:
        """The handler with ``args`` on a worker (or awaited), bounded in time."""
        entry, ids = call.entry, call.ids
        offered: dict[str, Any] = {k: ids[k] for k in ("task_id", "session_id", "tool_call_id")}
        timeout = self.registry.timeout if entry.timeout is None else entry.timeout
        if call.consent is not None:
            offered["plan"] = call.consent.plan  # what was decided (and maybe approved) on
        try:
            value = await call_bounded(
                self.registry.pool,
                entry.handler,
                (dict(args),),
                entry.shape.select(offered),
                timeout,
                f"tool:{entry.owner}",
            )
        except WorkTimeout:
            message = f"Tool '{entry.name}' timed out after {timeout:g}s"
            log.warning("%s (its thread, if any, keeps running)", message)
            return Outcome.failed("timeout", "timeout", message, message)
        except Exception as exc:
            log.warning("Tool '%s' raised %s: %s", entry.name, type(exc).__name__, exc)
            log.debug("Traceback of tool '%s'", entry.name, exc_info=True)
            return _raised(exc)
        return Outcome(*as_result(entry.name, value))

    async def run_wrapped(self, call: ToolCall) -> Outcome:
        """`run_handler` inside the ``tool_execution`` middleware; what a refusing one
        returned is the result, as a handler's would be."""
        ran: Outcome | None = None

        async def handler(payload: Any) -> str:
            nonlocal ran
            ran = await self.run_handler(call, payload if isinstance(payload, dict) else call.args)
            return ran.result

        context = {"tool_name": call.entry.name, **call.ids, "original_args": call.original_args}
        try:
            value = await self.registry.hooks.middleware.run_execution(
                "tool_execution", "args", call.args, handler, context
            )
        except MiddlewareTimeout as exc:
            message = f"BLOCKED: {exc}"
            return Outcome.failed("blocked", "blocked", message, message)
        except Exception as exc:  # the handler's failures are results; this is middleware's
            log.warning("tool_execution middleware of '%s' failed: %s", call.entry.name, exc)
            return _raised(exc)
        if ran is not None and value is ran.result:
            return ran
        return Outcome(*as_result(call.entry.name, value))

    def redact_and_clip(self, result: str) -> str:
        """Redaction, then the result budget (`hermesd.tools.results.redact_and_clip`)."""
        return redact_and_clip(result, self.registry.redactor, self.registry.result_budget)


def _raised(exc: Exception) -> Outcome:
    message = f"Tool execution failed: {type(exc).__name__}: {exc}"
    return Outcome(error_result(message), "error", type(exc).__name__, str(exc))
