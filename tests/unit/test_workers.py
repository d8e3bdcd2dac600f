"""The worker pool that runs plugin code: outcomes, deadlines, abandonment, fairness."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from hermesd.runtime import workers
from hermesd.runtime.workers import PluginAbort, WorkerPool, WorkTimeout, bounded


def test_many_jobs_finishing_together_all_get_their_own_results() -> None:
    pool = WorkerPool(8)

    async def main() -> list[int]:
        return await asyncio.gather(*(pool.run(lambda i=i: i * i, 5.0) for i in range(300)))

    try:
        assert asyncio.run(main()) == [i * i for i in range(300)]
    finally:
        pool.shutdown()


def test_exceptions_pass_through_and_base_exceptions_become_plugin_aborts() -> None:
    pool = WorkerPool(2)

    def bad() -> None:
        raise ValueError("nope")

    def leaves() -> None:
        raise SystemExit(3)

    async def main() -> None:
        with pytest.raises(ValueError, match="nope"):
            await pool.run(bad, 5.0)
        with pytest.raises(PluginAbort, match="SystemExit: 3"):
            await pool.run(leaves, 5.0)
        assert await pool.run(lambda: "still serving", 5.0) == "still serving"

    try:
        asyncio.run(main())
    finally:
        pool.shutdown()


def test_a_job_past_its_deadline_times_out_and_its_thread_is_replaced() -> None:
    pool = WorkerPool(1)
    release = threading.Event()

    async def main() -> None:
        with pytest.raises(WorkTimeout):  # the job itself would wait 10 s (returning True)
            await pool.run(lambda: release.wait(10), 0.2)
        assert pool.abandoned_count == 1
        # the only slot was given up on: a new thread serves the next job at once
        assert await pool.run(lambda: "next", 5.0) == "next"

    try:
        asyncio.run(main())
    finally:
        release.set()
        pool.shutdown()


def test_a_cancelled_caller_frees_the_slot_and_a_late_result_is_dropped() -> None:
    pool = WorkerPool(1)
    release = threading.Event()

    async def main() -> None:
        task = asyncio.ensure_future(pool.run(lambda: release.wait(10) and "late", None))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()  # the abandoned job now finishes: its outcome must go nowhere
        assert await pool.run(lambda: "after", 5.0) == "after"
        await asyncio.sleep(0.05)

    try:
        asyncio.run(main())
    finally:
        pool.shutdown()


def test_one_key_cannot_take_every_thread() -> None:
    pool = WorkerPool(4, per_key=1)
    release = threading.Event()

    async def main() -> None:
        stuck = asyncio.ensure_future(pool.run(lambda: release.wait(10), 10.0, key="slow"))
        queued = asyncio.ensure_future(pool.run(lambda: "slow second", 10.0, key="slow"))
        await asyncio.sleep(0.1)
        assert not queued.done()  # waits behind its own key's job...
        assert await pool.run(lambda: "other", 5.0, key="fast") == "other"  # ...others don't
        release.set()
        assert await stuck is True
        assert await queued == "slow second"

    try:
        asyncio.run(main())
    finally:
        release.set()
        pool.shutdown()


def test_call_from_a_plain_thread_waits_with_a_deadline() -> None:
    pool = WorkerPool(2)
    try:
        assert pool.call(lambda: 42, 5.0) == 42
        with pytest.raises(WorkTimeout):
            pool.call(lambda: time.sleep(1), 0.1)
    finally:
        pool.shutdown()


def test_outcomes_reach_each_jobs_own_loop() -> None:
    pool = WorkerPool(4)
    results: list[list[int]] = []

    def in_loop(base: int) -> None:
        async def main() -> list[int]:
            return await asyncio.gather(*(pool.run(lambda i=i: base + i, 5.0) for i in range(50)))

        results.append(asyncio.run(main()))

    threads = [threading.Thread(target=in_loop, args=(b,)) for b in (0, 1000)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        pool.shutdown()
    assert sorted(results) == [list(range(50)), list(range(1000, 1050))]


def test_a_cancelled_caller_lets_the_awaited_code_finish_its_clean_up_first() -> None:
    order: list[str] = []

    async def work() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0.05)  # clean-up that itself awaits (a child's turn ending)
            order.append("cleaned")

    async def main() -> None:
        caller = asyncio.ensure_future(bounded(work(), 30))
        await asyncio.sleep(0.05)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        order.append("caller ended")

    asyncio.run(main())
    assert order == ["cleaned", "caller ended"]


def test_clean_up_that_never_ends_holds_the_caller_only_for_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workers, "CANCEL_GRACE", 0.1)

    async def stubborn(done: asyncio.Event) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)
        await done.wait()  # ignores the cancel until the test lets it go

    async def main() -> bool:
        done = asyncio.Event()
        caller = asyncio.ensure_future(bounded(stubborn(done), 30))
        await asyncio.sleep(0.05)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        still_running = not done.is_set()
        done.set()
        return still_running

    assert asyncio.run(asyncio.wait_for(main(), 10)) is True
