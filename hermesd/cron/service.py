"""`CronService`: the ``cron.*`` methods, and the one API every other way in uses.

RPC handlers, the ``cronjob`` tool (`hermesd.cron.tool`), ``/cron`` (`hermesd.cron.command`)
and the plugins' ``cron.jobs`` module all call the same coroutine methods here, so a job made
anywhere is validated and stored the same way. The service owns the scheduler's life, the run
bookkeeping around `JobRunner` (run records, retention, the job after its run) and the import
of a reference ``$HERMES_HOME/cron/jobs.json``. Job rules are in `hermesd.cron.jobs`; who may
choose what (a model-made job has its session's authority) in `hermesd.cron.authority`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from hermesd.cron import bridge, jobs
from hermesd.cron.authority import Authority, AuthorityError, job_authority, session_targets
from hermesd.cron.clock import (
    ManualClock,
    clock_from_env,
    local,
    serve_test_clock,
    test_clock_channel,
    zone,
)
from hermesd.cron.runner import JobRunner, PlatformSender, RunOutcome, RunSettings
from hermesd.cron.schedule import ScheduleError
from hermesd.cron.scheduler import Scheduler
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.store.cronjobs import JobNotFound
from hermesd.store.dbfile import SessionNotFound
from hermesd.tools.workspace import resolve_workspace

if TYPE_CHECKING:
    from hermesd.agent.session_service import SessionService
    from hermesd.approvals.broker import ApprovalBroker
    from hermesd.rpc.connection import Call, Router
    from hermesd.tools.skill_catalog import SkillCatalog

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")

REFERENCE_JOBS = Path("cron") / "jobs.json"
MAX_REFERENCE_BYTES = 16 * 1024 * 1024


class CronService:
    """Scheduled jobs of one daemon."""

    def __init__(
        self,
        sessions: SessionService,
        broker: ApprovalBroker,
        skills: SkillCatalog | None,
        config: Any,
        home: Path,
        env: Mapping[str, str] | None = None,
        send_to: PlatformSender | None = None,
    ) -> None:
        self.sessions = sessions
        self.store = sessions.store
        self.table = self.store.cron
        self.home = home
        env = os.environ if env is None else env
        self.clock = clock_from_env(env)
        self._test_channel = test_clock_channel(env, self.clock)
        self._test_clock: asyncio.Task[None] | None = None
        self.config = config
        self.tz = zone(config.get("cron.timezone"))
        self.runner = JobRunner(sessions, broker, skills, RunSettings.from_config(config), send_to)
        self.scheduler = Scheduler(
            self.store,
            self.table,
            self.clock,
            self.tz,
            self._run_job,
            lease=float(config.get("cron.lease")),
            catch_up=bool(config.get("cron.catch_up_missed")),
        )
        self.retention = int(config.get("cron.output_retention"))
        self._count = 0
        #: called with each finished run's status (the HTTP door's metrics)
        self.run_observers: list[Callable[[str], None]] = []
        # cron.jobs works from here on, so plugins may schedule jobs in their register()
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        bridge.activate(self)

    # --- the service protocol ------------------------------------------------------------

    def bind(self, router: Router) -> None:
        for name in ("list", "get", "create", "update", "pause", "resume", "remove", "run"):
            router.bind(f"cron.{name}", getattr(self, f"rpc_{name}"))
        router.bind("cron.runs", self.rpc_runs)

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        bridge.activate(self)
        await self.import_reference()
        self._count = await self.store.run(self.table.count)
        if self._test_channel is not None:
            channel, self._test_channel = self._test_channel, None
            self._test_clock = asyncio.create_task(serve_test_clock(channel, self.move_clock))
        if self.config.get("cron.enabled"):
            await self.scheduler.start()
        else:
            log.info("cron.enabled is off: jobs are kept but not run")

    async def stop(self) -> None:
        bridge.deactivate(self)
        if self._test_clock is not None:
            self._test_clock.cancel()
        await self.scheduler.stop()

    def status(self) -> dict[str, Any]:
        return {"cron_jobs": self._count, "cron_running": len(self.scheduler.running)}

    def reload(self, cfg: Any) -> None:
        """New ``cron.*`` settings apply to the runs that start from now on."""
        self.config = cfg
        try:
            self.tz = self.scheduler.tz = zone(cfg.get("cron.timezone"))
        except ValueError as exc:
            log.error("%s; keeping the previous timezone", exc)
        self.runner.settings = RunSettings.from_config(cfg)
        self.retention = int(cfg.get("cron.output_retention"))
        self.scheduler.catch_up = bool(cfg.get("cron.catch_up_missed"))
        self.scheduler.lease = float(cfg.get("cron.lease"))

    def now(self) -> Any:
        return local(self.clock.now(), self.tz)

    # --- the API (RPC, the tool, /cron and plugins) ----------------------------------------

    async def authority_of(self, session_id: str) -> Authority:
        """The authority of a job made in ``session_id``: its owner's uid, its workspace."""
        session = await self._db(self.store.sessions.get, session_id)
        uid = session.get("owner_uid")
        workspace = await asyncio.to_thread(
            resolve_workspace, self.home, self.config.get("terminal.cwd"), session.get("cwd")
        )
        return Authority(uid if isinstance(uid, int) else None, workspace)

    async def create(
        self, fields: dict[str, Any], authority: Authority | None = None
    ) -> dict[str, Any]:
        """Validate and store a new job (with ``authority``'s limits: the owner's when None);
        wake the scheduler."""
        authority = authority or Authority()
        fields = dict(fields)
        fields["workdir"] = self._checked(authority.workdir, fields.get("workdir"))
        job, next_ts = self._checked(jobs.create, fields, self.now())
        job["owner_uid"] = authority.uid
        await self._check_sessions(job, None)
        await self.store.run(self.table.put, job, next_ts, self.clock.now())
        self._count += 1
        self.scheduler.wake()
        log.info("cron job %s created: %s (%s)", job["id"], job["name"], job["schedule_display"])
        return job

    async def list_jobs(
        self, include_disabled: bool = True, authority: Authority | None = None
    ) -> list[dict[str, Any]]:
        """Every job ``authority`` may see (only enabled ones unless ``include_disabled``),
        each with ``orphaned``: its origin session (or the one it runs in) was deleted."""
        found: list[dict[str, Any]] = await self.store.run(self.table.all)
        orphans: set[str] = await self.store.run(self.table.orphaned)
        return [
            {**_public(j), "orphaned": j["id"] in orphans}
            for j in found
            if (include_disabled or j.get("enabled")) and _sees(authority, j)
        ]

    async def get(self, job_id: str, authority: Authority | None = None) -> dict[str, Any]:
        """One job; NotFound (also for another user's job when ``authority`` is a member's)."""
        job: dict[str, Any] = await self._db(self.table.get, job_id)
        if not _sees(authority, job):
            raise RpcError(Codes.NOT_FOUND, f"no cron job '{job_id}'", {"job_id": job_id})
        return _public(job)

    async def show(self, job_id: str) -> dict[str, Any]:
        """One job with ``orphaned`` (as `list_jobs` gives it)."""
        job = await self.get(job_id)
        orphans: set[str] = await self.store.run(self.table.orphaned)
        return {**job, "orphaned": job_id in orphans}

    async def _check_sessions(self, job: dict[str, Any], before: dict[str, Any] | None) -> None:
        """Refuse a job that names a session (to run in, or deliver to) that does not exist
        or that its owner may not use; another user's session reads as one that does not.
        Only the sessions it names anew are checked (an orphaned job can still be changed)."""
        authority = job_authority(job)
        known = set(session_targets(before)) if before is not None else set()
        for sid in [t for t in session_targets(job) if t not in known]:
            try:
                session = await self.store.run(self.store.sessions.get, sid)
            except SessionNotFound:
                session = None
            if session is None or not authority.may_use(session.get("owner_uid")):
                if session is not None:
                    log.info("cron job of uid %s named another user's session", authority.uid)
                raise RpcError(
                    Codes.INVALID_PARAMS,
                    f"no session '{sid}' this job may run in or deliver to",
                    {"session": sid},
                )

    async def _modify(
        self, job_id: str, change: Callable[[dict[str, Any]], tuple[dict[str, Any], float | None]]
    ) -> dict[str, Any]:
        try:
            job: dict[str, Any] = await self.store.run(self.table.modify, job_id, change)
        except JobNotFound as exc:
            raise RpcError(Codes.NOT_FOUND, str(exc), {"job_id": exc.job_id}) from None
        except (jobs.JobError, ScheduleError) as exc:
            raise RpcError(Codes.INVALID_PARAMS, str(exc)) from None
        self.scheduler.wake()
        return _public(job)

    async def update(
        self, job_id: str, changes: dict[str, Any], authority: Authority | None = None
    ) -> dict[str, Any]:
        """The job with ``changes`` (fields of `jobs.EDITABLE`), within ``authority``'s limits
        and the job's own (the sessions it names stay its owner's)."""
        current = await self.get(job_id, authority)
        changes = dict(changes)
        if "workdir" in changes and authority is not None:
            changes["workdir"] = self._checked(authority.workdir, changes["workdir"])
        now = self.now()
        preview, _ = self._checked(jobs.update, current, changes, now)
        await self._check_sessions(preview, current)
        return await self._modify(job_id, lambda job: jobs.update(job, changes, now))

    async def pause(
        self, job_id: str, reason: str | None = None, authority: Authority | None = None
    ) -> dict[str, Any]:
        """Stop the job from firing until resumed."""
        await self.get(job_id, authority)
        now = self.now()
        return await self._modify(job_id, lambda job: (jobs.pause(job, now, reason), None))

    async def resume(self, job_id: str, authority: Authority | None = None) -> dict[str, Any]:
        """Schedule a paused job again from its next time after now."""
        await self.get(job_id, authority)
        now = self.now()
        return await self._modify(job_id, lambda job: jobs.resume(job, now))

    async def remove(self, job_id: str, authority: Authority | None = None) -> bool:
        await self.get(job_id, authority)
        removed: bool = await self.store.run(self.table.delete, job_id)
        if not removed:
            raise RpcError(Codes.NOT_FOUND, f"no cron job '{job_id}'", {"job_id": job_id})
        self._count -= 1
        return True

    async def run_now(
        self, job_id: str, authority: Authority | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Start the job at once; (job, whether a run started)."""
        await self.get(job_id, authority)
        try:
            job = await self.scheduler.run_now(job_id)
        except JobNotFound as exc:
            raise RpcError(Codes.NOT_FOUND, str(exc), {"job_id": exc.job_id}) from None
        if job is None:
            return await self.get(job_id), False
        return _public(job), True

    async def runs(self, job_id: str, limit: int = 20) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await self._db(self.table.runs, job_id, limit)
        return found

    async def next_due(self) -> float | None:
        """When the next scheduled job is due (Unix seconds), None when none is."""
        due: float | None = await self.store.run(self.table.next_due)
        return due

    def call_from_thread(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run one of the API coroutines from a plugin's thread (``cron.jobs``)."""
        if self.loop is None:
            coro.close()
            raise RuntimeError("the cron service has not started")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    # --- runs ------------------------------------------------------------------------------

    async def _run_job(self, job: dict[str, Any], owner: str) -> None:
        """One claimed run: its session, its record, the turn, the job afterwards."""
        started = self.clock.now()
        fire = job.get("last_fire") or {}
        sid: str | None = None
        run_id = 0
        try:
            sid = await self.runner.session_for(job, local(started, self.tz))
            run_id = await self.store.run(
                self.table.start_run,
                job["id"],
                sid,
                _ts(fire.get("scheduled_for")),
                started,
                str(fire.get("kind") or "on_time"),
                int(fire.get("missed") or 0),
            )
            outcome = await self.runner.run(job, sid)
        except asyncio.CancelledError:
            outcome = RunOutcome("error", sid, None, "hermesd stopped during this run")
            await asyncio.shield(self._finish_run(job, owner, run_id, outcome))
            raise
        except SessionNotFound as exc:
            outcome = RunOutcome("error", None, None, f"the job's session {exc.session_id} is gone")
        except Exception as exc:
            log.exception("cron job %s: the run failed", job["id"])
            outcome = RunOutcome("error", sid, None, f"{type(exc).__name__}: {exc}")
        await self._finish_run(job, owner, run_id, outcome)

    async def _finish_run(
        self, job: dict[str, Any], owner: str, run_id: int, outcome: RunOutcome
    ) -> None:
        for observe in self.run_observers:
            observe(outcome.status)
        now = self.clock.now()
        if run_id:
            await self.store.run(
                self.table.finish_run,
                run_id,
                now,
                outcome.status,
                outcome.output,
                outcome.error,
                outcome.silent,
                self.retention,
            )
        when = local(now, self.tz)

        def change(current: dict[str, Any]) -> tuple[dict[str, Any], float | None]:
            done, next_ts = jobs.finish(current, when, outcome.status, outcome.error)
            done["last_session"] = outcome.session_id
            return done, next_ts

        if await self.store.run(self.table.finish_claim, job["id"], owner, change) is None:
            log.info("cron job %s was removed or taken over during its run", job["id"])
            return
        log.info(
            "cron job %s ran: %s%s",
            job["id"],
            outcome.status,
            " (silent)" if outcome.silent else "",
        )

    # --- the reference's jobs.json -----------------------------------------------------------

    async def import_reference(self) -> int:
        """Add the jobs of ``$HERMES_HOME/cron/jobs.json`` not stored yet; how many."""
        path = self.home / REFERENCE_JOBS
        try:
            if not path.is_file() or path.stat().st_size > MAX_REFERENCE_BYTES:
                return 0
            data = json.loads(await asyncio.to_thread(path.read_text, encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("cannot import %s: %s", path, exc)
            return 0
        entries = data.get("jobs") if isinstance(data, dict) else data
        if not isinstance(entries, list):
            log.warning("cannot import %s: no job list in it", path)
            return 0
        known = {j["id"] for j in await self.store.run(self.table.all)}
        added = 0
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict):
                log.warning("not importing job #%d from %s: not a job object", index, path)
                continue
            if entry.get("id") in known:
                continue
            try:
                job, next_ts = jobs.from_reference(entry, self.now())
            except (jobs.JobError, ScheduleError, ValueError, TypeError, KeyError) as exc:
                log.warning("not importing job %r from %s: %s", entry.get("id"), path, exc)
                continue
            await self.store.run(self.table.put, job, next_ts, self.clock.now())
            known.add(job["id"])
            added += 1
        if added:
            log.info("imported %d cron job(s) from %s", added, path)
        return added

    # --- helpers ---------------------------------------------------------------------------

    def _checked(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except AuthorityError as exc:
            raise RpcError(Codes.PERMISSION_DENIED, str(exc)) from None
        except (jobs.JobError, ScheduleError) as exc:
            raise RpcError(Codes.INVALID_PARAMS, str(exc)) from None

    async def _db(self, fn: Any, *args: Any) -> Any:
        try:
            return await self.store.run(fn, *args)
        except JobNotFound as exc:
            raise RpcError(Codes.NOT_FOUND, str(exc), {"job_id": exc.job_id}) from None

    # --- methods -----------------------------------------------------------------------------

    async def rpc_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return {"jobs": await self.list_jobs(p.get("include_disabled", True) is not False)}

    async def rpc_get(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return {"job": await self.show(p["job_id"]), "runs": await self.runs(p["job_id"], 5)}

    async def rpc_create(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return await self.create(dict(p))

    async def rpc_update(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        changes = {k: v for k, v in p.items() if k != "job_id"}
        return await self.update(p["job_id"], changes)

    async def rpc_pause(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return await self.pause(p["job_id"], p.get("reason"))

    async def rpc_resume(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return await self.resume(p["job_id"])

    async def rpc_remove(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self.remove(p["job_id"])
        return {"removed": True, "job_id": p["job_id"]}

    async def rpc_run(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        job, started = await self.run_now(p["job_id"])
        return {"job": job, "started": started}

    async def rpc_runs(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return {"runs": await self.runs(p["job_id"], max(1, min(int(p.get("limit") or 20), 500)))}

    async def move_clock(self, seconds: float, wait: bool) -> dict[str, Any]:
        """Move the test clock and tick; with ``wait``, return once the started runs ended."""
        assert isinstance(self.clock, ManualClock)  # the channel exists only with one
        self.clock.advance(seconds)
        started = await self.scheduler.tick()
        if wait:
            tasks = [self.scheduler.running[j] for j in started if j in self.scheduler.running]
            if tasks:
                await asyncio.wait(tasks)
        return {"now": self.clock.now(), "started": started}


def _sees(authority: Authority | None, job: dict[str, Any]) -> bool:
    """Whether ``authority`` (None: the owner) may see and change ``job``."""
    return authority is None or authority.is_owner or job_authority(job).uid == authority.uid


def _public(job: dict[str, Any]) -> dict[str, Any]:
    """The job as clients see it (without the scheduler's own keys)."""
    return {k: v for k, v in job.items() if not k.startswith("_")}


def _ts(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    from datetime import datetime

    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None
