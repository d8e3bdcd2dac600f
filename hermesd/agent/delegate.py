"""``delegate_task`` (toolset ``delegation``): sub-agents as child sessions of the caller's.

Each task the model delegates becomes a real session (``platform: subagent``, ``parent_id``
the delegating session, the parent's owner and working directory) whose one turn runs through
the same agent loop as any other, so it is listed, attachable, searchable and cancellable
(``session.cancel``) like any session. A child gets no more than its parent: the parent's
toolsets at most, minus those children never get (``delegation``: past
``delegation.max_spawn_depth``; ``clarify``, ``memory``, ``cronjob``, ``messaging`` and
``code_execution`` unless ``delegation.allow_in_children`` names them); its tool calls ask
the parent's clients for approval (`ancestors` feeds the approval broker) and a scheduled
parent's approval policy is its children's.

Foreground (the default) the tool waits for every child and answers with one result per task,
in the reference's shape, while the parent's clients get ``subagent.*`` events; with
``background: true`` it answers at once and the results arrive in the parent as a message when
every child is done (an idle parent starts a turn on it, as ``ctx.inject_message`` does).

Owns the children's bookkeeping (`live`), the ``subagent_start``/``subagent_stop`` hooks and the
memory provider's ``on_delegation``. It does not run turns (``SessionRegistry``) or decide
approvals (``hermesd.approvals``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermesd.agent.budget import BudgetExceeded
from hermesd.agent.delegate_spec import (
    SCHEMA,
    DelegationError,
    DelegationSettings,
    Task,
    brief,
    parse_tasks,
    route,
    title,
)
from hermesd.agent.loop import Toolsets, TurnResult, new_id
from hermesd.agent.session_registry import SessionRegistry
from hermesd.runtime.session import current_session
from hermesd.store.dbfile import StoreError
from hermesd.tools.registry import BUILTIN

if TYPE_CHECKING:
    from hermesd.commands.registry import CommandRegistry
    from hermesd.rpc.connection import Router
    from hermesd.store.facade import SessionStore
    from hermesd.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

TOOLSET = "delegation"
PLATFORM = "subagent"
#: toolsets a child never gets unless ``delegation.allow_in_children`` names them
BLOCKED_IN_CHILDREN = ("clarify", "memory", "cronjob", "messaging", "code_execution")
INTERRUPTED = "interrupted: hermesd stopped while this sub-agent ran"
CALL_TIMEOUT = 24 * 3600.0  # seconds a foreground delegate_task call may wait for its children

Emit = Callable[[dict[str, Any]], None]


@dataclass
class Child:
    """A running child session."""

    session_id: str
    parent_id: str
    parent_turn: str
    task: Task
    started: float
    turn_id: str | None = None


@dataclass
class Batch:
    """One delegate_task call: its parent, its tasks and how its children may run."""

    parent_id: str
    parent_turn: str
    parent: dict[str, Any]  # the parent's session row
    tasks: list[Task]
    toolsets: Toolsets
    max_iterations: int
    depth: int  # of the children
    background: bool


class Delegations:
    """Runs delegate_task's children; one per daemon."""

    def __init__(
        self,
        sessions: SessionRegistry,
        settings: DelegationSettings,
        *,
        run_policies: dict[str, Any] | None = None,
        parents: dict[str, str] | None = None,
    ) -> None:
        """``run_policies`` is the approval broker's per-session policy of scheduled runs:
        a child takes its parent's; ``parents`` (live child -> parent) is shared with whoever
        routes a child's questions to its parent's clients."""
        self.sessions = sessions
        self.settings = settings
        self.run_policies = run_policies if run_policies is not None else {}
        self.live: dict[str, Child] = {}  # child session id -> its run
        self.parents: dict[str, str] = {} if parents is None else parents
        self._limits: dict[str, asyncio.Semaphore] = {}  # parent id -> its running children
        self._background: set[asyncio.Task[None]] = set()

    def snapshots(self) -> list[dict[str, Any]]:
        """The live children, one plain dict each (``ctx.subagent_lifecycle.list()``)."""
        return [
            {
                "subagent_id": c.session_id,
                "session_id": c.session_id,
                "parent_session_id": c.parent_id,
                "parent_turn_id": c.parent_turn,
                "turn_id": c.turn_id,
                "goal": c.task.goal,
                "role": c.task.role,
                "index": c.task.index,
                "status": "running",
                "started_at": c.started,
            }
            for c in list(self.live.values())
        ]

    # --- the service protocol ------------------------------------------------------------

    def bind(self, router: Router) -> None:
        """No methods of its own: children are sessions (``session.*``)."""

    async def start(self) -> None:
        """Record children a previous run left unfinished as interrupted."""
        store = self.sessions.store
        for child in await store.run(store.sessions.unfinished, PLATFORM):
            await store.run(_record_interrupted, store, child["id"], str(child["parent_id"]))
            log.warning("sub-agent session %s was interrupted by a stop", child["id"])

    async def stop(self) -> None:
        """Stop background delegations; their children's turns are cancelled with every turn
        (and recorded as interrupted at the next start)."""
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.wait(list(self._background), timeout=10)

    def status(self) -> dict[str, Any]:
        return {"subagents_running": len(self.live)}

    def reload(self, config: Any) -> None:
        """``delegation.*`` applies to the delegations that start from now on."""
        self.settings = DelegationSettings.from_config(config)

    def ancestors(self, session_id: str) -> list[str]:
        """The live delegating sessions above ``session_id``, nearest first."""
        chain: list[str] = []
        sid = self.parents.get(session_id)
        while sid is not None and sid not in chain:
            chain.append(sid)
            sid = self.parents.get(sid)
        return chain

    def register(self, tools: ToolRegistry) -> None:
        """Register ``delegate_task`` in toolset ``delegation``."""

        async def delegate_task(args: dict[str, Any], **kw: Any) -> str:
            parent = str(kw.get("session_id") or kw.get("task_id") or "")
            try:
                result = await self.delegate(parent, args)
            except DelegationError as exc:
                result = {"error": str(exc)}
            return json.dumps(result, ensure_ascii=False)

        tools.register(
            "delegate_task",
            TOOLSET,
            SCHEMA,
            delegate_task,
            is_async=True,
            emoji="🔀",
            owner=BUILTIN,
            # not tools.timeout: children are bounded by their own rounds and model requests
            timeout=CALL_TIMEOUT,
        )

    def register_stop(self, commands: CommandRegistry) -> None:
        """``/stop [ID]``: stop this session's running sub-agents (or the one named), or, in a
        sub-agent's own session, that sub-agent."""

        async def stop(raw_args: str) -> str:
            sid = current_session.get()
            named = raw_args.strip()
            targets = [
                c.session_id
                for c in list(self.live.values())
                if sid in (c.parent_id, c.session_id) and named in ("", c.session_id)
            ]
            if not targets:
                return "No running sub-agent" + (f" '{named}'" if named else "") + " here."
            for target in targets:
                await self.sessions._cancel(target)
            return f"Stopped {len(targets)} sub-agent(s): " + ", ".join(targets)

        commands.register(
            "stop", stop, description="Stop this session's running sub-agents", access="any"
        )

    # --- one call ----------------------------------------------------------------------------

    async def delegate(self, parent_id: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run (or start, with ``background``) the children ``args`` asks for."""
        batch = await self._batch(parent_id, args)
        if batch.background:
            task = asyncio.get_running_loop().create_task(self._in_background(batch))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return {
                "status": "dispatched",
                "mode": "background",
                "count": len(batch.tasks),
                "delegation_id": new_id("dlg"),
                "goals": [t.goal[:200] for t in batch.tasks],
                "note": "The sub-agents work in the background; their results arrive in this "
                "conversation as a message when all of them finish. Do not wait or poll.",
            }
        started = time.monotonic()
        results = await self._run_batch(batch)
        return {"results": results, "total_duration_seconds": _seconds(started)}

    async def _batch(self, parent_id: str, args: dict[str, Any]) -> Batch:
        if not parent_id:
            raise DelegationError("delegate_task runs only inside a session's turn.")
        settings = self.settings
        depth = len(self.ancestors(parent_id)) + 1
        if depth > settings.max_spawn_depth:
            raise DelegationError(
                f"Delegation depth limit reached (depth={depth - 1}, max_spawn_depth="
                f"{settings.max_spawn_depth}). Do the work yourself, or raise "
                "delegation.max_spawn_depth in config.yaml."
            )
        tasks = parse_tasks(args)
        route(tasks, args, self.settings.model or self.sessions.agent.client.settings.model)
        if len(tasks) > settings.max_concurrent_children:
            raise DelegationError(
                f"Too many tasks: {len(tasks)} given, delegation.max_concurrent_children is "
                f"{settings.max_concurrent_children}. Send fewer, or split them over calls."
            )
        try:
            parent = dict(
                await self.sessions.store.run(self.sessions.store.sessions.get, parent_id)
            )
        except StoreError as exc:
            raise DelegationError(f"the delegating session is gone: {exc}") from exc
        try:  # budget.action: stop and the parent's budget spent: no children either
            await self.sessions.agent.meter.check(parent_id, str(parent.get("model") or ""), None)
        except BudgetExceeded as exc:
            raise DelegationError(str(exc)) from exc
        running = self.sessions.turns.get(parent_id)
        limit = settings.max_iterations
        wanted = args.get("max_iterations")
        if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted > 0:
            limit = min(limit, wanted)  # the model may only shrink it
        return Batch(
            parent_id=parent_id,
            parent_turn=running[0] if running else "",
            parent=parent,
            tasks=tasks,
            toolsets=self._toolsets(parent_id, args.get("toolsets"), depth, tasks),
            max_iterations=limit,
            depth=depth,
            background=args.get("background") is True,
        )

    def _toolsets(self, parent_id: str, asked: Any, depth: int, tasks: list[Task]) -> Toolsets:
        """The children's toolsets: what was asked (or ``default_toolsets``) within the
        parent's, minus what children never get."""
        if asked is not None and (
            not isinstance(asked, list) or not all(isinstance(t, str) for t in asked)
        ):
            raise DelegationError("'toolsets' must be a list of toolset names.")
        parent = self.sessions.narrowing.get(parent_id) or Toolsets()
        enabled = asked if asked is not None else self.settings.default_toolsets
        if parent.enabled is not None:
            enabled = [t for t in (enabled or parent.enabled) if t in parent.enabled]
        disabled = set(parent.disabled)
        disabled.update(t for t in BLOCKED_IN_CHILDREN if t not in self.settings.allow_in_children)
        leaf = all(t.role != "orchestrator" for t in tasks)
        if leaf or depth >= self.settings.max_spawn_depth:
            disabled.add(TOOLSET)
        return Toolsets(enabled=enabled, disabled=frozenset(disabled))

    async def _in_background(self, batch: Batch) -> None:
        """Run a background batch, then hand its results to the parent as a message."""
        started = time.monotonic()
        try:
            results = await self._run_batch(batch)
        except asyncio.CancelledError:
            return  # the daemon stops: the children are recorded as interrupted
        payload = {"results": results, "total_duration_seconds": _seconds(started)}
        text = "[Background delegation finished: the sub-agents' results follow.]\n" + json.dumps(
            payload, ensure_ascii=False, indent=1
        )
        # an idle parent starts a turn on it; a busy one right after its running turn
        self.sessions.wake(batch.parent_id, text, "delegation")

    async def _run_batch(self, batch: Batch) -> list[dict[str, Any]]:
        runs = [self._run_child(batch, task) for task in batch.tasks]
        results = list(await asyncio.gather(*runs))
        await self._tell_provider(batch, results)
        return results

    # --- one child ---------------------------------------------------------------------------

    async def _run_child(self, batch: Batch, task: Task) -> dict[str, Any]:
        started = time.monotonic()
        try:
            child = await self._spawn(batch, task)
        except StoreError as exc:
            log.warning("delegate_task: could not create a child session: %s", exc)
            return _entry(task, "error", None, str(exc), 0, started, None)
        limit = self._limits.setdefault(
            batch.parent_id, asyncio.Semaphore(self.settings.max_concurrent_children)
        )
        result: TurnResult | None = None
        status, error = "error", None
        try:
            async with limit:
                result = await self._turn(batch, child)
            status, error = _status(result)
        except asyncio.CancelledError:
            if _cancelled_here():
                raise  # the parent's turn is cancelled: _spawn's cleanup cancels the child
            status, error = "interrupted", "the sub-agent was cancelled"
        except Exception as exc:  # a child's crash is a failed task, not the parent's
            log.exception("sub-agent %s crashed", child.session_id)
            error = f"internal error: {type(exc).__name__}: {exc}"
        finally:
            if _cancelled_here():  # the delegating turn is cancelled: so is the child
                await self._cancel_child(child)
                await self._note(child.session_id, "[sub-agent interrupted: its parent stopped]")
            self._forget(child)
        entry = _entry(
            task,
            status,
            result.final_text if result else None,
            error,
            result.iterations if result else 0,
            started,
            child.session_id,
        )
        entry["exit_reason"] = _exit_reason(result, status)
        if status != "completed":  # the child's own record of how it ended
            await self._note(child.session_id, f"[sub-agent {status}: {error}]")
        self._progress(child, "done" if status == "completed" else "failed", status=status)
        await self._hook_stop(child, entry)
        return entry

    async def _spawn(self, batch: Batch, task: Task) -> Child:
        """The child's session, registered, announced and hooked."""
        parent = batch.parent
        session = await self.sessions.create_session(
            title=title(task.goal),
            platform=PLATFORM,
            parent_id=batch.parent_id,
            owner_uid=parent.get("owner_uid"),
            cwd=parent.get("cwd"),
            model=self.settings.model or parent.get("model"),
        )
        sid = str(session["id"])
        store = self.sessions.store
        await store.run(store.todos.change, sid, lambda _items: [])  # a fork copies; not a child
        child = Child(sid, batch.parent_id, batch.parent_turn, task, time.monotonic())
        self.live[sid] = child
        self.parents[sid] = batch.parent_id
        if batch.parent_id in self.run_policies:  # a scheduled run's children: its approvals
            self.run_policies[sid] = self.run_policies[batch.parent_id]
        self.sessions.watchers[sid] = lambda event: self._relay(child, event)
        self._progress(child, "started")
        await self.sessions.hooks.invoke(
            "subagent_start",
            parent_session_id=batch.parent_id,
            parent_turn_id=batch.parent_turn,
            parent_subagent_id=batch.parent_id if self.parents.get(batch.parent_id) else None,
            child_session_id=sid,
            child_subagent_id=sid,
            child_role=task.role,
            child_goal=task.goal,
        )
        return child

    async def _turn(self, batch: Batch, child: Child) -> TurnResult:
        def started(turn_id: str) -> None:
            child.turn_id = turn_id

        model = child.task.model or self.settings.model
        # on the children's own endpoint (delegation.base_url) a model name is needed
        named = model or batch.parent.get("model") or self.sessions.agent.client.settings.model

        return await self.sessions.run_unsent_turn(
            child.session_id,
            brief(child.task),
            platform=PLATFORM,
            sender_id=f"delegate:{batch.parent_id}",
            toolsets=batch.toolsets,
            started=started,
            model=model,
            max_iterations=batch.max_iterations,
            endpoint=self.settings.endpoint(named) if named else None,
        )

    async def _cancel_child(self, child: Child) -> None:
        running = self.sessions.turns.get(child.session_id)
        if running is not None:
            running[1].cancel()
            await asyncio.wait([running[1]], timeout=10)

    async def _note(self, sid: str, text: str) -> None:
        store = self.sessions.store
        try:
            await store.run(store.messages.append, sid, "assistant", text)
        except StoreError as exc:
            log.warning("could not record the end of sub-agent %s: %s", sid, exc)

    def _forget(self, child: Child) -> None:
        sid = child.session_id
        self.live.pop(sid, None)
        self.parents.pop(sid, None)
        self.run_policies.pop(sid, None)
        self.sessions.watchers.pop(sid, None)
        if not any(c.parent_id == child.parent_id for c in self.live.values()):
            self._limits.pop(child.parent_id, None)

    # --- what the parent hears ----------------------------------------------------------------

    def _relay(self, child: Child, event: dict[str, Any]) -> None:
        """A child's event: its tool calls shown to the parent's clients."""
        if event.get("type") == "tool.started":
            self._progress(child, "tool", tool=event.get("name"))

    def _progress(self, child: Child, state: str, **data: Any) -> None:
        """One ``subagent.progress`` event in the parent session (its delegating turn's)."""
        self.sessions.emit(
            {
                "type": "subagent.progress",
                "session_id": child.parent_id,
                "turn_id": child.parent_turn or None,
                "child_session_id": child.session_id,
                "task_index": child.task.index,
                "goal": child.task.goal[:200],
                "state": state,
                **data,
            }
        )

    async def _hook_stop(self, child: Child, entry: dict[str, Any]) -> None:
        await self.sessions.hooks.invoke(
            "subagent_stop",
            parent_session_id=child.parent_id,
            parent_turn_id=child.parent_turn,
            child_session_id=child.session_id,
            child_role=child.task.role,
            child_summary=entry.get("summary"),
            child_status=entry.get("status"),
            duration_ms=int(float(entry.get("duration_seconds") or 0) * 1000),
        )

    async def _tell_provider(self, batch: Batch, results: list[dict[str, Any]]) -> None:
        """The parent's memory provider hears of each finished task (``on_delegation``)."""
        providers = self.sessions.agent.providers
        if providers is None:
            return
        for task, entry in zip(batch.tasks, results, strict=True):
            await providers.delegated(
                batch.parent_id,
                task=task.goal,
                result=str(entry.get("summary") or ""),
                child_session_id=str(entry.get("session_id") or ""),
            )


def _record_interrupted(store: SessionStore, child: str, parent: str) -> None:
    """On the DB thread: a child cut short by a stop, recorded in it and in its parent (the
    delegating call's result when it still waits, else a note)."""
    store.messages.append(child, "assistant", f"[sub-agent {INTERRUPTED}]")
    try:
        store.sessions.get(parent)
    except StoreError:
        return  # the parent was deleted
    reason = f"{INTERRUPTED} (sub-agent session {child})"
    if not store.messages.close_dangling_tool_calls(parent, reason):
        store.messages.append(parent, "user", f"[Delegated task {reason}; its result is lost.]")


def _status(result: TurnResult) -> tuple[str, str | None]:
    if result.status == "completed":
        return "completed", None
    if result.status == "cancelled":
        return "interrupted", "the sub-agent was cancelled"
    return "failed", result.error or "the sub-agent's turn failed"


def _exit_reason(result: TurnResult | None, status: str) -> str:
    if status == "interrupted":
        return "interrupted"
    if result is None or status != "completed":
        return "error" if result is None else "failed"
    return result.exit_reason


def _entry(
    task: Task,
    status: str,
    summary: str | None,
    error: str | None,
    api_calls: int,
    started: float,
    session_id: str | None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "task_index": task.index,
        "status": status,
        "summary": summary,
        "api_calls": api_calls,
        "duration_seconds": _seconds(started),
        "session_id": session_id,
    }
    if error is not None:
        entry["error"] = error
    return entry


def _seconds(started: float) -> float:
    return round(time.monotonic() - started, 2)


def _cancelled_here() -> bool:
    """Whether the running task itself is being cancelled (not a child it waited for)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
