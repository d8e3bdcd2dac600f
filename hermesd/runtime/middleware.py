"""Plugin middleware: callbacks that change what a tool call or a model request does.

Hooks observe; middleware decides (docs/hermes-compat.md §11.1, docs/plugins.md "Middleware").
`MiddlewareBus` keeps the callbacks of the four kinds in registration order:

* request kinds (``tool_request``, ``llm_request``) each see a deep copy of the payload and may
  return ``{"args": …}`` / ``{"request": …}`` to replace it outright; every accepted
  replacement adds an entry to the trace later hooks get as ``middleware_trace``
  (`MiddlewareBus.apply_request`);
* execution kinds (``tool_execution``, ``llm_execution``) nest around the real call: each gets a
  ``next_call(payload=None)`` that runs the rest of the chain once, and may return without
  calling it to refuse (`MiddlewareBus.run_execution`).

Callbacks are plugin code, so they run on worker threads; a ``next_call`` made on such a thread
hands the rest of the chain back to the event loop and waits for it. The time bound
(``tools.hook_timeout``) counts only the time a callback spends outside its ``next_call``, so a
long model request inside it never trips it. A callback that runs out of time before its
``next_call`` refuses the call (fail closed, `MiddlewareTimeout`); with nothing registered the
callers skip all of this. This module knows nothing about tools, models or sessions.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hermesd.runtime.workers import (
    CallShape,
    WorkerPool,
    WorkTimeout,
    call_bounded,
    callable_name,
    shared_pool,
)

log = logging.getLogger(__name__)

OBSERVER_SCHEMA_VERSION = "hermes.observer.v1"
MIDDLEWARE_SCHEMA_VERSION = "hermes.middleware.v1"

#: Execution callbacks in flight at once, all calls together; more wait for a thread.
MAX_FRAMES = 256

KINDS = ("tool_request", "tool_execution", "llm_request", "llm_execution")
#: Older names of the two model kinds, still accepted.
ALIASES = {"api_request": "llm_request", "api_execution": "llm_execution"}

Terminal = Callable[[Any], Awaitable[Any]]


class MiddlewareTimeout(Exception):
    """An execution callback did not reach its ``next_call`` or return in time: refuse."""


@dataclass(frozen=True)
class _Middleware:
    plugin_key: str
    fn: Callable[..., Any]
    shape: CallShape
    name: str


@dataclass
class RequestOutcome:
    """What request middleware made of a payload."""

    payload: Any
    original: Any
    trace: list[dict[str, Any]] = field(default_factory=list)


def canonical_kind(kind: str) -> str:
    """``kind`` with the old ``api_*`` names mapped to the ``llm_*`` ones."""
    return ALIASES.get(kind, kind)


def safe_copy(payload: Any) -> Any:
    """A deep copy; a shallow one when the payload holds something that cannot be copied."""
    try:
        return copy.deepcopy(payload)
    except Exception as exc:
        log.debug("deepcopy of a middleware payload failed (%s); shallow copy", exc)
        return dict(payload) if isinstance(payload, dict) else payload


def trace_entry(result: Mapping[str, Any]) -> dict[str, Any]:
    """The trace entry of an accepted replacement: its ``source``/``reason``/``name``."""
    entry = {
        k: v for k in ("source", "reason", "name") if isinstance(v := result.get(k), str) and v
    }
    return entry or {"source": "plugin"}


class MiddlewareBus:
    """Registered middleware callbacks, by kind, in registration order."""

    def __init__(self, pool: WorkerPool | None = None, timeout: float = 10.0) -> None:
        self._pool = pool or shared_pool()
        self.timeout = timeout
        self._frames: WorkerPool | None = None  # made when first needed
        self._lock = threading.Lock()
        self._callbacks: dict[str, list[_Middleware]] = {}

    def register(self, plugin_key: str, kind: str, callback: Callable[..., Any]) -> str:
        """Add ``callback`` for ``kind`` (aliases mapped); unknown kinds are warned about, kept."""
        if not callable(callback):
            raise TypeError(f"middleware callback for '{kind}' is not callable")
        kind = canonical_kind(str(kind))
        if kind not in KINDS:
            log.warning(
                "Plugin '%s' registered unknown middleware '%s' (valid: %s)",
                plugin_key,
                kind,
                ", ".join(sorted(KINDS)),
            )
        entry = _Middleware(plugin_key, callback, CallShape.of(callback), callable_name(callback))
        with self._lock:
            self._callbacks[kind] = [*self._callbacks.get(kind, []), entry]
        return kind

    def unregister_plugin(self, plugin_key: str) -> int:
        """Remove every callback ``plugin_key`` registered; returns how many."""
        removed = 0
        with self._lock:
            for kind, entries in list(self._callbacks.items()):
                kept = [e for e in entries if e.plugin_key != plugin_key]
                removed += len(entries) - len(kept)
                if kept:
                    self._callbacks[kind] = kept
                else:
                    del self._callbacks[kind]
        return removed

    def has(self, kind: str) -> bool:
        """True when at least one callback is registered for ``kind``."""
        return bool(self._callbacks.get(kind))

    def entries(self) -> dict[str, list[_Middleware]]:
        """Every callback by kind (a copy)."""
        with self._lock:
            return {kind: list(entries) for kind, entries in self._callbacks.items()}

    def kinds_of(self, plugin_key: str) -> list[str]:
        """The kinds ``plugin_key`` registered, one entry per callback."""
        with self._lock:
            items = list(self._callbacks.items())
        return [kind for kind, entries in items for e in entries if e.plugin_key == plugin_key]

    def _kwargs(self, entry: _Middleware, call_kwargs: Mapping[str, Any]) -> dict[str, Any]:
        offered = {
            "telemetry_schema_version": OBSERVER_SCHEMA_VERSION,
            "middleware_schema_version": MIDDLEWARE_SCHEMA_VERSION,
            **call_kwargs,
        }
        return entry.shape.select(offered)

    # -- request kinds ----------------------------------------------------------------------

    async def apply_request(
        self, kind: str, key: str, payload: Any, call_kwargs: Mapping[str, Any]
    ) -> RequestOutcome:
        """Run ``kind``'s callbacks on ``payload`` (passed as ``key`` and ``original_<key>``,
        beside ``call_kwargs``: the ids and names of the call, offered to every callback).

        A callback returning ``{key: <dict>}`` replaces the payload; anything else is ignored,
        and so is a callback that raises or runs out of time (logged).
        """
        entries = self._callbacks.get(kind)
        if not entries:
            return RequestOutcome(payload, payload)
        original = safe_copy(payload)
        current = safe_copy(original)
        trace: list[dict[str, Any]] = []
        for entry in entries:
            offered = {**call_kwargs, key: safe_copy(current), f"original_{key}": original}
            try:
                result = await call_bounded(
                    self._pool,
                    entry.fn,
                    (),
                    self._kwargs(entry, offered),
                    self.timeout,
                    f"middleware:{entry.plugin_key}",
                )
            except WorkTimeout:
                log.warning(
                    "Middleware '%s' callback %s timed out after %gs; skipped",
                    kind,
                    entry.name,
                    self.timeout,
                )
                continue
            except Exception as exc:
                log.warning("Middleware '%s' callback %s raised: %s", kind, entry.name, exc)
                log.debug("Traceback of middleware %s", entry.name, exc_info=True)
                continue
            if isinstance(result, dict) and isinstance(result.get(key), dict):
                current = safe_copy(result[key])
                trace.append(trace_entry(result))
        return RequestOutcome(current, original, trace)

    # -- execution kinds --------------------------------------------------------------------

    def frames(self) -> WorkerPool:
        """The threads execution callbacks run on: their own pool, since a callback holds its
        thread while the call it wraps runs (a tool handler on the shared pool must never wait
        for a thread a callback around it holds), without a per-plugin share (the frames of
        one call nest and would wait for each other)."""
        if self._frames is None:
            self._frames = WorkerPool(
                MAX_FRAMES, "hermesd-middleware", per_key=MAX_FRAMES, max_abandoned=MAX_FRAMES
            )
        return self._frames

    async def run_execution(
        self,
        kind: str,
        key: str,
        payload: Any,
        terminal: Terminal,
        call_kwargs: Mapping[str, Any],
    ) -> Any:
        """Run ``terminal(payload)`` inside ``kind``'s callbacks, nested in registration order.

        Raises what the terminal raised when it reaches the caller unchanged, and
        `MiddlewareTimeout` when a callback ran out of time before its ``next_call``.
        """
        entries = list(self._callbacks.get(kind) or ())
        if not entries:
            return await terminal(payload)
        loop = asyncio.get_running_loop()
        original = call_kwargs.get(f"original_{key}", payload)
        base = {**call_kwargs, f"original_{key}": original}
        return await _Chain(self, kind, key, entries, terminal, base, loop).at(0, payload)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class _Downstream(Exception):
    """Carries a failure of the rest of the chain through a callback's frame unchanged."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


class _Frame:
    """One callback's run: whether it is inside its ``next_call``, and its time outside."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.inside = False
        self.spent = 0.0
        self.since = time.monotonic()
        self.abandoned = False
        self.called = False
        self.succeeded = False
        self.result: Any = None
        self.downstream: concurrent.futures.Future[Any] | None = None
        self.changed: asyncio.Future[None] = loop.create_future()

    def flip(self, inside: bool) -> None:
        """Called on the loop when the downstream starts or ends."""
        now = time.monotonic()
        if inside:
            self.spent += now - self.since
        else:
            self.since = now
        self.inside = inside
        if not self.changed.done():
            self.changed.set_result(None)

    def outside_left(self, timeout: float) -> float:
        return timeout - self.spent - (time.monotonic() - self.since)


class _Chain:
    def __init__(
        self,
        bus: MiddlewareBus,
        kind: str,
        key: str,
        entries: list[_Middleware],
        terminal: Terminal,
        base: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.bus, self.kind, self.key = bus, kind, key
        self.entries, self.terminal, self.base, self.loop = entries, terminal, base, loop

    async def at(self, index: int, payload: Any) -> Any:
        if index >= len(self.entries):
            return await self.terminal(payload)
        entry = self.entries[index]
        frame = _Frame(self.loop)
        next_call = self._next_call(index, entry, payload, frame)
        kwargs = self.bus._kwargs(entry, {**self.base, self.key: payload, "next_call": next_call})
        try:
            value = await self._run_callback(entry, kwargs, frame)
        except _Downstream as exc:
            raise exc.original from None
        except MiddlewareTimeout:
            if frame.succeeded:
                log.warning(
                    "Middleware '%s' callback %s ran out of time after its next_call; "
                    "keeping the result",
                    self.kind,
                    entry.name,
                )
                return frame.result
            raise
        except Exception as exc:
            log.warning("Middleware '%s' callback %s raised: %s", self.kind, entry.name, exc)
            log.debug("Traceback of middleware %s", entry.name, exc_info=True)
            if frame.succeeded:
                return frame.result
            if frame.called:
                raise
            return await self.at(index + 1, payload)
        return value

    def _next_call(
        self, index: int, entry: _Middleware, payload: Any, frame: _Frame
    ) -> Callable[..., Any]:
        chain = self

        def next_call(next_payload: Any = None) -> Any:
            if frame.called:
                raise RuntimeError(
                    f"Middleware '{chain.kind}' callback {entry.name} called next_call() more "
                    "than once; downstream execution is single-use"
                )
            if frame.abandoned:
                raise RuntimeError(
                    f"Middleware '{chain.kind}' callback {entry.name} called next_call() after "
                    "hermesd gave up waiting for it; the call was refused"
                )
            if _on_loop(chain.loop):
                raise RuntimeError(
                    f"Middleware '{chain.kind}' callback {entry.name} called next_call() on the "
                    "event loop; middleware callbacks must be plain (not async) functions"
                )
            frame.called = True
            chosen = payload if next_payload is None else next_payload
            try:
                future = asyncio.run_coroutine_threadsafe(
                    chain._downstream(index, chosen, frame), chain.loop
                )
                frame.downstream = future
                frame.result = future.result()
            except Exception as exc:
                raise _Downstream(exc) from exc
            frame.succeeded = True
            return frame.result

        return next_call

    async def _downstream(self, index: int, payload: Any, frame: _Frame) -> Any:
        frame.flip(True)
        try:
            return await self.at(index + 1, payload)
        finally:
            frame.flip(False)

    async def _run_callback(self, entry: _Middleware, kwargs: dict[str, Any], frame: _Frame) -> Any:
        """The callback on a worker thread, its time outside ``next_call`` bounded."""
        pool, timeout = self.bus.frames(), self.bus.timeout
        waiter: asyncio.Future[Any] = self.loop.create_future()
        future = pool.submit(
            functools.partial(entry.fn, **kwargs), f"middleware:{entry.plugin_key}", waiter=waiter
        )
        try:
            while not waiter.done():
                if frame.changed.done():
                    frame.changed = self.loop.create_future()
                left = None if frame.inside else frame.outside_left(timeout)
                if left is not None and left <= 0:
                    frame.abandoned = True
                    pool.abandon(future)
                    log.warning(
                        "Middleware '%s' callback %s did not finish within %gs",
                        self.kind,
                        entry.name,
                        timeout,
                    )
                    raise MiddlewareTimeout(
                        f"middleware {entry.name} of plugin '{entry.plugin_key}' did not "
                        f"answer within {timeout:g}s"
                    )
                await asyncio.wait({waiter, frame.changed}, timeout=left)
        except asyncio.CancelledError:
            frame.abandoned = True
            pool.abandon(future)
            if frame.downstream is not None:  # the turn was stopped: so is the real call
                frame.downstream.cancel()
            raise
        value = waiter.result()
        if inspect.isawaitable(value):  # an async callback, or a sync one returning a coroutine
            value = await value
        return value
