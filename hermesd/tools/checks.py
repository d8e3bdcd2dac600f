"""Which tools the model may see: each tool's ``check_fn``, run on a worker thread, its result
cached for a while. A ``check_fn`` that raises or does not answer in time hides its tool, and a
hung one is never probed twice at once. Used by `hermesd.tools.registry`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from typing import Any, Protocol

from hermesd.runtime.workers import WorkerPool

log = logging.getLogger(__name__)


class Checked(Protocol):
    """What a check needs of a tool entry."""

    name: str
    check_fn: Callable[[], Any] | None


class Unavailable:
    """A built-in ``check_fn``'s "no" with the reason ``tools list`` shows; false in a test."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __bool__(self) -> bool:
        return False


def available_unless(reason: str | None) -> bool | Unavailable:
    """A check result from "why not, or None": True, or an `Unavailable` carrying the reason."""
    return True if reason is None else Unavailable(reason)


class CheckCache:
    """``check_fn`` results per entry, re-run when older than ``ttl`` seconds."""

    def __init__(self, pool: WorkerPool, ttl: float, timeout: float) -> None:
        self.pool = pool
        self.ttl = ttl
        self.timeout = timeout
        self._results: dict[Checked, tuple[float, bool]] = {}
        self._inflight: dict[Checked, Future[Any]] = {}
        self._why: dict[Checked, str] = {}  # why the last check hid the entry

    def reason(self, entry: Checked) -> str | None:
        """Why ``entry``'s last check hid it (a sentence), or None when it passed."""
        if entry.check_fn is None or self._results.get(entry, (0.0, False))[1]:
            return None
        return self._why.get(entry, "check_fn has not answered yet")

    def passed(self, entry: Checked) -> bool:
        """The entry's ``check_fn`` result, probed first if stale (blocking up to ``timeout``)."""
        if entry.check_fn is None:
            return True
        self.probe([entry])
        return self._results.get(entry, (0.0, False))[1]

    def probe(self, entries: Iterable[Checked]) -> None:
        """Re-run the stale checks of ``entries`` and wait for them (from a thread)."""
        pending = self._submit(entries)
        if pending:
            futures_wait(list(pending.values()), timeout=self.timeout)
            self._record(pending)

    async def refresh(self, entries: Iterable[Checked]) -> None:
        """`probe` for the event loop: waits without blocking it."""
        pending = self._submit(entries)
        if pending:
            await asyncio.wait(
                [asyncio.wrap_future(f) for f in pending.values()], timeout=self.timeout
            )
            self._record(pending)

    def forget(self, gone: Callable[[Checked], bool]) -> None:
        """Drop what is known of the entries ``gone`` selects (their tools were removed)."""
        self._results = {e: r for e, r in self._results.items() if not gone(e)}
        self._why = {e: r for e, r in self._why.items() if not gone(e)}
        self._inflight = {e: f for e, f in self._inflight.items() if not gone(e)}

    def _submit(self, entries: Iterable[Checked]) -> dict[Checked, Future[Any]]:
        now = time.monotonic()
        pending: dict[Checked, Future[Any]] = {}
        for entry in entries:
            if entry.check_fn is None:
                continue
            known = self._results.get(entry)
            if known is not None and now - known[0] < self.ttl:
                continue
            future = self._inflight.get(entry)
            if future is None or future.done():  # never stack probes behind a hung check_fn
                future = self._inflight[entry] = self.pool.submit(entry.check_fn)
            pending[entry] = future
        return pending

    def _record(self, pending: dict[Checked, Future[Any]]) -> None:
        now = time.monotonic()
        for entry, future in pending.items():
            if not future.done():
                future.cancel()
                log.warning(
                    "check_fn of tool '%s' did not answer within %gs; tool hidden",
                    entry.name,
                    self.timeout,
                )
                ok = False
                self._why[entry] = f"check_fn did not answer within {self.timeout:g}s"
            elif future.cancelled() or future.exception() is not None:
                log.warning(
                    "check_fn of tool '%s' raised: %s; tool hidden",
                    entry.name,
                    None if future.cancelled() else future.exception(),
                )
                ok = False
                error = None if future.cancelled() else future.exception()
                self._why[entry] = f"check_fn raised {type(error).__name__}: {error}"[:300]
            else:
                result = future.result()
                ok = bool(result)
                why = result.reason if isinstance(result, Unavailable) else None
                self._why[entry] = why or "check_fn returned false"
            self._results[entry] = (now, ok)
