"""`Scheduler`: when jobs fire, and making sure each due time fires at most once.

A tick asks the store for the jobs due now (an index lookup), claims each in one transaction
(`CronTable.claim`: the job's next time and repeat count move and a claim with a lease is
written before the run starts) and starts its run as a task. The lease is refreshed while the
run lasts; a claim whose owner died (a kill -9) or whose lease ran out is closed as
interrupted and the job goes on from its next time, never re-running the one it was doing.
Between ticks the loop sleeps until the next due time (60 s at most), or until woken by a
change to the jobs. The clock is injected (`hermesd.cron.clock`), so tests move time instead
of waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import Callable, Coroutine
from datetime import tzinfo
from typing import Any

from hermesd.cron import jobs
from hermesd.cron.clock import Clock, local
from hermesd.store.cronjobs import CronTable
from hermesd.store.facade import SessionStore

log = logging.getLogger(__name__)

MAX_SLEEP = 60.0
INTERRUPTED = "interrupted: hermesd stopped during this run; it is not run again"

RunJob = Callable[[dict[str, Any], str], Coroutine[Any, Any, None]]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Scheduler:
    """The ticker of one daemon."""

    def __init__(
        self,
        store: SessionStore,
        table: CronTable,
        clock: Clock,
        tz: tzinfo | None,
        run_job: RunJob,
        *,
        lease: float = 300.0,
        catch_up: bool = True,
    ) -> None:
        """``run_job(job, owner)`` performs one claimed run and releases the claim."""
        self.store = store
        self.table = table
        self.clock = clock
        self.tz = tz
        self.run_job = run_job
        self.lease = lease
        self.catch_up = catch_up
        self.owner = f"{os.getpid()}:{secrets.token_hex(4)}"
        self.running: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_refresh = 0.0

    # -- life -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Close what a previous daemon left running, then tick in the background."""
        await self.recover()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        runs = list(self.running.values())
        for task in runs:
            task.cancel()
        if runs:
            await asyncio.wait(runs, timeout=10)

    def wake(self) -> None:
        """Look at the jobs again now (one was added, changed or removed)."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
                delay = await self.sleep_for()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cron tick failed; trying again in %gs", MAX_SLEEP)
                delay = MAX_SLEEP
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()

    async def sleep_for(self) -> float | None:
        """Seconds until the next due job (None: until woken, with a test clock)."""
        if self.clock.manual:
            return None
        nxt = await self.store.run(self.table.next_due)
        wait = MAX_SLEEP if nxt is None else nxt - self.clock.now()
        if self.running:
            wait = min(wait, self.lease / 5)  # the leases need refreshing
        return max(0.05, min(wait, MAX_SLEEP))

    # -- ticks ------------------------------------------------------------------------------

    async def tick(self) -> list[str]:
        """Claim and start every job due now; the ids of the jobs started."""
        now = self.clock.now()
        if self.running and now - self._last_refresh >= self.lease / 5:
            await self.store.run(self.table.refresh_claims, self.owner, now + self.lease)
            self._last_refresh = now
        await self.recover()
        started: list[str] = []
        while True:
            due = await self.store.run(self.table.due, now)
            fresh = [job_id for job_id in due if job_id not in self.running]
            if not fresh:
                return started
            for job_id in fresh:
                if await self._claim_and_start(job_id, now):
                    started.append(job_id)
            if len(due) < 64:
                return started

    async def _claim_and_start(self, job_id: str, now: float) -> bool:
        when = local(now, self.tz)

        def decide(job: dict[str, Any]) -> tuple[dict[str, Any], float | None, bool]:
            return jobs.fire(job, when, catch_up=self.catch_up)

        try:
            claimed = await self.store.run(
                self.table.claim, job_id, now, self.owner, now + self.lease, decide
            )
        except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
            # a record no schedule can be computed from (an odd import): pause it, go on
            log.exception("cron job %s: its schedule cannot be computed; paused", job_id)
            await self.store.run(
                self.table.set_broken, job_id, f"paused: its schedule cannot be computed ({exc})"
            )
            return False
        if claimed is None:
            return False
        job, run = claimed
        if not run:
            log.info("cron job %s: %s", job_id, job.get("last_error"))
            return False
        self.start_run(job)
        return True

    async def run_now(self, job_id: str) -> dict[str, Any] | None:
        """Start a run of the job at once (``run``); None when one is already running."""
        now = self.clock.now()
        when = local(now, self.tz)
        claimed = await self.store.run(
            self.table.claim_now,
            job_id,
            self.owner,
            now + self.lease,
            lambda job: jobs.fire_now(job, when),
        )
        if claimed is None or job_id in self.running:
            return None
        job, _ = claimed
        self.start_run(job)
        return job

    def start_run(self, job: dict[str, Any]) -> None:
        job_id = job["id"]
        task = asyncio.get_running_loop().create_task(self.run_job(job, self.owner))
        self.running[job_id] = task

        def forget(_: asyncio.Task[None]) -> None:
            if self.running.get(job_id) is task:
                del self.running[job_id]

        task.add_done_callback(forget)

    # -- claims left behind -----------------------------------------------------------------

    def _alive(self, owner: str) -> bool:
        if owner == self.owner:
            return True
        pid_text = owner.split(":", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            return False  # an earlier daemon that had our pid, or nonsense
        return _pid_alive(int(pid_text))

    async def recover(self) -> int:
        """Close runs whose daemon died or whose lease ran out; how many."""
        now = self.clock.now()
        left = await self.store.run(self.table.abandoned, now, self._alive)
        for row in left:
            if row["id"] in self.running:
                continue
            owner, next_ts = row.pop("_owner"), row.pop("_next_ts")
            log.warning("cron job %s: a run was interrupted (claim of %s)", row["id"], owner)
            job, nxt = jobs.finish(row, local(now, self.tz), "error", INTERRUPTED)
            if nxt is None and next_ts is not None and job["state"] != "completed":
                nxt = next_ts

            def close(
                job: dict[str, Any] = job, nxt: float | None = nxt, owner: str = owner
            ) -> None:
                self.table.interrupted_runs(job["id"], now, INTERRUPTED)
                self.table.release(job, nxt, owner)

            await self.store.run(self.store.run_in_transaction, close)
        return len(left)
