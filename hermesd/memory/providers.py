"""`MemoryProviders`: the external memory provider ``memory.provider`` selects, per session.

One provider instance per session (made by `hermesd.plugins.memory_providers`), driven through
the reference's lifecycle: ``initialize`` when the session's first turn here starts,
``system_prompt_block`` at prompt assembly, ``on_turn_start`` then ``prefetch`` before the tool
loop (its text fenced in a ``<memory-context>`` block for the API copy of the user message),
``sync_turn`` then ``queue_prefetch`` after a completed turn (in the background, in order per
session, journalled: `hermesd.memory.provider_journal`), its tools, ``on_memory_write`` after
built-in writes, ``on_session_end`` and ``shutdown`` at the end. Every call goes through
`hermesd.memory.provider_calls` (worker thread, deadline, the session's context); a call that
raises or overruns is logged and the turn goes on without it.

Session switches (the instance follows the conversation, as in the reference, where one agent's
provider is told its session id changed):

- ``on_session_switch(old_session_id, new_session_id, reason=..., reset=...)`` — public: the
  instance of ``old_session_id`` (if it has one) is told ``on_session_switch(new_session_id,
  parent_session_id=old_session_id, reset=reset, reason=reason)`` and serves
  ``new_session_id`` from then on (unless that session has its own already). In the background,
  after the old session's pending ``sync_turn``; the new session's next turn waits for it. The
  daemon calls it for ``/new`` (``reason="new_session"``, ``reset=True``, after
  ``on_session_end``), ``/resume`` (``"resume"``) and ``/undo`` (``rewound=True``); compression
  calls it with ``reason="compression"`` (the same id twice when compressed in place).
- ``await on_pre_compress(session_id, messages) -> str`` — public: the provider's text for the
  compression summary ("" when the session has no provider, or it raised or overran: logged).
- ``forked(parent_session_id, fork_id)`` — a fork's instance, made at its first turn, is
  initialized with ``parent_session_id=`` and told ``on_session_switch(fork_id,
  parent_session_id=parent, reset=False, reason="branch")`` before its first turn.

The agent loop and the session service call in; nothing here touches the store but the journal.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermesd.memory.builtin import MemoryWrite
from hermesd.memory.provider_calls import (
    CALL_TIMEOUT,
    PREFETCH_TIMEOUT,
    ProviderCaller,
    memory_context_block,
    usable_tools,
)
from hermesd.memory.provider_cli import ProviderCli
from hermesd.memory.provider_journal import DeliveryJournal
from hermesd.memory.provider_source import ProviderSource
from hermesd.memory.provider_writes import mirrored_writes
from hermesd.plugins.memory_providers import ProviderRegistrations, provider_name
from hermesd.runtime.workers import WorkerPool
from hermesd.store.facade import SessionStore

__all__ = ["ActiveProvider", "MemoryProviders", "memory_context_block"]

log = logging.getLogger(__name__)

DRAIN_TIMEOUT = 5.0  # at daemon stop: background deliveries still running are given up
END_TIMEOUT = 5.0  # on_session_end and shutdown at daemon stop
PRE_COMPRESS_TIMEOUT = 10.0  # compression waits for it: bounded like a prefetch
SWITCH_WAIT = 8.0  # the new session's turn waits this long for the switch to be told
MAX_SESSIONS = 256  # live provider instances; the least recently used one is ended past this
MAX_LINEAGE = 1024  # forks waiting for their first turn
#: the instance that mirrors writes made outside any session (a person's, hermesctl memory)
NO_SESSION = ""


@dataclass
class ActiveProvider:
    """The provider instance of one session."""

    session_id: str
    provider: Any
    name: str
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> function schema
    platform: str = "cli"
    turns: int = 0
    prompt_block: str | None = None
    parent_session_id: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)  # the last turn's history
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # sync_turn in order
    switching: asyncio.Task[Any] | None = None  # a switch to this session not told yet


class MemoryProviders:
    """The selected provider's instances for the daemon's sessions."""

    def __init__(
        self,
        home: Path,
        config: Any,
        pool: WorkerPool,
        env: Mapping[str, str],
        registrations: ProviderRegistrations,
        core_tool_names: Callable[[], Iterable[str]] | None = None,
        store: SessionStore | None = None,
    ) -> None:
        """``core_tool_names()`` returns the names provider tools may not shadow; ``store``
        journals deliveries not made yet (None: not journalled)."""
        self.home, self.pool, self.env = home, pool, env
        self.calls = ProviderCaller(pool)
        self.journal = DeliveryJournal(store)
        #: the active provider's cli.py as ``hermesctl <name>`` (the daemon sets its sinks)
        self.cli = ProviderCli(pool)
        #: awaited before the start-up check: plugins that register a provider have loaded
        self.ready: Callable[[], Awaitable[None]] | None = None
        self._start_lock = asyncio.Lock()
        self.registrations = registrations
        self.source = ProviderSource(home, env, pool, self.calls, registrations)
        self.core_tool_names: Callable[[], Iterable[str]] = core_tool_names or set
        self._sessions: OrderedDict[str, ActiveProvider] = OrderedDict()
        self._refused: dict[str, str] = {}  # session -> why it has none (not retried per turn)
        self._lineage: OrderedDict[str, str] = OrderedDict()  # fork -> parent, until its turn
        self._background: set[asyncio.Task[Any]] = set()
        self.reload(config)

    def reload(self, cfg: Any) -> None:
        """Take ``memory.provider`` (a change applies to sessions that start afterwards)."""
        if self.source.select(str(cfg.get("memory.provider", "") or "").strip()):
            self._refused.clear()
            self.cli.forget()

    @property
    def selected(self) -> str:
        """The provider ``memory.provider`` names ("" for none)."""
        return self.source.selected

    def status(self, name: str) -> dict[str, Any]:
        """``{active, available, reason}`` of provider ``name`` for the plugin listing."""
        return self.source.status(name)

    async def instance_of(self, name: str) -> Any:
        """A fresh, uninitialized instance of provider ``name`` (for its setup), or None."""
        return await self.source.instance_of(name)

    async def known_names(self) -> list[str]:
        """Every provider's name."""
        return await self.source.known_names()

    async def check(self) -> None:
        """Make an instance of the selected provider and ask ``is_available()`` (and
        ``unavailable_reason()``), for the listing and an early warning in the log; offer its
        cli.py as ``hermesctl <name>``."""
        if not self.selected:
            return
        if self.ready is not None:
            await self.ready()
        provider = await self.source.instance()
        if provider is None:
            self.source.checked = {"available": False, "reason": "not found or not loadable"}
            return
        await self.source.available(provider)
        if self.source.factory is not None:
            await self.cli.offer(self.selected, self.source.factory)

    async def _call(
        self, active: ActiveProvider | Any, method: str, *args: Any, **kwargs: Any
    ) -> Any:
        """``provider.method(*args, **kwargs)`` as the session; None after logging a failure."""
        if isinstance(active, ActiveProvider):
            return (
                await self.calls.invoke(
                    active.provider,
                    method,
                    *args,
                    as_session=active.session_id,
                    name=active.name,
                    **kwargs,
                )
            )[1]
        return (await self.calls.invoke(active, method, *args, **kwargs))[1]

    # --- the session's instance ----------------------------------------------------------

    def active(self, session_id: str) -> ActiveProvider | None:
        """The session's provider, when it has one started."""
        return self._sessions.get(session_id)

    async def start(self, session_id: str, **init: Any) -> ActiveProvider | None:
        """The session's provider, made and initialized at its first turn (``init``: the
        reference's initialize kwargs besides session_id, hermes_home and agent_context)."""
        if not self.selected or session_id in self._refused:
            return None
        active = self._sessions.get(session_id)
        if active is None:
            async with self._start_lock:  # one instance per session, also against a replay
                active = self._sessions.get(session_id)
                if active is None:
                    active = await self._make(session_id, init)
        else:
            self._sessions.move_to_end(session_id)
        if active is not None and active.switching is not None:
            switching, active.switching = active.switching, None
            # told of the switch before its turn, but a provider slow to end the old session
            # (an LLM-bound extraction) holds the new session's turn only so long
            done, _ = await asyncio.wait([switching], timeout=SWITCH_WAIT)
            if not done:
                log.warning(
                    "Memory provider '%s' is still being told of the switch to session %s "
                    "after %gs; the turn goes on",
                    active.name,
                    session_id,
                    SWITCH_WAIT,
                )
        return active

    async def _make(self, session_id: str, init: dict[str, Any]) -> ActiveProvider | None:
        provider = await self.source.instance()
        if provider is None:
            return None
        name = provider_name(provider)
        if not await self.source.available(provider):
            self._refused[session_id] = "unavailable"
            return None
        parent = self._lineage.pop(session_id, "")
        active = ActiveProvider(session_id, provider, name, parent_session_id=parent)
        active.platform = str(init.pop("platform", None) or "cli")
        kwargs = {
            "hermes_home": str(self.home),
            "platform": active.platform,
            "agent_context": "primary",
            "agent_identity": "default",
            "agent_workspace": "hermes",
            **({"parent_session_id": parent} if parent else {}),
            **{k: v for k, v in init.items() if v is not None},
        }
        await self._call(active, "initialize", session_id, **kwargs)
        if parent:  # a fork: the reference's /branch tells the provider it continues here
            await self._call(
                active,
                "on_session_switch",
                session_id,
                parent_session_id=parent,
                reset=False,
                reason="branch",
            )
        active.tools = await self._tools_of(active)
        self._keep(active)
        return active

    def _keep(self, active: ActiveProvider) -> None:
        self._sessions[active.session_id] = active
        while len(self._sessions) > MAX_SESSIONS:
            _, old = self._sessions.popitem(last=False)
            self._spawn(self._end(old, []))

    async def _tools_of(self, active: ActiveProvider) -> dict[str, dict[str, Any]]:
        schemas = await self._call(active, "get_tool_schemas")
        return usable_tools(active.name, schemas, set(self.core_tool_names()))

    # --- the turn ------------------------------------------------------------------------

    async def system_prompt_block(self, active: ActiveProvider) -> str:
        """The provider's static prompt text ("" when it has none or fails), read once per
        session so that the prompt prefix stays cacheable."""
        if active.prompt_block is None:
            block = await self._call(active, "system_prompt_block")
            active.prompt_block = block.strip() if isinstance(block, str) else ""
        return active.prompt_block

    async def recall(self, active: ActiveProvider, message: str) -> str:
        """``on_turn_start`` then ``prefetch`` (8 s): the fenced context block, or ""."""
        active.turns += 1
        await self._call(active, "on_turn_start", active.turns, message)
        text = await self._call(
            active, "prefetch", message, timeout=PREFETCH_TIMEOUT, session_id=active.session_id
        )
        return memory_context_block(text) if isinstance(text, str) else ""

    def turn_done(
        self, active: ActiveProvider, user: str, assistant: str, messages: list[dict[str, Any]]
    ) -> None:
        """``sync_turn`` then ``queue_prefetch`` in the background, in order per session; the
        sync is journalled until the provider answered it."""
        active.messages = list(messages)
        payload = {"user": user, "assistant": assistant, "messages": list(messages)}
        session_id = active.session_id  # the turn's, even if the instance moves on meanwhile

        async def sync() -> None:
            delivery = await self.journal.keep(
                active.name, session_id, "sync_turn", {**payload, "platform": active.platform}
            )
            async with active.lock:
                await self._deliver(active, session_id, "sync_turn", payload, delivery)
                await self._call(active, "queue_prefetch", user, session_id=session_id)

        self._spawn(sync())

    async def _deliver(
        self,
        active: ActiveProvider,
        session_id: str,
        kind: str,
        payload: dict[str, Any],
        delivery: int,
    ) -> bool:
        """Make one journalled delivery; forget it once the provider answered (an overrun or
        a daemon stop keeps it for the next start). Whether it answered."""
        if kind == "sync_turn":
            answered = await self.calls.sync_turn(active.provider, session_id, active.name, payload)
        else:
            answered = await self.calls.memory_write(
                active.provider, session_id, active.name, payload
            )
        if answered:
            await self.journal.made(delivery)
        return answered

    async def replay(self) -> None:
        """Make the deliveries a previous run of the daemon left in the journal, in order."""
        if not self.selected:
            return

        async def deliver(session_id: str, kind: str, payload: dict[str, Any], row: int) -> bool:
            active = await self.start(session_id, platform=payload.get("platform"))
            if active is None:
                return False  # not available now: kept for a later start
            async with active.lock:
                await self._deliver(active, session_id, kind, payload, row)
            return True

        await self.journal.replay(self.selected, deliver)

    def openai_tools(self, active: ActiveProvider) -> list[dict[str, Any]]:
        """The provider's tools in the request's format."""
        return [{"type": "function", "function": s} for s in active.tools.values()]

    async def call_tool(self, active: ActiveProvider, name: str, arguments: str) -> str:
        """Run one of the provider's tools: its JSON text, or an error the model can read."""
        try:
            args = json.loads(arguments or "{}")
        except ValueError as exc:
            return json.dumps({"error": f"Invalid JSON arguments for tool '{name}': {exc}"})
        result = await self._call(
            active, "handle_tool_call", name, args if isinstance(args, dict) else {}
        )
        if result is None:
            return json.dumps({"error": f"Memory tool '{name}' failed (see the daemon log)"})
        return result if isinstance(result, str) else json.dumps(result, default=str)

    # --- built-in writes ------------------------------------------------------------------

    def memory_written(self, write: MemoryWrite) -> None:
        """A built-in write reached the files: tell the provider — the instance of the
        session that made it, or, for a person's write (or an approved one whose session has
        no instance here), the instance that serves writes made outside a session."""
        if not self.selected:
            return
        active = self._sessions.get(write.session_id) if write.session_id else None
        writes = mirrored_writes(
            write,
            parent_session_id=active.parent_session_id if active else "",
            platform=active.platform if active else "cli",
        )
        if writes:
            self._spawn(self._write_deliveries(write, writes))

    async def _write_deliveries(self, write: MemoryWrite, writes: list[dict[str, Any]]) -> None:
        active = self._sessions.get(write.session_id) if write.session_id else None
        if active is None:
            user = str(write.by_uid) if write.by_uid is not None else None
            active = await self.start(NO_SESSION, platform="cli", user_id=user)
        if active is None:
            return
        for payload in writes:
            delivery = await self.journal.keep(
                active.name,
                active.session_id,
                "on_memory_write",
                {**payload, "platform": active.platform},
            )
            await self._deliver(active, active.session_id, "on_memory_write", payload, delivery)

    # --- switches ---------------------------------------------------------------------------

    def on_session_switch(
        self,
        old_session_id: str,
        new_session_id: str,
        *,
        reason: str,
        reset: bool = False,
        rewound: bool = False,
        end_old: bool = False,
    ) -> None:
        """The conversation of ``old_session_id`` goes on as ``new_session_id`` (the same id
        for an in-place compression or a rewind): its instance is told and moves along, in the
        background, after its pending deliveries. ``end_old``: ``on_session_end`` first (a real
        boundary: ``/new``). Nothing happens when the old session has no instance here."""
        self._refused.pop(new_session_id, None)
        active = self._sessions.get(old_session_id)
        if active is None or not self.selected:
            return
        if new_session_id != old_session_id and new_session_id in self._sessions:
            if end_old:  # the new session has its own instance: this one's session ended
                self._sessions.pop(old_session_id, None)
                self._spawn(self._end(active, []))
            return
        moved = active
        if new_session_id != old_session_id:
            self._sessions.pop(old_session_id, None)
            moved = ActiveProvider(
                new_session_id,
                active.provider,
                active.name,
                tools=active.tools,
                platform=active.platform,
                turns=0 if reset else active.turns,
                parent_session_id=old_session_id,
                lock=active.lock,  # after the old session's pending sync_turn
            )
            self._keep(moved)
        kwargs: dict[str, Any] = {"rewound": True} if rewound else {"reason": reason}
        parent = "" if rewound else old_session_id
        moved.switching = self._spawn(self._switched(active, moved, parent, reset, end_old, kwargs))

    async def _switched(
        self,
        old: ActiveProvider,
        new: ActiveProvider,
        parent: str,
        reset: bool,
        end_old: bool,
        kwargs: dict[str, Any],
    ) -> None:
        async with old.lock:
            if end_old:
                await self._call(old, "on_session_end", list(old.messages))
            await self._call(
                new,
                "on_session_switch",
                new.session_id,
                parent_session_id=parent,
                reset=reset,
                **kwargs,
            )

    def session_switched(self, old_session_id: str, new_session_id: str, reason: str) -> None:
        """What the session service reports: ``new_session`` (``/new``), ``resume``,
        ``rewind`` (``/undo``), ``branch`` (a fork, told at its first turn)."""
        if reason == "branch":
            self.forked(old_session_id, new_session_id)
        elif reason == "new_session":
            self.on_session_switch(
                old_session_id, new_session_id, reason=reason, reset=True, end_old=True
            )
        elif reason == "rewind":
            self.on_session_switch(old_session_id, old_session_id, reason=reason, rewound=True)
        else:
            self.on_session_switch(old_session_id, new_session_id, reason=reason)

    def forked(self, parent_session_id: str, fork_id: str) -> None:
        """``fork_id`` was copied from ``parent_session_id``: its instance, made at its first
        turn, is told it branched from there."""
        if not self.selected:
            return
        self._lineage[fork_id] = parent_session_id
        while len(self._lineage) > MAX_LINEAGE:
            self._lineage.popitem(last=False)

    async def delegated(
        self, session_id: str, *, task: str, result: str, child_session_id: str
    ) -> None:
        """``on_delegation`` of ``session_id``'s provider: a sub-agent it delegated finished."""
        active = self._sessions.get(session_id)
        if active is not None:
            await self._call(
                active, "on_delegation", task=task, result=result, child_session_id=child_session_id
            )

    async def on_pre_compress(self, session_id: str, messages: list[dict[str, Any]]) -> str:
        """The provider's ``on_pre_compress(messages)`` text for the compression summary;
        "" when the session has no provider, or it raised, overran (10 s) or returned no text."""
        active = self._sessions.get(session_id)
        if active is None:
            return ""
        text = await self._call(
            active, "on_pre_compress", list(messages), timeout=PRE_COMPRESS_TIMEOUT
        )
        return text.strip() if isinstance(text, str) else ""

    # --- ends ------------------------------------------------------------------------------

    async def end_session(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        """A real boundary (deleted): ``on_session_end(messages)`` then ``shutdown()``."""
        self._refused.pop(session_id, None)
        self._lineage.pop(session_id, None)
        active = self._sessions.pop(session_id, None)
        if active is not None:
            await self._end(active, messages)

    async def _end(
        self, active: ActiveProvider, messages: list[dict[str, Any]], timeout: float = CALL_TIMEOUT
    ) -> None:
        async with active.lock:  # after the pending sync_turn
            history = list(messages or active.messages)
            await self._call(active, "on_session_end", history, timeout=timeout)
            if active.provider is not self.registrations.provider:
                await self._call(active, "shutdown", timeout=timeout)

    async def close(self) -> None:
        """Daemon stop: background deliveries get a few seconds, then every session's provider
        is ended (``on_session_end``, ``shutdown``), each call bounded."""
        if self._background:
            _, late = await asyncio.wait(list(self._background), timeout=DRAIN_TIMEOUT)
            for task in late:
                log.warning("a memory provider delivery was still running at stop; given up")
                task.cancel()
            if late:
                await asyncio.wait(late)
        while self._sessions:
            _, active = self._sessions.popitem(last=False)
            await self._end(active, [], timeout=END_TIMEOUT)
        shared = self.registrations.provider
        if shared is not None:
            await self._call(shared, "shutdown", timeout=END_TIMEOUT)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task
