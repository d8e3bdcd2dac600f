"""Scheduler overhead with 10,000 jobs: the next-due lookup and a tick, target ≤ 5 ms each.

A store in a scratch directory gets N jobs (default 10,000: a third each of intervals, cron
expressions and one-shots, due over the next day) through the real migrations and the real
`CronTable`. Then, in this process, on the store's DB thread as in the daemon, interleaved
with the baseline (a call that does nothing on the same thread, the cost of one hop):

- ``next_due``: the query the scheduler sleeps on (an index lookup);
- an idle tick: `Scheduler.tick` when nothing is due (lease refresh, abandoned-claim check,
  the due query);
- a tick that fires one job: the above plus the claim transaction and starting the run (the
  run itself is not measured: a run is a model turn, seconds long; here it only releases the
  claim).

    python bench/cron.py [--jobs N] [--rounds R] [--no-write] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import interleaved, machine, median, now_utc, percentile

from hermesd.cron import jobs
from hermesd.cron.clock import ManualClock, local
from hermesd.cron.scheduler import Scheduler
from hermesd.store.cronjobs import CronTable
from hermesd.store.facade import SessionStore
from tests.support.daemon import short_tmpdir

T0 = 1772438400.0  # 2026-03-02 08:00 UTC
TARGET_MS = 5.0
SCHEDULES = ("every {n}m", "{m} {h} * * *", "{n}m")


async def fill(store: SessionStore, table: CronTable, count: int) -> None:
    """``count`` jobs, due spread over the day after T0."""
    now = local(T0, None)

    def insert() -> None:
        for i in range(count):
            text = SCHEDULES[i % 3].format(n=5 + i % 1435, m=i % 60, h=(i // 60) % 24)
            job, next_ts = jobs.create({"schedule": text, "prompt": f"job {i}"}, now)
            job["id"] = f"bench{i:07d}"
            table.put(job, next_ts, T0)

    await store.run(store.run_in_transaction, insert)


async def measure(count: int, rounds: int, per_round: int) -> dict[str, Any]:
    home = short_tmpdir("bench-cron-")
    store = SessionStore.in_home(home)
    table = store.cron
    started = time.perf_counter()
    await fill(store, table, count)
    fill_s = time.perf_counter() - started
    clock = ManualClock(T0)

    async def release(job: dict[str, Any], owner: str) -> None:
        done, nxt = jobs.finish(job, local(clock.now(), None), "ok", None)
        await store.run(table.release, done, nxt, owner)

    scheduler = Scheduler(store, table, clock, None, release)
    await scheduler.recover()
    first_due = await store.run(table.next_due)
    assert first_due is not None

    async def hop() -> None:
        await store.run(lambda: None)

    async def next_due() -> None:
        await store.run(table.next_due)

    async def idle_tick() -> None:
        assert await scheduler.tick() == []

    fired: list[int] = []

    async def firing_tick() -> None:
        nxt = await store.run(table.next_due)
        assert nxt is not None
        clock.advance(nxt - clock.now())
        started = await scheduler.tick()
        assert started, "nothing fired"
        fired.append(len(started))
        await asyncio.gather(*scheduler.running.values())

    cases = {"hop": hop, "next_due": next_due, "idle": idle_tick, "fire": firing_tick}
    samples: dict[str, list[float]] = {name: [] for name in [*cases, "per_job"]}
    for name in cases.values():  # warm-up
        await name()
    fired.clear()
    for name in interleaved(rounds, list(cases)):
        fn = cases[name]
        for _ in range(per_round):
            t = time.perf_counter()
            await fn()
            samples[name].append((time.perf_counter() - t) * 1000)
            if name == "fire":  # the tick started fired[-1] runs; the run's release is
                samples["per_job"].append(samples[name][-1] / fired[-1])  # timed too
    jobs_now = await store.run(table.count)
    await store.aclose()
    return {"samples": samples, "fill_s": fill_s, "jobs": jobs_now, "fired": fired}


def report(r: dict[str, Any], rounds: int, per_round: int) -> str:
    s = r["samples"]
    hop = median(s["hop"])
    rows = [
        ("one hop to the DB thread (baseline)", "hop", None),
        ("`next_due`: the earliest due time", "next_due", TARGET_MS),
        ("idle tick (nothing due)", "idle", TARGET_MS),
        ("tick firing the jobs due at the next due time", "fire", None),
        ("… per job fired (claim, start, release)", "per_job", TARGET_MS),
    ]
    lines = [
        f"{r['jobs']:,} jobs in `state.db` (intervals, cron expressions and one-shots, due over "
        f"a day; stored in {r['fill_s']:.1f} s). In-process, on the store's DB thread as in the "
        f"daemon, {rounds} interleaved rounds of {per_round}.",
        "",
        "| operation | p50 | p90 | p50 / hop | target |",
        "|---|---|---|---|---|",
    ]
    for label, key, target in rows:
        p50, p90 = median(s[key]), percentile(s[key], 90)
        verdict = ""
        if target is not None:
            verdict = f"≤ {target:g} ms: {'met' if p90 <= target else 'MISSED'} (p90)"
        lines.append(f"| {label} | {p50:.3f} ms | {p90:.3f} ms | {p50 / hop:.1f}× | {verdict} |")
    fired = r["fired"]
    lines += [
        "",
        f"The firing ticks started {median(fired):g} jobs each at the median ({max(fired)} at "
        "most): every job due at that moment, and as the clock moves through the day more of "
        "the frequent interval jobs fall due together. The run itself (a model turn, seconds "
        "long) is not measured; here it only stores the job after its run and drops the claim.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=50)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--quick", action="store_true", help="1,000 jobs, few rounds, no write")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds, args.per_round = 1_000, 2, 10
    started, machine_line = now_utc(), machine()
    r = asyncio.run(measure(args.jobs, args.rounds, args.per_round))
    body = report(r, args.rounds, args.per_round)
    common.publish(
        args,
        "cron",
        "Scheduler: 10,000 jobs, next-due lookup and tick",
        body,
        started,
        machine_line,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
