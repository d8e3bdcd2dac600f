"""The session store's one thread: every SQLite statement of the store runs on it.

The store's connection is opened on this thread and used by nothing else (sqlite3's
``check_same_thread`` holds it to that), so the event loop never reads or writes the database
file and never waits on it. Code on the loop hands a call over and awaits it (`DbThread.run`);
code on other threads (a tool handler on a worker) hands it over and blocks (`DbThread.call`);
code already on this thread runs at once. Calls run one at a time, in the order they were
handed over, each writing in its own transaction, so a result comes back only after its write
committed and no write can overtake an earlier one.

Housekeeping runs here too, inside the calls that make it due: SQLite's automatic WAL
checkpoint runs on the thread that commits, and the store indexes new messages for search
every few hundred writes (``hermesd.store.search``). Nothing here knows what a session is.
Why one thread and no batching: docs/decisions/0002-one-database-thread.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


class DbThread:
    """One thread that runs the calls handed to it, one at a time, in order.

    ``map_error`` turns a call's exception into the one its caller sees (the store maps
    SQLite's disk errors to ``StorageUnavailable``)."""

    def __init__(
        self,
        name: str = "hermesd-db",
        *,
        map_error: Callable[[Exception], Exception] = lambda exc: exc,
    ) -> None:
        self._map_error = map_error
        self._ident: int | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=name, initializer=self._started
        )

    def _started(self) -> None:
        self._ident = threading.get_ident()

    def on_thread(self) -> bool:
        """Whether the caller runs on this thread."""
        return threading.get_ident() == self._ident

    def submit(
        self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[T]:
        """Queue ``fn(*args, **kwargs)``; the future holds its result or (mapped) exception."""
        return self._pool.submit(self._guarded, fn, *args, **kwargs)

    def _guarded(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            mapped = self._map_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the thread and await its result (from the loop).

        A call once handed over runs to its end even if the awaiting task is cancelled: a
        write the caller started is not dropped halfway through a turn's sequence."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[T] = loop.create_future()

        def settle(done: concurrent.futures.Future[T]) -> None:
            if waiter.cancelled():
                return
            exc = done.exception()
            if exc is None:
                waiter.set_result(done.result())
            else:
                waiter.set_exception(exc)

        def deliver(done: concurrent.futures.Future[T]) -> None:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, done)

        self.submit(fn, *args, **kwargs).add_done_callback(deliver)
        return await waiter

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the thread and wait for it (at once when called
        there). Not from a thread running an event loop: that loop would stop serving while
        it waits; it awaits `run` instead."""
        if self.on_thread():
            return fn(*args, **kwargs)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self.submit(fn, *args, **kwargs).result()
        name = getattr(fn, "__qualname__", repr(fn))
        raise RuntimeError(
            f"{name} would block the event loop on the database: await store.run(...) instead"
        )

    def close(self) -> None:
        """Run every call queued so far, then stop the thread (from any thread but this)."""
        self._pool.shutdown(wait=True)
