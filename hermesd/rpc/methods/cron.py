"""RPC declarations of the cron.* methods (see hermesd.rpc.protocol; docs/cron.md)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare

_JOB = (
    "{id, name, prompt, skills, model, schedule {kind, run_at|minutes|expr, display}, "
    "schedule_display, repeat {times, completed}, enabled, state, next_run_at, last_run_at, "
    "last_status, last_error, deliver, enabled_toolsets, workdir, session, owner_uid, "
    "orphaned, ...}"
)
_FIELDS = (
    Param("prompt", "str", doc="what the run asks the agent (self-contained)"),
    Param("schedule", "str", doc="30m | every 2h | 0 9 * * * | 2026-02-03T14:00"),
    Param("name", "str", doc="a friendly name (default: the prompt's start)"),
    Param("repeat", "int", nullable=True, doc="runs in all (default: 1 for once, else forever)"),
    Param("deliver", "str", doc="local, origin or session:<id>, comma-separated"),
    Param("skills", "array", doc="skill names loaded before the prompt, in order"),
    Param("model", "str", nullable=True, doc="the model of the run's session"),
    Param("enabled_toolsets", "array", nullable=True, doc="only these toolsets in the run"),
    Param("workdir", "str", nullable=True, doc="absolute directory the run's tools work in"),
    Param("session", "str", nullable=True, doc="run as a turn of this existing session"),
)
_ID = Param("job_id", "str", required=True, doc="the job's id (cron.list shows them)")


def _declare(name: str, summary: str, params: tuple[Param, ...], result: str) -> None:
    declare(MethodSpec(name, summary, params, result, access=Access.OWNER))


_declare(
    "cron.list",
    "Scheduled jobs, oldest first (owner only).",
    (Param("include_disabled", "bool", doc="also paused and completed jobs (default true)"),),
    "{jobs: [" + _JOB + "]}",
)
_declare(
    "cron.get",
    "One job and its newest runs (owner only).",
    (_ID,),
    "{job: " + _JOB + ", runs: [...]}",
)
_declare(
    "cron.create",
    "Schedule a new job (owner only).",
    (
        *[
            Param(p.name, p.type, p.name in ("prompt", "schedule"), p.doc, p.nullable)
            for p in _FIELDS
        ],
    ),
    _JOB,
)
_declare(
    "cron.update",
    "Change a job's fields; a new schedule restarts its timing (owner only).",
    (_ID, *_FIELDS),
    _JOB,
)
_declare(
    "cron.pause",
    "Stop a job from firing until resumed (owner only).",
    (_ID, Param("reason", "str", doc="kept with the job")),
    _JOB,
)
_declare(
    "cron.resume", "Schedule a paused job again from its next time (owner only).", (_ID,), _JOB
)
_declare(
    "cron.remove", "Delete a job and its runs (owner only).", (_ID,), "{removed: true, job_id}"
)
_declare(
    "cron.run", "Run a job now, outside its schedule (owner only).", (_ID,), "{job, started: bool}"
)
_declare(
    "cron.runs",
    "A job's newest runs with their output (owner only).",
    (_ID, Param("limit", "int", doc="at most this many (default 20)")),
    "{runs: [{id, job_id, session_id, scheduled_for, started_at, finished_at, status, "
    "kind, missed, silent, output, error}]}",
)
