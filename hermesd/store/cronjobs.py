"""`CronTable`: scheduled jobs and their runs, in the session store's file (migration v9).

Owns the SQL of ``cron_jobs`` and ``cron_runs``: a job is its JSON record plus the columns the
scheduler selects on (``state``, ``next_run_at`` in Unix seconds, the fire claim), and the runs
keep each outcome with its output, pruned to the newest few per job. ``store.cron``; every
method runs on the store's DB thread (`hermesd.store.database.on_db_thread`: from the event
loop, hand it to ``store.run``); what a schedule means is ``hermesd.cron``'s business, which
passes in the decision (`claim`'s ``decide``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hermesd.store.database import Table, on_db_thread

# decide(job) -> (the job as it is to be stored, its next_run_at, whether to start a run)
Decide = Callable[[dict[str, Any]], tuple[dict[str, Any], float | None, bool]]
# change(job) -> (the job as it is to be stored, its next_run_at)
Change = Callable[[dict[str, Any]], tuple[dict[str, Any], float | None]]


_RUN_KEYS = (
    "id",
    "job_id",
    "session_id",
    "scheduled_for",
    "started_at",
    "finished_at",
    "status",
    "kind",
    "missed",
    "silent",
    "output",
    "error",
)


class JobNotFound(LookupError):
    """No job has this id."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no cron job '{job_id}'")
        self.job_id = job_id


class CronTable(Table):
    """The jobs and runs tables of one store."""

    # -- jobs -------------------------------------------------------------------------------

    @on_db_thread
    def put(self, job: dict[str, Any], next_run_ts: float | None, created_ts: float) -> None:
        """Insert or replace ``job`` (keeping a claim it holds)."""
        with self.db.tx() as db:
            db.execute(
                "INSERT INTO cron_jobs (id, doc, state, next_run_at, created_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
                " doc = excluded.doc, state = excluded.state, next_run_at = excluded.next_run_at",
                (job["id"], json.dumps(job), job["state"], next_run_ts, created_ts),
            )

    @on_db_thread
    def modify(self, job_id: str, change: Change) -> dict[str, Any]:
        """Read, change and write the job in one transaction (so a claim cannot slip in
        between); ``change(job)`` gives the new job and its next_run_at. `JobNotFound`."""
        with self.db.tx() as db:
            row = db.execute("SELECT doc FROM cron_jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            job, next_ts = change(json.loads(row[0]))
            db.execute(
                "UPDATE cron_jobs SET doc = ?, state = ?, next_run_at = ? WHERE id = ?",
                (json.dumps(job), job["state"], next_ts, job_id),
            )
            return job

    @on_db_thread
    def get(self, job_id: str) -> dict[str, Any]:
        """The job's record; `JobNotFound` when there is none."""
        row = self._conn.execute("SELECT doc FROM cron_jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        doc: dict[str, Any] = json.loads(row[0])
        return doc

    @on_db_thread
    def all(self) -> list[dict[str, Any]]:
        """Every job, oldest first."""
        rows = self._conn.execute("SELECT doc FROM cron_jobs ORDER BY created_at, id").fetchall()
        return [json.loads(r[0]) for r in rows]

    @on_db_thread
    def orphaned(self) -> set[str]:
        """Ids of the jobs whose origin session, or the session they run in, was deleted."""
        gone = "{0} IS NOT NULL AND {0} NOT IN (SELECT id FROM sessions)"
        origin, named = (
            gone.format("json_extract(doc, '$.origin.session_id')"),
            gone.format("json_extract(doc, '$.session')"),
        )
        rows = self._conn.execute(f"SELECT id FROM cron_jobs WHERE ({origin}) OR ({named})")
        return {str(r[0]) for r in rows}

    @on_db_thread
    def count(self) -> int:
        """How many jobs there are."""
        return int(self._conn.execute("SELECT count(*) FROM cron_jobs").fetchone()[0])

    @on_db_thread
    def delete(self, job_id: str) -> bool:
        """Remove the job and its runs; False when there was none."""
        with self.db.tx() as db:
            db.execute("DELETE FROM cron_runs WHERE job_id = ?", (job_id,))
            return db.execute("DELETE FROM cron_jobs WHERE id = ?", (job_id,)).rowcount > 0

    # -- the scheduler's queries ------------------------------------------------------------

    @on_db_thread
    def next_due(self) -> float | None:
        """The earliest ``next_run_at`` of a scheduled job (an index lookup)."""
        row = self._conn.execute(
            "SELECT min(next_run_at) FROM cron_jobs"
            " WHERE state = 'scheduled' AND next_run_at IS NOT NULL"
        ).fetchone()
        return None if row[0] is None else float(row[0])

    @on_db_thread
    def due(self, now: float, limit: int = 64) -> list[str]:
        """Ids of scheduled jobs due at ``now``, most overdue first."""
        rows = self._conn.execute(
            "SELECT id FROM cron_jobs WHERE state = 'scheduled' AND next_run_at IS NOT NULL"
            " AND next_run_at <= ? ORDER BY next_run_at LIMIT ?",
            (now, limit),
        ).fetchall()
        return [r[0] for r in rows]

    @on_db_thread
    def claim(
        self, job_id: str, now: float, owner: str, lease_until: float, decide: Decide
    ) -> tuple[dict[str, Any], bool] | None:
        """Take a due job for a run, in one transaction: None when it is not due or someone
        holds it. ``decide`` gives the stored job, its next time and whether a run starts;
        with a run the claim is written with the job, so no second run can start."""
        with self.db.tx() as db:
            row = db.execute(
                "SELECT doc FROM cron_jobs WHERE id = ? AND state = 'scheduled'"
                " AND next_run_at IS NOT NULL AND next_run_at <= ? AND claimed_by IS NULL",
                (job_id, now),
            ).fetchone()
            if row is None:
                return None
            job, next_ts, run = decide(json.loads(row[0]))
            db.execute(
                "UPDATE cron_jobs SET doc = ?, state = ?, next_run_at = ?, claimed_by = ?,"
                " claim_until = ? WHERE id = ?",
                (
                    json.dumps(job),
                    job["state"],
                    next_ts,
                    owner if run else None,
                    lease_until if run else None,
                    job_id,
                ),
            )
            return job, run

    @on_db_thread
    def claim_now(
        self, job_id: str, owner: str, lease_until: float, decide: Decide
    ) -> tuple[dict[str, Any], bool] | None:
        """Claim the job for a run asked for by a person (``run``): any state but running."""
        with self.db.tx() as db:
            row = db.execute(
                "SELECT doc, state, next_run_at FROM cron_jobs WHERE id = ?", (job_id,)
            ).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            if row[1] == "running":
                return None
            job, next_ts, run = decide(json.loads(row[0]))
            db.execute(
                "UPDATE cron_jobs SET doc = ?, state = ?, next_run_at = ?, claimed_by = ?,"
                " claim_until = ? WHERE id = ?",
                (json.dumps(job), job["state"], next_ts, owner, lease_until, job_id),
            )
            return job, run

    @on_db_thread
    def set_broken(self, job_id: str, error: str) -> None:
        """Pause a job whose schedule cannot be computed, saying why, so it is not due again."""
        with self.db.tx() as db:
            row = db.execute("SELECT doc FROM cron_jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return
            job = {
                **json.loads(row[0]),
                "state": "paused",
                "enabled": False,
                "last_status": "error",
                "last_error": error,
            }
            db.execute(
                "UPDATE cron_jobs SET doc = ?, state = 'paused', claimed_by = NULL,"
                " claim_until = NULL WHERE id = ?",
                (json.dumps(job), job_id),
            )

    @on_db_thread
    def refresh_claims(self, owner: str, lease_until: float) -> int:
        """Extend the lease of every claim ``owner`` holds; how many there were."""
        with self.db.tx() as db:
            return db.execute(
                "UPDATE cron_jobs SET claim_until = ? WHERE claimed_by = ?", (lease_until, owner)
            ).rowcount

    @on_db_thread
    def release(self, job: dict[str, Any], next_run_ts: float | None, owner: str) -> bool:
        """Store the job after its run and drop the claim, if ``owner`` still holds it."""
        with self.db.tx() as db:
            return (
                db.execute(
                    "UPDATE cron_jobs SET doc = ?, state = ?, next_run_at = ?, claimed_by = NULL,"
                    " claim_until = NULL WHERE id = ? AND claimed_by = ?",
                    (json.dumps(job), job["state"], next_run_ts, job["id"], owner),
                ).rowcount
                > 0
            )

    @on_db_thread
    def finish_claim(self, job_id: str, owner: str, change: Change) -> dict[str, Any] | None:
        """After a run: ``change`` the job as stored now (it may have been paused or edited
        during the run) and drop ``owner``'s claim, in one transaction. None when the job is
        gone or the claim is no longer ``owner``'s."""
        with self.db.tx() as db:
            row = db.execute(
                "SELECT doc FROM cron_jobs WHERE id = ? AND claimed_by = ?", (job_id, owner)
            ).fetchone()
            if row is None:
                return None
            job, next_ts = change(json.loads(row[0]))
            db.execute(
                "UPDATE cron_jobs SET doc = ?, state = ?, next_run_at = ?, claimed_by = NULL,"
                " claim_until = NULL WHERE id = ?",
                (json.dumps(job), job["state"], next_ts, job_id),
            )
            return job

    @on_db_thread
    def abandoned(self, now: float, alive: Callable[[str], bool]) -> list[dict[str, Any]]:
        """Jobs claimed by an owner that is gone (``alive(owner)`` is False) or whose lease
        ran out at ``now``, with ``claimed_by`` and ``next_run_at`` added."""
        rows = self._conn.execute(
            "SELECT doc, claimed_by, claim_until, next_run_at FROM cron_jobs"
            " WHERE claimed_by IS NOT NULL"
        ).fetchall()
        found = []
        for doc, owner, until, next_ts in rows:
            if until is None or until < now or not alive(owner):
                found.append({**json.loads(doc), "_owner": owner, "_next_ts": next_ts})
        return found

    # -- runs -------------------------------------------------------------------------------

    @on_db_thread
    def start_run(
        self,
        job_id: str,
        session_id: str | None,
        scheduled_for: float | None,
        started_at: float,
        kind: str,
        missed: int,
    ) -> int:
        """Record a run that starts; its id."""
        with self.db.tx() as db:
            cur = db.execute(
                "INSERT INTO cron_runs (job_id, session_id, scheduled_for, started_at, kind,"
                " missed) VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, session_id, scheduled_for, started_at, kind, missed),
            )
            return int(cur.lastrowid or 0)

    @on_db_thread
    def finish_run(
        self,
        run_id: int,
        finished_at: float,
        status: str,
        output: str | None,
        error: str | None,
        silent: bool,
        keep: int,
    ) -> None:
        """Record a run's outcome and keep only the job's newest ``keep`` runs."""
        with self.db.tx() as db:
            db.execute(
                "UPDATE cron_runs SET finished_at = ?, status = ?, output = ?, error = ?,"
                " silent = ? WHERE id = ?",
                (finished_at, status, output, error, int(silent), run_id),
            )
            row = db.execute("SELECT job_id FROM cron_runs WHERE id = ?", (run_id,)).fetchone()
            if row is not None:
                db.execute(
                    "DELETE FROM cron_runs WHERE job_id = ? AND id NOT IN"
                    " (SELECT id FROM cron_runs WHERE job_id = ? ORDER BY id DESC LIMIT ?)",
                    (row[0], row[0], max(1, keep)),
                )

    @on_db_thread
    def runs(self, job_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """The job's newest runs, newest first."""
        self.get(job_id)
        rows = self._conn.execute(
            "SELECT id, job_id, session_id, scheduled_for, started_at, finished_at, status, kind,"
            " missed, silent, output, error FROM cron_runs WHERE job_id = ?"
            " ORDER BY id DESC LIMIT ?",
            (job_id, limit),
        ).fetchall()
        keys = _RUN_KEYS
        return [{**dict(zip(keys, r, strict=True)), "silent": bool(r[9])} for r in rows]

    @on_db_thread
    def interrupted_runs(self, job_id: str, finished_at: float, error: str) -> int:
        """Close the job's runs left 'running' by a daemon that died."""
        with self.db.tx() as db:
            return db.execute(
                "UPDATE cron_runs SET status = 'error', finished_at = ?, error = ?"
                " WHERE job_id = ? AND status = 'running'",
                (finished_at, error, job_id),
            ).rowcount
