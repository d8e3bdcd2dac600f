"""Worker threads for plugin code, each call bounded in time.

The event loop never runs plugin code: sync plugin callables (``register()``, tool handlers, hook
callbacks, command handlers) run on a `WorkerPool` thread, async ones are awaited with a timeout.
A sync call that times out is reported as `WorkTimeout` but its thread keeps running until the
callable returns: Python cannot kill a thread. The pool's threads are daemon threads, so a stuck
plugin never holds up process exit. A thread whose caller gave up is abandoned and replaced (up
to ``max_abandoned`` of them), and jobs carrying a key (the plugin owning the code) hold at most
``per_key`` threads at once, so hanging calls of one plugin cannot starve the others. This
module also owns `CallShape`, the cached analysis of which keyword arguments a plugin callable
accepts. It knows nothing about tools, hooks or plugins.
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
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from typing import Any, TypeVar

from hermesd.runtime.rss import GROWTH, rss_bytes

log = logging.getLogger(__name__)

T = TypeVar("T")

_IDLE_EXIT_SECONDS = 60.0


def _plugin_of(key: str | None) -> str:
    """The plugin a job's key names (``tool:<plugin>``, ``plugin:<plugin>``...), or ""."""
    owner = (key or "").rpartition(":")[2]
    return "" if owner in ("", "builtin") else owner


class WorkTimeout(TimeoutError):
    """Plugin code did not finish within its time bound (distinct from a TimeoutError it raised)."""

    def __init__(self, timeout: float | None) -> None:
        super().__init__(f"did not finish within {timeout:g}s" if timeout else "timed out")
        self.timeout = timeout


class PluginAbort(RuntimeError):
    """Plugin code on a worker raised SystemExit, KeyboardInterrupt or another BaseException."""


# How long a cancelled caller waits for the code it awaited to finish cleaning up.
CANCEL_GRACE = 5.0


async def bounded(awaitable: Awaitable[T], timeout: float | None) -> T:
    """Await ``awaitable`` for at most ``timeout`` seconds; past it, cancel it and raise
    `WorkTimeout`.

    Unlike `asyncio.wait_for`, a `TimeoutError` raised by the awaited code itself passes through
    unchanged, so callers can tell "too slow" from "failed with a timeout of its own".

    When the caller is cancelled, the awaited code is cancelled too and given up to
    `CANCEL_GRACE` seconds to finish its clean-up before the cancellation goes on, so what it
    started (a delegated child's turn) has ended by the time the caller's own turn ends.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_GRACE)
        raise
    if not done:
        task.cancel()
        raise WorkTimeout(timeout)
    return task.result()


class _Job:
    """One queued callable with its future, fairness key and (``run``) the awaiting loop."""

    __slots__ = ("fn", "future", "key", "released", "waiter")

    def __init__(
        self,
        future: Future[Any],
        fn: Callable[[], Any],
        key: str | None,
        waiter: asyncio.Future[Any] | None = None,
    ) -> None:
        self.future = future
        self.fn = fn
        self.key = key
        self.released = False
        self.waiter = waiter


class WorkerPool:
    """A bounded pool of daemon threads that run plugin callables.

    Two rules keep one stuck plugin from starving everyone else:

    * **Abandonment.** When a caller gives up on a call (timeout or cancellation) whose callable
      is still running, its thread is *abandoned*: it stops counting against ``max_workers`` and
      exits once the callable returns, and a replacement thread can start at once. At most
      ``max_abandoned`` threads are abandoned at a time; past that, stuck threads keep their
      slots (memory stays bounded, the pool degrades to queueing).
    * **Per-key fairness.** Jobs submitted with a ``key`` (a plugin key, ``builtin``) hold at most
      ``per_key`` threads at once; further jobs of that key wait in their own line, so one key
      can never take every thread.
    """

    def __init__(
        self,
        max_workers: int = 32,
        name: str = "hermesd-plugin",
        *,
        per_key: int | None = None,
        max_abandoned: int = 256,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.per_key = max(1, per_key if per_key is not None else max_workers // 2)
        self.max_abandoned = max_abandoned
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._abandoned: set[threading.Thread] = set()
        self._running: dict[Future[Any], tuple[threading.Thread, _Job]] = {}
        self._key_active: dict[str, int] = {}
        self._key_waiting: dict[str, deque[_Job]] = {}
        self._queued = 0
        self._idle = 0
        self._counter = 0
        self._closed = False
        self._done_lock = threading.Lock()
        self._done: dict[
            asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]
        ] = {}

    def submit(
        self,
        fn: Callable[[], T],
        key: str | None = None,
        *,
        waiter: asyncio.Future[Any] | None = None,
    ) -> Future[T]:
        """Queue a zero-argument callable; it runs in the caller's contextvars context.

        With a ``key``, at most `per_key` jobs of that key run (or wait for a thread) at once.
        With a ``waiter`` (an asyncio future), the outcome is also set on it, on its loop.
        """
        if self._closed:
            raise RuntimeError("worker pool is shut down")
        future: Future[T] = Future()
        context = contextvars.copy_context()
        job = _Job(future, functools.partial(context.run, fn), key, waiter)
        with self._lock:
            if key is not None and self._key_active.get(key, 0) >= self.per_key:
                waiting = self._key_waiting.setdefault(key, deque())
                if len(waiting) >= 64:  # a key stuck for good: drop callers that gave up
                    kept = [j for j in waiting if not j.future.cancelled()]
                    waiting.clear()
                    waiting.extend(kept)
                waiting.append(job)
                return future
            if key is not None:
                self._key_active[key] = self._key_active.get(key, 0) + 1
            self._enqueue_locked(job)
        return future

    def _enqueue_locked(self, job: _Job) -> None:
        self._queued += 1
        self._jobs.put(job)
        if self._idle < self._queued and len(self._threads) < self.max_workers:
            self._counter += 1
            thread = threading.Thread(
                target=self._work, name=f"{self._name}-{self._counter}", daemon=True
            )
            self._threads.add(thread)
            self._idle += 1  # counted idle until it takes its first job
            thread.start()

    def _release_locked(self, job: _Job) -> None:
        """``job`` no longer holds a slot of its key: let the next waiting job of that key in."""
        if job.released or job.key is None:
            return
        job.released = True
        left = self._key_active.get(job.key, 1) - 1
        waiting = self._key_waiting.get(job.key)
        if waiting:
            nxt = waiting.popleft()
            if not waiting:
                del self._key_waiting[job.key]
            left += 1
            self._enqueue_locked(nxt)
        if left > 0:
            self._key_active[job.key] = left
        else:
            self._key_active.pop(job.key, None)

    def _work(self) -> None:
        me = threading.current_thread()
        first = True
        while True:
            if not first:
                with self._lock:
                    self._idle += 1
            first = False
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
                self._queued -= 1
                runs = job.future.set_running_or_notify_cancel()
                if runs:
                    self._running[job.future] = (me, job)
                else:
                    self._release_locked(job)
            if not runs:
                continue
            plugin = _plugin_of(job.key)
            before = rss_bytes() if plugin else 0
            try:
                result = job.fn()
            except Exception as exc:
                job.future.set_exception(exc)
                self._hand_back(job, False, exc)
            except BaseException as exc:
                # SystemExit & co. from plugin code mean nothing in a worker thread; re-raised
                # in the waiter they would stop the daemon. Report them as ordinary failures.
                abort = PluginAbort(f"{type(exc).__name__}: {exc}")
                job.future.set_exception(abort)
                self._hand_back(job, False, abort)
            else:
                job.future.set_result(result)
                self._hand_back(job, True, result)
            if plugin:
                GROWTH.add(plugin, before, rss_bytes())  # names a plugin that leaks
            with self._lock:
                self._running.pop(job.future, None)
                self._release_locked(job)
                if me in self._abandoned:  # replaced while stuck: leave quietly
                    self._abandoned.discard(me)
                    return

    def _hand_back(self, job: _Job, ok: bool, value: Any) -> None:
        """Set ``job``'s outcome on its asyncio waiter. Outcomes finished while the loop is
        busy wait in one list and are set by one callback: one wake-up of the loop (a write to
        its self-pipe) for all of them, not one per job."""
        waiter = job.waiter
        if waiter is None:
            return
        loop = waiter.get_loop()
        with self._done_lock:
            pending = self._done.get(loop)
            if pending is not None:
                pending.append((waiter, ok, value))
                return
            self._done[loop] = [(waiter, ok, value)]
        try:
            loop.call_soon_threadsafe(self._settle, loop)
        except RuntimeError:  # the loop is closed: nobody waits any more
            with self._done_lock:
                self._done.pop(loop, None)

    def _settle(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._done_lock:
            pending = self._done.pop(loop, ())
        for waiter, ok, value in pending:
            if waiter.done():  # the caller gave up (timeout, cancellation)
                continue
            if ok:
                waiter.set_result(value)
            else:
                waiter.set_exception(value)

    def abandon(self, future: Future[Any]) -> None:
        """The caller gave up on ``future``: cancel it if queued, else free its thread's slot."""
        if future.cancel():
            return
        with self._lock:
            running = self._running.get(future)
            if running is None or len(self._abandoned) >= self.max_abandoned:
                if running is not None:
                    log.error(
                        "%d worker threads are stuck in plugin code; not replacing more",
                        len(self._abandoned),
                    )
                return
            thread, job = running
            if thread in self._abandoned:
                return
            self._threads.discard(thread)
            self._abandoned.add(thread)
            self._release_locked(job)
            if self._idle < self._queued and len(self._threads) < self.max_workers:
                self._counter += 1
                spare = threading.Thread(
                    target=self._work, name=f"{self._name}-{self._counter}", daemon=True
                )
                self._threads.add(spare)
                self._idle += 1
                spare.start()

    def call(self, fn: Callable[[], T], timeout: float | None, key: str | None = None) -> T:
        """Run ``fn`` on a worker and wait for it from a thread; `WorkTimeout` past ``timeout``."""
        future = self.submit(fn, key)
        done, _ = futures_wait([future], timeout)
        if not done:
            self.abandon(future)
            raise WorkTimeout(timeout)
        return future.result()

    async def run(self, fn: Callable[[], T], timeout: float | None, key: str | None = None) -> T:
        """Run ``fn`` on a worker and await it; `WorkTimeout` past ``timeout``."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[T] = loop.create_future()
        future = self.submit(fn, key, waiter=waiter)
        # a plain timer, not asyncio.wait(): every tool call and hook batch comes through here
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter, timeout)
        try:
            return await waiter
        except (WorkTimeout, asyncio.CancelledError):
            self.abandon(future)
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def shutdown(self) -> None:
        """Stop idle threads; threads stuck in plugin code are left to die with the process."""
        self._closed = True
        with self._lock:
            count = len(self._threads)
        for _ in range(count):
            self._jobs.put(None)

    @property
    def thread_count(self) -> int:
        """Number of live worker threads counted against ``max_workers`` (idle or busy)."""
        with self._lock:
            return len(self._threads)

    @property
    def abandoned_count(self) -> int:
        """Threads given up on that are still running plugin code."""
        with self._lock:
            return len(self._abandoned)


def _expire(waiter: asyncio.Future[Any], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(WorkTimeout(timeout))


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
    key: str | None = None,
) -> Any:
    """Call plugin code with a deadline: async awaited, sync on a worker thread.

    A sync callable that returns an awaitable (a lambda wrapping a coroutine) has the awaitable
    awaited on the loop with whatever time is left. Raises `WorkTimeout` past the deadline and
    whatever the callable raised otherwise.
    """
    started = time.monotonic()
    if is_async_callable(fn):
        return await bounded(fn(*args, **kwargs), timeout)
    result = await pool.run(functools.partial(fn, *args, **kwargs), timeout, key)
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
