"""What plugins add beside hooks, owned by the hook bus so a plugin's unload removes it too.

The post-0.19 plugin API (docs/hermes-compat.md §4, "Newer ctx members") gives plugins
system-prompt sections, an event bus between plugins (``ctx.emit``/``ctx.subscribe``),
supervised background tasks (``ctx.spawn_task``) and approval transports. `PluginSurfaces` keeps
them per plugin; `HookBus.unregister_plugin` calls `unregister_plugin` here, so a reload or an
uninstall leaves nothing behind (tasks cancelled, subscriptions and sections dropped).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import re
import threading
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from hermesd import redact
from hermesd.runtime.context_refs import ReferenceKinds

log = logging.getLogger(__name__)

#: Limits of a system-prompt section (the newer reference's: prompt bytes charged every turn).
SECTION_MAX_CHARS = 4000
SECTIONS_TOTAL_CHARS = 8000
SECTION_POSITIONS = frozenset({"after_memory"})
_SECTION_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
#: The event namespace only the host may publish in.
HOST_EVENT_NAMESPACE = "hermes"
#: Events queued and not yet delivered; a full queue drops the emit (emit never waits).
EVENT_PENDING_CAP = 64
_APPROVAL_TRANSPORT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


@dataclass(frozen=True)
class PromptSection:
    """A plugin's block of the system prompt: text, or ``fn(session_info) -> text``."""

    plugin: str
    id: str
    content: str | Callable[[Mapping[str, Any]], Any]
    max_chars: int


@dataclass(frozen=True)
class ApprovalTransport:
    """A plugin's way to put an approval in front of a person: ``present(request) -> choice``."""

    plugin: str
    name: str
    present: Callable[..., Any]


_Owned = TypeVar("_Owned", PromptSection, ApprovalTransport)


def valid_section_id(value: Any) -> bool:
    """Whether ``value`` is a section id: 1–128 lowercase letters, digits, ``._-``."""
    return isinstance(value, str) and _SECTION_ID.fullmatch(value) is not None


def valid_transport_name(value: str) -> bool:
    """Whether ``value`` is an approval transport name (``builtin`` is the host's)."""
    return value != "builtin" and _APPROVAL_TRANSPORT_NAME.fullmatch(value) is not None


class PluginSurfaces:
    """System-prompt sections, plugin events, background tasks and approval transports."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sections: dict[str, PromptSection] = {}
        #: changes whenever ``sections`` does (a session's kept rendering is then stale)
        self.generation = 0
        self.transports: dict[str, ApprovalTransport] = {}
        #: ``@kind:value`` providers (``ctx.register_context_reference``)
        self.references = ReferenceKinds()
        self._subscriptions: dict[str, list[tuple[str, Callable[..., Any]]]] = {}
        self._tasks: dict[str, set[Any]] = {}
        self._events: queue.Queue[tuple[str, dict[str, Any], tuple[Any, ...]]] = queue.Queue(
            EVENT_PENDING_CAP
        )
        self._worker: threading.Thread | None = None
        #: the daemon's event loop, where ``spawn_task`` runs coroutines (set by the daemon)
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- system prompt sections -------------------------------------------------------------

    def add_section(self, section: PromptSection) -> None:
        """Add ``section``; an id another plugin holds is a ValueError."""
        self.sections = self._claimed(self.sections, section.id, section, "system prompt section")
        self.generation += 1

    def render_sections(self, session_info: Mapping[str, Any]) -> str:
        """Every section's text under its heading, in id order, within the size budgets; a
        section that raises, is not text or is too long is skipped with a warning."""
        if not self.sections:
            return ""
        frozen = types.MappingProxyType(dict(session_info))
        blocks: list[str] = []
        total = 0
        for section_id, section in sorted(self.sections.items()):
            try:
                value = section.content(frozen) if callable(section.content) else section.content
            except Exception:
                log.warning(
                    "system prompt section %s (%s) raised",
                    section_id,
                    section.plugin,
                    exc_info=True,
                )
                continue
            if not isinstance(value, str) or not value.strip():
                continue
            text = redact.redact(value.strip())  # plugin text bound for the model
            block = f"## Plugin Context: {section_id}\n\n{text}"
            if len(text) > section.max_chars or total + len(block) > SECTIONS_TOTAL_CHARS:
                log.warning(
                    "system prompt section %s (%s) is over its size budget; skipped",
                    section_id,
                    section.plugin,
                )
                continue
            blocks.append(block)
            total += len(block) + 2
        return "\n\n".join(blocks)

    # -- events between plugins -------------------------------------------------------------

    def subscribe(self, plugin: str, event: str, callback: Callable[..., Any]) -> None:
        """Call ``callback(**payload)`` for each ``event`` (a ``<plugin>:<name>``) emitted."""
        if not callable(callback):
            raise TypeError("subscribe needs a callable")
        with self._lock:
            self._subscriptions[event] = [*self._subscriptions.get(event, []), (plugin, callback)]

    def emit(self, event: str, payload: dict[str, Any]) -> int:
        """Queue ``event`` for its subscribers (never waits); how many will get it."""
        subscribers = tuple(self._subscriptions.get(event, ()))
        if not subscribers:
            return 0
        try:
            self._events.put_nowait((event, dict(payload), subscribers))
        except queue.Full:
            log.warning("plugin event queue is full; '%s' dropped", event)
            return 0
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(
                    target=self._deliver_forever, name="hermesd-plugin-events", daemon=True
                )
                self._worker.start()
        return len(subscribers)

    def _deliver_forever(self) -> None:
        """The one worker delivering events in order; a failing subscriber is logged."""
        while True:
            event, payload, subscribers = self._events.get()
            for plugin, callback in subscribers:
                if (plugin, callback) not in self._subscriptions.get(event, []):
                    continue  # unsubscribed (unloaded) since the emit
                try:
                    result = callback(**dict(payload))
                    if asyncio.iscoroutine(result):
                        asyncio.run(result)
                except Exception:
                    log.warning(
                        "Plugin '%s': subscriber of '%s' raised", plugin, event, exc_info=True
                    )

    # -- background tasks -------------------------------------------------------------------

    def spawn(self, plugin: str, coro: Any, name: str) -> Any:
        """Run ``coro`` on the daemon's loop as ``plugin``'s task (cancelled when it unloads)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            coro.close()
            raise RuntimeError("spawn_task needs the daemon's event loop, which is not running")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        task: Any
        if running is loop:
            task = loop.create_task(coro, name=name)
        else:  # register() and handlers run on worker threads
            task = asyncio.run_coroutine_threadsafe(coro, loop)
        with self._lock:
            self._tasks.setdefault(plugin, set()).add(task)
        task.add_done_callback(lambda t: self._task_done(plugin, name, t))
        return task

    def _task_done(self, plugin: str, name: str, task: Any) -> None:
        with self._lock:
            self._tasks.get(plugin, set()).discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("Plugin '%s': task %s failed: %r", plugin, name, task.exception())

    def tasks_of(self, plugin: str) -> int:
        """How many of ``plugin``'s background tasks still run."""
        return len(self._tasks.get(plugin, ()))

    # -- approval transports ----------------------------------------------------------------

    def add_transport(self, transport: ApprovalTransport) -> None:
        """Add ``transport``; a name already taken is a ValueError."""
        self.transports = self._claimed(
            self.transports, transport.name, transport, "approval transport"
        )

    def _claimed(
        self, table: dict[str, _Owned], key: str, item: _Owned, what: str
    ) -> dict[str, _Owned]:
        """A copy of ``table`` with ``item`` under ``key`` (readers keep the old one without a
        lock); a key another entry holds is a ValueError naming its plugin."""
        with self._lock:
            held = table.get(key)
            if held is not None:
                raise ValueError(f"{what} {key!r} is already registered by plugin {held.plugin!r}")
            return {**table, key: item}

    async def present(self, transport: ApprovalTransport, request: dict[str, Any]) -> Any:
        """``transport``'s answer to ``request`` (its function runs off the loop)."""
        if inspect.iscoroutinefunction(transport.present):
            return await transport.present(types.MappingProxyType(request))
        answer = await asyncio.to_thread(transport.present, types.MappingProxyType(request))
        return await answer if inspect.isawaitable(answer) else answer

    # -- unload -----------------------------------------------------------------------------

    def unregister_plugin(self, plugin: str) -> None:
        """Drop everything ``plugin`` added here; cancel its tasks."""
        with self._lock:
            remaining = {k: s for k, s in self.sections.items() if s.plugin != plugin}
            if len(remaining) != len(self.sections):
                self.sections, self.generation = remaining, self.generation + 1
            self.transports = {k: t for k, t in self.transports.items() if t.plugin != plugin}
            self._subscriptions = {
                event: kept
                for event, subs in self._subscriptions.items()
                if (kept := [s for s in subs if s[0] != plugin])
            }
            tasks = self._tasks.pop(plugin, set())
        self.references.drop_plugin(plugin)
        for task in tasks:
            if isinstance(task, asyncio.Task):
                task.get_loop().call_soon_threadsafe(task.cancel)
            else:
                task.cancel()
        redact.drop_patterns(f"plugin:{plugin}")


class StreamObservers:
    """The streaming observer hooks of one model response (``on_stream_start``/``delta``/
    ``end``, ``on_interim_message``), fired in order by one task off the token path: the
    stream only queues, a slow plugin never holds it."""

    HOOKS = ("on_stream_start", "on_stream_delta", "on_stream_end", "on_interim_message")

    def __init__(self, hooks: Any, ids: Mapping[str, Any]) -> None:
        self._hooks = hooks
        self._ids = dict(ids)
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._run())

    @classmethod
    def wanted(cls, hooks: Any) -> bool:
        """Whether any plugin observes streams (else nothing is built per response)."""
        return any(hooks.has(name) for name in cls.HOOKS)

    def delta(self, text: str) -> None:
        """Queue a piece of (redacted) streamed text."""
        self._queue.put_nowait(("delta", text))

    def end(self, interim: str = "") -> None:
        """Queue the end of the response; ``interim``: its text when tools follow it."""
        self._queue.put_nowait(("end", interim))

    async def _run(self) -> None:
        ids, hooks = self._ids, self._hooks
        await hooks.invoke(
            "on_stream_start",
            session_id=ids["session_id"],
            turn_id=ids["turn_id"],
            iteration=ids["iteration"],
            surface=ids["surface"],
            model=ids["model"],
            provider=ids["provider"],
        )
        while True:
            kind, text = await self._queue.get()
            if kind == "delta":
                await hooks.invoke(
                    "on_stream_delta",
                    session_id=ids["session_id"],
                    turn_id=ids["turn_id"],
                    iteration=ids["iteration"],
                    surface=ids["surface"],
                    model=ids["model"],
                    provider=ids["provider"],
                    delta=text,
                    kind="text",
                )
                continue
            await hooks.invoke(
                "on_stream_end",
                session_id=ids["session_id"],
                turn_id=ids["turn_id"],
                iteration=ids["iteration"],
                surface=ids["surface"],
                model=ids["model"],
                provider=ids["provider"],
            )
            if text.strip():
                await hooks.invoke(
                    "on_interim_message",
                    session_id=ids["session_id"],
                    turn_id=ids["turn_id"],
                    iteration=ids["iteration"],
                    surface=ids["surface"],
                    text=text,
                    already_streamed=True,
                )
            return
