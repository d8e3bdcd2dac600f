"""`MemoryProviders`: the external memory provider ``memory.provider`` selects, per session.

One provider instance per session (made by `hermesd.plugins.memory_providers`), driven through
the reference's lifecycle: ``initialize`` when the session's first turn here starts,
``system_prompt_block`` at prompt assembly, ``on_turn_start`` then ``prefetch`` before the tool
loop (its text fenced in a ``<memory-context>`` block for the API copy of the user message),
``sync_turn`` then ``queue_prefetch`` after a completed turn (in the background, in order per
session), its tools, ``on_memory_write`` after built-in writes, ``on_session_end`` and
``shutdown`` at the end. Every call runs on the plugin worker threads with a deadline; a call
that raises or overruns is logged with the provider's name and the method, and the turn goes on
without it. The agent loop calls in; nothing here touches the store.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from hermesd.memory.builtin import MemoryWrite
from hermesd.plugins.memory_providers import (
    ProviderFactory,
    ProviderRegistrations,
    discover_providers,
    provider_name,
)
from hermesd.plugins.workers import WorkerPool, WorkTimeout, call_bounded
from hermesd.store.sessions import SessionStore

log = logging.getLogger(__name__)

PREFETCH_TIMEOUT = 8.0  # the reference's bound on an external prefetch
CALL_TIMEOUT = 30.0  # any other call (initialize may open a connection)
DRAIN_TIMEOUT = 5.0  # at daemon stop: background deliveries still running are given up
END_TIMEOUT = 5.0  # on_session_end and shutdown at daemon stop
MAX_SESSIONS = 256  # live provider instances; the least recently used one is ended past this
CONTEXT_NOTE = (
    "[System note: The following is recalled memory context, NOT new user input. Treat as "
    "authoritative reference data — this is the agent's persistent memory and should inform "
    "all responses.]"
)
MIRRORED_ACTIONS = ("add", "replace", "remove")


def memory_context_block(text: str) -> str:
    """The reference's fence around recalled text ("" for none); fence tags inside are removed."""
    if not text or not text.strip():
        return ""
    clean = text.replace("<memory-context>", "").replace("</memory-context>", "").strip()
    return f"<memory-context>\n{CONTEXT_NOTE}\n\n{clean}\n</memory-context>"


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
    messages: list[dict[str, Any]] = field(default_factory=list)  # the last turn's history
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # sync_turn in order


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
        self.store = store
        #: awaited before the start-up check: plugins that register a provider have loaded
        self.ready: Callable[[], Awaitable[None]] | None = None
        self._start_lock = asyncio.Lock()
        self.registrations = registrations
        self.core_tool_names: Callable[[], Iterable[str]] = core_tool_names or set
        self._factory: ProviderFactory | None = None
        self._sessions: OrderedDict[str, ActiveProvider] = OrderedDict()
        self._refused: dict[str, str] = {}  # session -> why it has none (not retried per turn)
        self._warned: set[str] = set()
        self._background: set[asyncio.Task[Any]] = set()
        #: what the listing shows of the selected provider: {active, available, reason}
        self._status: dict[str, Any] = {}
        self.reload(config)

    def reload(self, cfg: Any) -> None:
        """Take ``memory.provider`` (a change applies to sessions that start afterwards)."""
        selected = str(cfg.get("memory.provider", "") or "").strip()
        if selected != getattr(self, "selected", None):
            self._factory = None
            self._refused.clear()
            self._status = {}
        self.selected = selected

    def status(self, name: str) -> dict[str, Any]:
        """``{active, available, reason}`` of provider ``name`` for the plugin listing
        (available is None until the selected one was checked)."""
        if name != self.selected or not name:
            return {"active": False, "available": None, "reason": ""}
        return {"active": True, "available": None, "reason": "", **self._status}

    async def check(self) -> None:
        """Make an instance of the selected provider and ask ``is_available()`` (and
        ``unavailable_reason()``), for the listing and an early warning in the log."""
        if not self.selected:
            return
        if self.ready is not None:
            await self.ready()
        provider = await self._instance()
        if provider is None:
            self._status = {"available": False, "reason": "not found or not loadable"}
            return
        await self._availability(provider)

    async def _availability(self, provider: Any) -> bool:
        available = await self._call(provider, "is_available") is True
        reason = "" if available else await self._call(provider, "unavailable_reason")
        self._status = {"available": available, "reason": str(reason or "")}
        if not available:
            self._warn_once(
                f"Memory provider '{provider_name(provider)}' is not available"
                + (f": {reason}" if reason else "")
                + "; using the built-in memory only"
            )
        return available

    # --- calling provider code -----------------------------------------------------------

    async def _call(
        self,
        active: ActiveProvider | Any,
        method: str,
        *args: Any,
        timeout: float = CALL_TIMEOUT,
        **kwargs: Any,
    ) -> Any:
        """``provider.method(*args, **kwargs)`` on a worker; None after logging when it fails."""
        return (await self._invoke(active, method, *args, timeout=timeout, **kwargs))[1]

    async def _invoke(
        self,
        active: ActiveProvider | Any,
        method: str,
        *args: Any,
        timeout: float = CALL_TIMEOUT,
        **kwargs: Any,
    ) -> tuple[bool, Any]:
        """(answered, result): answered is False when the call overran (abandoned); a call
        that raised answered (logged, result None)."""
        provider = active.provider if isinstance(active, ActiveProvider) else active
        name = active.name if isinstance(active, ActiveProvider) else provider_name(provider)
        fn = getattr(provider, method, None)
        if not callable(fn):
            return True, None
        try:
            result = await call_bounded(
                self.pool, fn, args, kwargs, timeout, key=f"memory-provider:{name}"
            )
            return True, result
        except WorkTimeout:
            log.warning(
                "Memory provider '%s' %s() did not return within %gs; abandoned, the turn goes on",
                name,
                method,
                timeout,
            )
            return False, None
        except Exception as exc:
            log.warning(
                "Memory provider '%s' %s() failed: %s: %s; the turn goes on",
                name,
                method,
                type(exc).__name__,
                exc,
                exc_info=True,
            )
        return True, None

    async def _instance(self) -> Any:
        """A fresh instance of the selected provider, or None (logged once per name)."""
        shared = self.registrations.provider
        if shared is not None and provider_name(shared) == self.selected:
            return shared  # handed to ctx.register_memory_provider: one instance for all
        if self._factory is None:
            found = await asyncio.to_thread(discover_providers, self.home, self.env)
            match = next((c for c in found if c.name == self.selected), None)
            if match is None:
                self._warn_once(
                    f"memory.provider is '{self.selected}', but no memory provider of that "
                    f"name was found (bundled, {self.home}/plugins/<name>/, entry points "
                    "hermes_agent.memory_providers, or a plugin's register_memory_provider); "
                    "using the built-in memory only. Known providers: "
                    + (", ".join(c.name for c in found) or "none")
                )
                return None
            self._factory = ProviderFactory(match)
        factory = self._factory
        try:
            instance = await self.pool.run(factory.create, CALL_TIMEOUT, key="memory-provider")
        except Exception as exc:
            self._warn_once(
                f"Memory provider '{self.selected}' could not be loaded from "
                f"{factory.candidate.location}: {type(exc).__name__}: {exc}; using the built-in "
                "memory only"
            )
            log.debug("loading memory provider failed", exc_info=True)
            return None
        if instance is None:
            self._warn_once(
                f"Memory provider '{self.selected}' loaded but no provider instance found "
                "(no register_memory_provider call, no MemoryProvider subclass)"
            )
        return instance

    def _warn_once(self, text: str) -> None:
        if text not in self._warned:
            self._warned.add(text)
            log.warning("%s", text)

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
        if active is not None:
            self._sessions.move_to_end(session_id)
            return active
        async with self._start_lock:  # one instance per session, also against a replay
            active = self._sessions.get(session_id)
            return active if active is not None else await self._make(session_id, init)

    async def _make(self, session_id: str, init: dict[str, Any]) -> ActiveProvider | None:
        provider = await self._instance()
        if provider is None:
            return None
        name = provider_name(provider)
        if not await self._availability(provider):
            self._refused[session_id] = "unavailable"
            return None
        active = ActiveProvider(session_id, provider, name)
        active.platform = str(init.pop("platform", None) or "cli")
        kwargs = {
            "hermes_home": str(self.home),
            "platform": active.platform,
            "agent_context": "primary",
            "agent_identity": "default",
            "agent_workspace": "hermes",
            **{k: v for k, v in init.items() if v is not None},
        }
        await self._call(active, "initialize", session_id, **kwargs)
        active.tools = await self._tools_of(active)
        self._sessions[session_id] = active
        while len(self._sessions) > MAX_SESSIONS:
            _, old = self._sessions.popitem(last=False)
            self._spawn(self._end(old, []))
        return active

    async def _tools_of(self, active: ActiveProvider) -> dict[str, dict[str, Any]]:
        schemas = await self._call(active, "get_tool_schemas")
        core = set(self.core_tool_names())
        tools: dict[str, dict[str, Any]] = {}
        for raw in schemas if isinstance(schemas, list) else []:
            schema = raw.get("function", raw) if isinstance(raw, dict) else None
            name = schema.get("name") if isinstance(schema, dict) else None
            if not isinstance(name, str) or not name:
                log.warning(
                    "Memory provider '%s' returned a tool schema with no name; skipped", active.name
                )
                continue
            if name in core:
                log.warning(
                    "Memory provider '%s' tool '%s' shadows a core tool name; dropped "
                    "(core tools always win)",
                    active.name,
                    name,
                )
                continue
            tools.setdefault(name, dict(cast(dict[str, Any], schema)))
        return tools

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

        async def sync() -> None:
            delivery = await self._journal(active, "sync_turn", payload)
            async with active.lock:
                await self._deliver(active, "sync_turn", payload, delivery)
                await self._call(active, "queue_prefetch", user, session_id=active.session_id)

        self._spawn(sync())

    async def _journal(self, active: ActiveProvider, kind: str, payload: dict[str, Any]) -> int:
        """Keep a delivery in state.db before it is made (0: not kept)."""
        if self.store is None:
            return 0
        try:
            text = json.dumps({**payload, "platform": active.platform}, default=str)
            store = self.store
            return await store.run(
                store.journal_delivery, active.name, active.session_id, kind, text
            )
        except Exception:
            log.exception(
                "could not journal a %s delivery to memory provider '%s'", kind, active.name
            )
            return 0

    async def _deliver(
        self, active: ActiveProvider, kind: str, payload: dict[str, Any], delivery: int
    ) -> None:
        """Make one journalled delivery; forget it once the provider answered (an overrun or
        a daemon stop keeps it for the next start)."""
        if kind == "sync_turn":
            answered, _ = await self._invoke(
                active,
                "sync_turn",
                payload.get("user", ""),
                payload.get("assistant", ""),
                session_id=active.session_id,
                messages=payload.get("messages") or [],
            )
        else:
            answered, _ = await self._invoke(
                active,
                "on_memory_write",
                payload.get("action", ""),
                payload.get("target", "memory"),
                payload.get("content", ""),
                metadata=payload.get("metadata") or {},
            )
        if answered and delivery and self.store is not None:
            try:
                await self.store.run(self.store.delivery_made, delivery)
            except Exception:
                log.exception("could not mark memory provider delivery %d made", delivery)

    async def replay(self) -> None:
        """Make the deliveries a previous run of the daemon left in the journal, in order."""
        if not self.selected or self.store is None:
            return
        try:
            pending = await self.store.run(self.store.pending_deliveries, self.selected)
        except Exception:
            log.exception("could not read the memory provider journal")
            return
        if pending:
            log.info(
                "Memory provider '%s': delivering %d call(s) journalled before the restart",
                self.selected,
                len(pending),
            )
        for row in pending:
            payload = json.loads(row["payload"])
            active = await self.start(row["session_id"], platform=payload.get("platform"))
            if active is None:
                return  # not available now: kept for a later start
            async with active.lock:
                await self._deliver(active, row["kind"], payload, int(row["id"]))

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
        """A built-in write reached the files: tell the provider of the session that made it."""
        active = self._sessions.get(write.session_id) if write.session_id else None
        if active is None:
            return
        payload = write.payload
        ops = payload.get("operations") if payload.get("action") == "batch" else [payload]
        target = str(payload.get("target") or "memory")
        for op in ops if isinstance(ops, list) else []:
            if not isinstance(op, dict) or op.get("action") not in MIRRORED_ACTIONS:
                continue
            metadata = {
                "write_origin": "assistant_tool" if write.origin == "tool" else write.origin,
                "execution_context": "foreground",
                "session_id": write.session_id,
                "parent_session_id": "",
                "platform": active.platform,
                "tool_name": "memory",
            }
            if op.get("old_text"):
                metadata["old_text"] = str(op["old_text"])
            payload = {
                "action": str(op["action"]),
                "target": target,
                "content": str(op.get("content") or ""),
                "metadata": metadata,
            }
            self._spawn(self._write_delivery(active, payload))

    async def _write_delivery(self, active: ActiveProvider, payload: dict[str, Any]) -> None:
        delivery = await self._journal(active, "on_memory_write", payload)
        await self._deliver(active, "on_memory_write", payload, delivery)

    # --- ends ------------------------------------------------------------------------------

    async def end_session(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        """A real boundary (reset, delete): ``on_session_end(messages)`` then ``shutdown()``."""
        self._refused.pop(session_id, None)
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

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
