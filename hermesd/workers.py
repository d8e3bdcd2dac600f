"""Worker threads for plugin code, each call bounded in time.

The event loop never runs plugin code: sync plugin callables (``register()``, tool handlers, hook
callbacks, command handlers) run on a `WorkerPool` thread, async ones are awaited with a timeout.
A sync call that times out is reported as `WorkTimeout` but its thread keeps running until the
callable returns: Python cannot kill a thread. The pool's threads are daemon threads, so a stuck
plugin never holds up process exit, and the pool grows up to ``max_workers`` so a few stuck
calls do not starve the others; once every thread is stuck, new calls wait in the queue and time
out there. This module also owns `CallShape`, the cached analysis of which keyword arguments a
plugin callable accepts. It knows nothing about tools, hooks or plugins.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger("hermesd.workers")

T = TypeVar("T")

_IDLE_EXIT_SECONDS = 60.0


class WorkTimeout(TimeoutError):
    """Plugin code did not finish within its time bound (distinct from a TimeoutError it raised)."""

    def __init__(self, timeout: float | None) -> None:
        super().__init__(f"did not finish within {timeout:g}s" if timeout else "timed out")
        self.timeout = timeout


class PluginAbort(RuntimeError):
    """Plugin code on a worker raised SystemExit, KeyboardInterrupt or another BaseException."""


async def bounded(awaitable: Awaitable[T], timeout: float | None) -> T:
    """Await ``awaitable`` for at most ``timeout`` seconds; cancel it and raise `WorkTimeout` past it.

    Unlike `asyncio.wait_for`, a `TimeoutError` raised by the awaited code itself passes through
    unchanged, so callers can tell "too slow" from "failed with a timeout of its own".
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        raise WorkTimeout(timeout)
    return task.result()


class WorkerPool:
    """A bounded pool of daemon threads that run plugin callables."""

    def __init__(self, max_workers: int = 32, name: str = "hermesd-plugin") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self._name = name
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._idle = 0
        self._counter = 0
        self._closed = False

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queue a zero-argument callable; it runs in the caller's contextvars context."""
        if self._closed:
            raise RuntimeError("worker pool is shut down")
        future: Future[T] = Future()
        context = contextvars.copy_context()
        self._jobs.put((future, functools.partial(context.run, fn)))
        with self._lock:
            if self._idle == 0 and len(self._threads) < self.max_workers:
                self._counter += 1
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{self._counter}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
        return future

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            with self._lock:
                self._idle += 1
            try:
                job = self._jobs.get(timeout=_IDLE_EXIT_SECONDS)
                timed_out = False
            except queue.Empty:
                job, timed_out = None, True
            with self._lock:
                self._idle -= 1
                if timed_out and not self._jobs.empty():
                    continue  # a job arrived as we gave up waiting: stay for it
                if job is None:
                    self._threads.discard(me)
                    return
            future, fn = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except Exception as exc:  # noqa: BLE001 - handed to the waiter
                future.set_exception(exc)
            except BaseException as exc:  # noqa: BLE001
                # SystemExit & co. from plugin code mean nothing in a worker thread; re-raised
                # in the waiter they would stop the daemon. Report them as ordinary failures.
                future.set_exception(PluginAbort(f"{type(exc).__name__}: {exc}"))
            else:
                future.set_result(result)

    def call(self, fn: Callable[[], T], timeout: float | None) -> T:
        """Run ``fn`` on a worker and wait for it from a thread; `WorkTimeout` past ``timeout``."""
        future = self.submit(fn)
        done, _ = futures_wait([future], timeout)
        if not done:
            future.cancel()
            raise WorkTimeout(timeout)
        return future.result()

    async def run(self, fn: Callable[[], T], timeout: float | None) -> T:
        """Run ``fn`` on a worker and await it; `WorkTimeout` past ``timeout``."""
        result: T = await bounded(asyncio.wrap_future(self.submit(fn)), timeout)
        return result

    def shutdown(self) -> None:
        """Stop idle threads; threads stuck in plugin code are left to die with the process."""
        self._closed = True
        with self._lock:
            count = len(self._threads)
        for _ in range(count):
            self._jobs.put(None)

    @property
    def thread_count(self) -> int:
        """Number of live worker threads (idle or busy)."""
        with self._lock:
            return len(self._threads)


_shared: WorkerPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> WorkerPool:
    """The process-wide default pool, created on first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WorkerPool()
        return _shared


def is_async_callable(fn: object) -> bool:
    """True when calling ``fn`` returns a coroutine (functions, partials, async ``__call__``)."""
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isroutine(fn) or isinstance(fn, functools.partial) or not callable(fn):
        return False
    return inspect.iscoroutinefunction(type(fn).__call__)


async def call_bounded(
    pool: WorkerPool,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    timeout: float | None,
) -> Any:
    """Call plugin code with a deadline: async awaited, sync on a worker thread.

    A sync callable that returns an awaitable (a lambda wrapping a coroutine) has the awaitable
    awaited on the loop with whatever time is left. Raises `WorkTimeout` past the deadline and
    whatever the callable raised otherwise.
    """
    started = time.monotonic()
    if is_async_callable(fn):
        return await bounded(fn(*args, **kwargs), timeout)
    result = await pool.run(functools.partial(fn, *args, **kwargs), timeout)
    if inspect.isawaitable(result):
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        return await bounded(result, left)
    return result


@dataclass(frozen=True)
class CallShape:
    """Which keyword arguments a callable accepts, computed once per callable.

    ``names`` is None when the callable takes ``**kwargs`` (or cannot be inspected), meaning it
    gets everything. ``required`` are keyword-capable parameters without a default.
    """

    names: frozenset[str] | None
    required: frozenset[str]

    @classmethod
    def of(cls, fn: Callable[..., Any], positional: int = 0) -> CallShape:
        """Analyse ``fn``; the first ``positional`` parameters are filled positionally."""
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            return cls(None, frozenset())
        kinds = inspect.Parameter
        names: set[str] | None = None
        if not any(p.kind is kinds.VAR_KEYWORD for p in params):
            names = set()
        required: set[str] = set()
        skip = positional
        for p in params:
            if skip and p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD):
                skip -= 1
                continue
            if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY):
                if names is not None:
                    names.add(p.name)
                if p.default is kinds.empty:
                    required.add(p.name)
        return cls(None if names is None else frozenset(names), frozenset(required))

    def select(
        self, kwargs: Mapping[str, Any], fill: frozenset[str] | tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """The subset of ``kwargs`` this callable accepts.

        Required parameters named in ``fill`` but absent from ``kwargs`` are passed as None, so a
        callback declaring a documented argument the caller did not supply still runs.
        """
        if self.names is None:
            chosen = dict(kwargs)
        else:
            chosen = {k: v for k, v in kwargs.items() if k in self.names}
        for name in self.required:
            if name not in chosen and name in fill:
                chosen[name] = None
        return chosen


def callable_name(fn: object) -> str:
    """The name log lines use for a plugin callable (its ``__name__``, else its repr)."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    return str(getattr(target, "__name__", None) or repr(fn))
