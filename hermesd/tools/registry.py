"""The tool registry: every tool, built-in or plugin, and the one pipeline that calls them.

`ToolRegistry.register` is the only way a tool gets in (built-ins use owner ``builtin``, plugins
their key): it validates the schema (`schema.validate_tool`) and refuses to let one toolset take a
name another owns unless ``override=True``. Registrations stack per name, so removing an owner
(rollback of a failed plugin, hot reload) brings back whatever it had shadowed.

`ToolRegistry.call` is THE pipeline for a model's tool call, a client's ``tools.call`` and a
plugin's ``ctx.dispatch_tool`` alike: it finds the tool (the turn's pinned entry first) and
hands the call to `hermesd.tools.pipeline.ToolPipeline`, whose steps are: parse and check
arguments → ``pre_tool_call`` hooks → the tool's own ``prepare`` step, if it has one
(`hermesd.tools.consent`) → approval (injectable) → the handler, bounded in time, off the event
loop → coercion to a string → redaction (injectable) → size budget → ``post_tool_call`` →
``transform_tool_result``. Every failure becomes a ``{"error": ...}`` JSON string; nothing
raises to the caller. `call_sync` is the same pipeline for plugin threads. The result's
coercion, redaction and budget are `hermesd.tools.results`; which tools the model may see
(``check_fn``) is `hermesd.tools.checks`. This module does not know about plugins, sessions or RPC.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from typing import Any, Literal

from hermesd.runtime.hooks import HookBus
from hermesd.runtime.session import current_session
from hermesd.runtime.workers import CallShape, WorkerPool, shared_pool
from hermesd.tools.checks import CheckCache
from hermesd.tools.consent import Consent
from hermesd.tools.pipeline import ToolPipeline
from hermesd.tools.results import (
    Redactor,
    error_result,
)
from hermesd.tools.schema import (
    ToolRejected,
    normalize_schema,
    openai_form,
    validate_tool,
)
from hermesd.tools.toolsets import ToolSelection

log = logging.getLogger(__name__)

BUILTIN = "builtin"
DEFAULT_TOOL_TIMEOUT = 120.0
DEFAULT_RESULT_BUDGET = 100_000
DEFAULT_CHECK_TTL = 30.0
DEFAULT_CHECK_TIMEOUT = 5.0

ToolSource = Literal["model", "client", "plugin"]
#: ``(tool_name, args, session_id[, asked=message, rule_key=key]) -> block message or None``;
#: the keywords are passed only when a ``pre_tool_call`` hook returned ``action: approve``.
Approver = Callable[..., Awaitable[str | None]]

#: Tool entries pinned by a running turn (`ToolRegistry.pin`): its calls use these, so a turn
#: keeps the tools it started with across a plugin hot reload.
pinned_tools: contextvars.ContextVar[Mapping[str, ToolEntry] | None] = contextvars.ContextVar(
    "hermesd_pinned_tools", default=None
)
# The loop running the pipeline this thread works for, so a nested call_sync from a handler
# thread goes back to that loop (which is free, awaiting the handler) and never deadlocks.
_pipeline_loop: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "hermesd_pipeline_loop", default=None
)


@dataclass(eq=False)
class ToolEntry:
    """One registered tool."""

    name: str
    toolset: str
    schema: dict[str, Any]  # {name, description, parameters}
    handler: Callable[..., Any]
    check_fn: Callable[[], Any] | None
    requires_env: tuple[str, ...]
    is_async: bool
    description: str
    emoji: str
    owner: str
    shape: CallShape = field(repr=False)
    #: ``prepare(args, session_id=...) -> Consent``, run before approval (`hermesd.tools.consent`)
    prepare: Callable[..., Consent] | None = field(default=None, repr=False)
    #: False: the handler checks its own arguments (its errors are worded for the model)
    check_arguments: bool = True
    #: seconds a call may take, when the tool has its own bound (an MCP server's ``timeout``)
    timeout: float | None = None


class ToolRegistry:
    """Registered tools, their visibility to the model, and the call pipeline."""

    def __init__(
        self,
        hooks: HookBus,
        *,
        pool: WorkerPool | None = None,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        result_budget: int = DEFAULT_RESULT_BUDGET,
        check_ttl: float = DEFAULT_CHECK_TTL,
        check_timeout: float = DEFAULT_CHECK_TIMEOUT,
        env: Mapping[str, str] | None = None,
        approver: Approver | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.hooks = hooks
        self.timeout = timeout
        self.result_budget = result_budget
        self.env: Mapping[str, str] = os.environ if env is None else env
        #: Approval step (hermesd.approvals): a block message, or None to let the call run.
        self.approver = approver
        #: Redaction (hermesd.redact): applied to every result before hooks and the model.
        self.redactor = redactor
        #: the worker threads handlers, ``prepare`` steps and ``check_fn``s run on
        self.pool = pool or shared_pool()
        #: ``check_fn`` results (``ttl``, ``timeout`` adjustable)
        self.checks = CheckCache(self.pool, check_ttl, check_timeout)
        #: the steps every call goes through (`hermesd.tools.pipeline`)
        self.pipeline = ToolPipeline(self)
        self._lock = threading.Lock()
        self._stacks: dict[str, list[ToolEntry]] = {}
        self._aliases: dict[str, tuple[str, str]] = {}  # alias -> (name, owner)
        #: other names of a toolset in ``enabled_toolsets`` (an MCP server's name: ``mcp-<name>``)
        self.toolset_aliases: dict[str, str] = {}
        #: the config's ``toolsets``/``disabled_toolsets`` (`hermesd.tools.toolsets`)
        self.selection = ToolSelection()
        #: owners whose tools one session only is offered and may call (an editor's MCP
        #: servers, `hermesd.mcp.pool`): owner -> session id
        self.session_owners: dict[str, str] = {}
        #: awaited before a turn builds its tool list (the MCP pool starts lazy servers there)
        self.before_listing: list[Callable[[], Awaitable[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- registration -----------------------------------------------------------------------

    def register(
        self,
        name: str,
        toolset: str,
        schema: Mapping[str, Any],
        handler: Any,  # plugin code passes anything; checked below
        check_fn: Callable[[], Any] | None = None,
        requires_env: list[Any] | tuple[Any, ...] | None = None,
        is_async: bool = False,
        description: str = "",
        emoji: str = "",
        override: bool = False,
        owner: str = BUILTIN,
        *,
        prepare: Callable[..., Consent] | None = None,
        check_arguments: bool = True,
        timeout: float | None = None,
        aliases: Collection[str] = (),
    ) -> ToolEntry:
        """Add a tool; raises `ToolRejected` (nothing registered) when it may not be added.

        Parameters are the reference's, in its order, plus ``owner`` (``builtin`` or a plugin key)
        and ``prepare``: a check run before approval that may refuse the call, ask a person about
        it, and hand the handler a ``plan=`` (`hermesd.tools.consent`). ``check_arguments=False``
        leaves checking the arguments against the schema to the handler, for a tool whose
        errors must be worded its own way (the built-in ``memory`` tool). ``timeout`` replaces
        the registry's bound for this tool; ``aliases`` are other names a call may use (never
        shown to the model), dropped with the owner's tools.

        ``is_async`` is informational: whether the handler is awaited or run on a worker thread
        is decided from the callable itself, so a wrong flag cannot put sync code on the loop.
        """
        reason = validate_tool(name, schema)
        if reason is None and not callable(handler):
            reason = f"handler of tool '{name}' is not callable"
        if reason is not None:
            raise ToolRejected(reason)
        entry = ToolEntry(
            name=name,
            toolset=toolset,
            schema=normalize_schema(name, schema, description),
            handler=handler,
            check_fn=check_fn,
            requires_env=_env_names(requires_env),
            is_async=is_async,
            description=str(schema.get("description") or description or ""),
            emoji=emoji,
            owner=owner,
            shape=CallShape.of(handler, positional=1),
            prepare=prepare,
            check_arguments=check_arguments,
            timeout=timeout,
        )
        with self._lock:
            stack = self._stacks.get(name, [])
            active = stack[-1] if stack else None
            if active is not None and active.toolset != toolset and not override:
                raise ToolRejected(
                    f"tool '{name}' of toolset '{toolset}' would shadow the tool of toolset "
                    f"'{active.toolset}'; pass override=True to replace it"
                )
            if active is not None and active.toolset != toolset:
                log.info(
                    "Tool '%s': toolset '%s' overrides toolset '%s' (override=True)",
                    name,
                    toolset,
                    active.toolset,
                )
            self._stacks[name] = [e for e in stack if e.owner != owner] + [entry]
            for alias in aliases:
                if alias != name:
                    self._aliases[alias] = (name, owner)
        return entry

    def unregister_owner(self, owner: str) -> list[str]:
        """Remove every tool ``owner`` registered, restoring what they shadowed; their names."""
        removed: list[str] = []
        with self._lock:
            for name, stack in list(self._stacks.items()):
                kept = [e for e in stack if e.owner != owner]
                if len(kept) != len(stack):
                    removed.append(name)
                if kept:
                    self._stacks[name] = kept
                else:
                    del self._stacks[name]
            for alias, (_, alias_owner) in list(self._aliases.items()):
                if alias_owner == owner:
                    del self._aliases[alias]
            self.checks.forget(lambda entry: getattr(entry, "owner", None) == owner)
        return removed

    def get(self, name: str) -> ToolEntry | None:
        """The active entry for ``name`` (or for the tool ``name`` is an alias of)."""
        stack = self._stacks.get(name)
        if not stack and name in self._aliases:
            stack = self._stacks.get(self._aliases[name][0])
        return stack[-1] if stack else None

    def entries(self) -> list[ToolEntry]:
        """Active entries in registration order."""
        with self._lock:
            return [stack[-1] for stack in self._stacks.values()]

    def pin(self) -> None:
        """Pin the active entries for the rest of the current task (a turn), see `pinned_tools`."""
        pinned_tools.set({e.name: e for e in self.entries()})

    def tools_of(self, owner: str) -> list[str]:
        """Names of the active tools ``owner`` provides."""
        return [e.name for e in self.entries() if e.owner == owner]

    # -- visibility -------------------------------------------------------------------------

    async def refresh_checks(self) -> None:
        """Re-run stale ``check_fn``s on worker threads; await this before `openai_tools` on the
        loop so building the tool list never waits on plugin code."""
        await self.start_pending()
        await self.checks.refresh(self.entries())

    async def start_pending(self) -> None:
        """Run the `before_listing` steps (tool providers not started yet start now)."""
        for step in list(self.before_listing):
            try:
                await step()
            except Exception:
                log.exception("A step before listing the tools failed")

    def available(self, entry: ToolEntry) -> bool:
        """Whether the model may see ``entry``: its ``requires_env`` set and ``check_fn`` truthy.

        ``check_fn`` results are cached for ``check_ttl`` seconds; a stale one is re-run on a
        worker thread and waited for up to ``check_timeout`` (raising or slow → hidden).
        """
        if any(not self.env.get(var) for var in entry.requires_env):
            return False
        return self.checks.passed(entry)

    def openai_tools(
        self, enabled_toolsets: Collection[str] | None = None, session_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The model's tool list in OpenAI form, filtered by toolset and availability (and,
        for the tools of one session, by ``session_id``)."""
        wanted = self._wanted(enabled_toolsets)
        entries = [
            e for e in self.entries() if self._offered(e, wanted) and self.in_session(e, session_id)
        ]
        self.checks.probe(entries)
        return [openai_form(e.schema) for e in entries if self.available(e)]

    def in_session(self, entry: ToolEntry, session_id: str | None) -> bool:
        """Whether ``session_id`` may see and call ``entry`` (every session, unless its owner
        serves one session only)."""
        only = self.session_owners.get(entry.owner)
        return only is None or only == session_id

    def _offered(self, entry: ToolEntry, wanted: set[str] | None) -> bool:
        """Whether config (`selection`) and ``wanted`` (toolset or tool names) offer ``entry``."""
        if wanted is not None and entry.toolset not in wanted and entry.name not in wanted:
            return False
        if self.selection.everything:  # the default: skip building the names (every round)
            return True
        return self.selection.why_not(self.toolset_names(entry), entry.name) is None

    def config_hides(self, name: str) -> bool:
        """Whether the config (`selection`) hides the registered tool ``name`` from the model."""
        entry = self.get(name)
        return entry is not None and not self._offered(entry, None)

    def hidden_because(self, name: str) -> str:
        """Why the registered tool ``name`` is hidden (config first, then environment, check)."""
        entry = self.get(name)
        return "no such tool" if entry is None else self._hidden_because(entry, None)

    def toolset_names(self, entry: ToolEntry) -> list[str]:
        """``entry``'s toolset and its other names (`toolset_aliases`)."""
        aliases = [a for a, name in self.toolset_aliases.items() if name == entry.toolset]
        return [entry.toolset, *aliases]

    def _wanted(self, enabled_toolsets: Collection[str] | None) -> set[str] | None:
        if enabled_toolsets is None:
            return None
        wanted = set(enabled_toolsets)
        return wanted | {self.toolset_aliases[n] for n in wanted if n in self.toolset_aliases}

    def describe(self, enabled_toolsets: Collection[str] | None = None) -> list[dict[str, Any]]:
        """Every active tool as a plain dict (for ``tools.list``), including hidden ones, with
        ``reason``: why the model does not see it (config, environment, ``check_fn``)."""
        self.checks.probe(self.entries())
        wanted = self._wanted(enabled_toolsets)
        rows = []
        for e in self.entries():
            enabled = self._offered(e, wanted)
            available = self.available(e)
            rows.append(
                {
                    "name": e.name,
                    "toolset": e.toolset,
                    "description": e.description,
                    "emoji": e.emoji,
                    "owner": e.owner,
                    "available": available,
                    "enabled": enabled,
                    "reason": self._hidden_because(e, wanted)
                    if not (enabled and available)
                    else None,
                    "parameters": e.schema["parameters"],
                }
            )
        return rows

    def _hidden_because(self, entry: ToolEntry, wanted: set[str] | None) -> str:
        """Why the model does not see ``entry``: the first of config, environment, check."""
        why = self.selection.why_not(self.toolset_names(entry), entry.name)
        if why is None and not self._offered(entry, wanted):
            why = "toolset not enabled by config (tools.enabled_toolsets)"
        if why is not None:
            return why
        missing = [var for var in entry.requires_env if not self.env.get(var)]
        if missing:
            return f"missing provider setting: {', '.join(missing)} not set"
        return self.checks.reason(entry) or "check failed"

    # -- the call pipeline ------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The daemon's loop, once attached."""
        return self._loop

    def attach_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Tell the registry which loop is the daemon's, for `call_sync` from plugin threads."""
        self._loop = loop

    async def call(
        self,
        name: str,
        args: Mapping[str, Any] | str | None,
        *,
        session_id: str = "",
        tool_call_id: str | None = None,
        source: ToolSource = "model",
        turn_id: str = "",
        observers: list[asyncio.Task[Any]] | None = None,
    ) -> str:
        """Run one tool call through the whole pipeline; always returns a result string.

        With an ``observers`` list, the ``post_tool_call`` callbacks (whose return values
        nobody reads) are started as a task added to it instead of being waited for, unless a
        ``transform_tool_result`` callback must run after them. The caller then waits for them
        before its next hook and before it finishes (the agent does).
        """
        loop_token = _pipeline_loop.set(asyncio.get_running_loop())
        session_token = current_session.set(session_id)
        try:
            entry = await self._resolve(name)
            if entry is None or not self.in_session(entry, session_id):
                return error_result(f"Unknown tool: {name}")
            ids = {
                "task_id": session_id,
                "session_id": session_id,
                "tool_call_id": tool_call_id or "",
                "turn_id": turn_id,
                "api_request_id": "",
            }
            return await self.pipeline.run(entry, args, ids, source, observers)
        finally:
            current_session.reset(session_token)
            _pipeline_loop.reset(loop_token)

    async def _resolve(self, name: str) -> ToolEntry | None:
        """The entry a call of ``name`` runs: the turn's pinned one, else the active one (an
        alias runs, and is reported, as the tool it names)."""
        pinned = pinned_tools.get()
        entry = (pinned.get(name) if pinned is not None else None) or self.get(name)
        if entry is None and self.before_listing:  # a tool of a server not started yet
            await self.start_pending()
            entry = self.get(name)
        return entry

    def call_sync(
        self,
        name: str,
        args: Mapping[str, Any] | str | None,
        *,
        session_id: str = "",
        tool_call_id: str | None = None,
        source: ToolSource = "plugin",
        timeout: float | None = None,
    ) -> str:
        """`call` for synchronous code (plugin threads, ``ctx.dispatch_tool``).

        From a worker thread the call runs on the loop that runs the caller's pipeline, else on
        the daemon loop (`attach_loop`). Called on a thread that is itself running a loop (the
        daemon's, by a careless plugin), it runs on a private loop in a helper thread instead of
        deadlocking; that loop blocks its caller meanwhile. With no loop at all it runs inline.
        """

        def pipeline() -> Coroutine[Any, Any, str]:
            return self.call(
                name, args, session_id=session_id, tool_call_id=tool_call_id, source=source
            )

        try:
            asyncio.get_running_loop()
            on_a_loop = True
        except RuntimeError:
            on_a_loop = False
        target = _pipeline_loop.get() or self._loop
        if on_a_loop:
            return _run_in_helper_thread(pipeline, timeout)
        if target is not None and target.is_running() and not target.is_closed():
            future = asyncio.run_coroutine_threadsafe(pipeline(), target)
            done, _ = futures_wait([future], timeout)
            if not done:
                future.cancel()
                return error_result(f"Tool '{name}' timed out after {timeout:g}s")
            return future.result()
        return asyncio.run(pipeline())


def _run_in_helper_thread(
    make: Callable[[], Coroutine[Any, Any, str]], timeout: float | None
) -> str:
    box: list[str] = []
    context = contextvars.copy_context()

    def run() -> None:
        try:
            box.append(context.run(asyncio.run, make()))
        except BaseException:  # the pipeline never raises; be safe anyway
            log.exception("Tool call on a private loop failed")
            box.append(error_result("Tool call failed inside the daemon; see its log"))

    helper = threading.Thread(target=run, name="hermesd-dispatch", daemon=True)
    helper.start()
    helper.join(timeout)
    if not box:
        return error_result(f"Tool call did not finish within {timeout:g}s")
    return box[0]


def _env_names(requires_env: Any) -> tuple[str, ...]:
    """Variable names from ``requires_env`` (names, or rich ``{name: …}`` entries)."""
    if not requires_env:
        return ()
    items = [requires_env] if isinstance(requires_env, (str, dict)) else list(requires_env)
    names = [item.get("name") if isinstance(item, dict) else item for item in items]
    return tuple(str(n) for n in names if isinstance(n, str) and n)
