"""A job's record and every change of it: create, update, pause, resume, fire, finish.

The record has the reference's fields that mean something in hermesd (docs/cron.md lists
them); times in it are ISO 8601 with an offset, in the configured timezone. Each function
takes the job and the time and returns the new record with its ``next_run_at`` as Unix
seconds (the store's index column): no clock and no store here, so the scheduler and the tests
can reason about one change at a time. `fire` is where missed runs are decided.
"""

from __future__ import annotations

import os
import secrets
from datetime import datetime
from typing import Any

from croniter import croniter

from hermesd.cron import schedule as sched

STATES = ("scheduled", "paused", "running", "completed")
LAST_STATUSES = ("ok", "error", "delivery_failed", "blocked_config")
EDITABLE = (
    "name",
    "prompt",
    "schedule",
    "repeat",
    "deliver",
    "skills",
    "model",
    "enabled_toolsets",
    "workdir",
    "session",
)
NAME_CHARS = 200
PROMPT_CHARS = 100_000


class JobError(ValueError):
    """A job field that cannot be used; the message names the field."""


def new_job_id() -> str:
    return secrets.token_hex(6)


def _ts(when: datetime | None) -> float | None:
    return None if when is None else when.timestamp()


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def _text(fields: dict[str, Any], key: str, limit: int, default: str | None = None) -> str | None:
    value = fields.get(key, default)
    if value is None:
        return None
    if not isinstance(value, str):
        raise JobError(f"{key} must be a string")
    value = value.strip()
    if len(value) > limit:
        raise JobError(f"{key} is longer than {limit} characters")
    return value or None


def _names(fields: dict[str, Any], key: str) -> list[str] | None:
    value = fields.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise JobError(f"{key} must be a list of names")
    return [v.strip() for v in value if v.strip()] or None


def _repeat(value: Any, kind: str) -> int | None:
    if value is None or value == "":
        return 1 if kind == "once" else None
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobError(
            "repeat must be a whole number of runs (omit it: once for a one-shot, "
            "forever for a recurring schedule)"
        )
    if value <= 0:
        return 1 if kind == "once" else None
    return value


def _workdir(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not os.path.isabs(value):
        raise JobError("workdir must be an absolute path")
    if not os.path.isdir(value):
        raise JobError(f"workdir {value} is not a directory")
    return os.path.normpath(value)


def _deliver(value: Any, origin: dict[str, Any] | None) -> str:
    if value is None or value == "":
        return "origin" if origin else "local"
    if not isinstance(value, str):
        raise JobError("deliver must be a string: local, origin or session:<id>")
    return value.strip()


def create(fields: dict[str, Any], now: datetime) -> tuple[dict[str, Any], float | None]:
    """A new job from the fields a person or the model gave; `JobError` or
    `schedule.ScheduleError` name what is wrong."""
    prompt = _text(fields, "prompt", PROMPT_CHARS)
    skills = _names(fields, "skills") or _names(fields, "skill")
    if not prompt and not skills:
        raise JobError("prompt is required (or at least one skill)")
    text = fields.get("schedule")
    if not isinstance(text, str):
        raise JobError(f"schedule is required: {sched.FORMS}")
    parsed = sched.parse_schedule(text, now)
    first = sched.first_time(parsed, now)
    if parsed["kind"] == "once" and (now - first).total_seconds() > sched.ONESHOT_GRACE:
        raise JobError(
            f"the one-shot time {first.isoformat()} is more than "
            f"{int(sched.ONESHOT_GRACE)} seconds in the past"
        )
    given_origin = fields.get("origin")
    origin: dict[str, Any] | None = given_origin if isinstance(given_origin, dict) else None
    name = _text(fields, "name", NAME_CHARS) or (prompt or (skills or ["cron job"])[0])[:50]
    job: dict[str, Any] = {
        "id": new_job_id(),
        "name": name.strip(),
        "prompt": prompt or "",
        "skills": skills or [],
        "model": _text(fields, "model", 200),
        "schedule": parsed,
        "schedule_display": parsed["display"],
        "repeat": {"times": _repeat(fields.get("repeat"), parsed["kind"]), "completed": 0},
        "enabled": True,
        "state": "scheduled",
        "paused_at": None,
        "paused_reason": None,
        "created_at": now.isoformat(),
        "next_run_at": first.isoformat(),
        "last_run_at": None,
        "last_status": None,
        "last_error": None,
        "deliver": _deliver(fields.get("deliver"), origin),
        "origin": origin,
        "enabled_toolsets": _names(fields, "enabled_toolsets"),
        "workdir": _workdir(fields.get("workdir")),
        "session": _text(fields, "session", 64),
    }
    return job, first.timestamp()


def update(
    job: dict[str, Any], changes: dict[str, Any], now: datetime
) -> tuple[dict[str, Any], float | None]:
    """The job with ``changes`` (fields of `EDITABLE`); a new schedule restarts its timing."""
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise JobError(f"cannot change {', '.join(unknown)}; editable: {', '.join(EDITABLE)}")
    job = dict(job)
    next_ts = _ts(_parse(job.get("next_run_at"), now))
    if "schedule" in changes:
        parsed = sched.parse_schedule(str(changes["schedule"] or ""), now)
        job["schedule"], job["schedule_display"] = parsed, parsed["display"]
        first = sched.first_time(parsed, now)
        job["next_run_at"], next_ts = first.isoformat(), first.timestamp()
        if job["state"] == "completed":
            job["state"] = "scheduled" if job["enabled"] else "paused"
    if "repeat" in changes:
        times = _repeat(changes["repeat"], job["schedule"]["kind"])
        job["repeat"] = {"times": times, "completed": job["repeat"]["completed"]}
    if "prompt" in changes:
        job["prompt"] = _text(changes, "prompt", PROMPT_CHARS) or ""
    if "name" in changes:
        job["name"] = _text(changes, "name", NAME_CHARS) or job["name"]
    if "skills" in changes:
        job["skills"] = _names(changes, "skills") or []
    if not job["prompt"] and not job["skills"]:
        raise JobError("a job needs a prompt or at least one skill")
    if "model" in changes:
        job["model"] = _text(changes, "model", 200)
    if "enabled_toolsets" in changes:
        job["enabled_toolsets"] = _names(changes, "enabled_toolsets")
    if "workdir" in changes:
        job["workdir"] = _workdir(changes["workdir"])
    if "session" in changes:
        job["session"] = _text(changes, "session", 64)
    if "deliver" in changes:
        job["deliver"] = _deliver(changes["deliver"], job.get("origin"))
    return job, next_ts


def pause(job: dict[str, Any], now: datetime, reason: str | None = None) -> dict[str, Any]:
    """The job paused (a running run finishes; no new one starts)."""
    if job["state"] == "completed":
        raise JobError(f"job {job['id']} has completed; update its schedule to use it again")
    return {
        **job,
        "enabled": False,
        "state": "running" if job["state"] == "running" else "paused",
        "paused_at": now.isoformat(),
        "paused_reason": reason,
    }


def resume(job: dict[str, Any], now: datetime) -> tuple[dict[str, Any], float | None]:
    """The job scheduled again, from its next time after ``now`` (missed ones are skipped)."""
    if job["state"] == "completed":
        raise JobError(f"job {job['id']} has completed; update its schedule to use it again")
    job = {**job, "enabled": True, "paused_at": None, "paused_reason": None}
    when = _parse(job.get("next_run_at"), now)
    if job["schedule"]["kind"] != "once" and (when is None or when <= now):
        when = sched.next_time(job["schedule"], now, anchor=when)
    job["next_run_at"] = _iso(when)
    if job["state"] != "running":
        job["state"] = "scheduled"
    return job, _ts(when)


def _parse(value: Any, now: datetime) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return sched.aware(datetime.fromisoformat(value), now.tzinfo)
    except ValueError:
        return None


def fire(
    job: dict[str, Any], now: datetime, *, catch_up: bool = True
) -> tuple[dict[str, Any], float | None, bool]:
    """Decide a due job at ``now``: ``(job, next_run_at, run?)``.

    On time or within the grace (half the period, 2 min to 2 h) it runs late; past the grace
    the missed times collapse into one catch-up run (or none with ``catch_up`` off); a
    one-shot more than 2 minutes late is retired without running. The next time and the
    repeat count move before the run starts, so a daemon that dies during it never runs the
    same time twice.
    """
    job = dict(job)
    due = _parse(job.get("next_run_at"), now) or now
    late = (now - due).total_seconds()
    kind = job["schedule"]["kind"]
    if kind == "once":
        if late > sched.ONESHOT_GRACE:
            job.update(
                state="completed",
                next_run_at=None,
                last_status="error",
                last_error=(
                    f"missed: due at {due.isoformat()}, {int(late)} s before hermesd could "
                    "run it (more than the one-shot grace of 120 s); retired without running"
                ),
                last_fire={"kind": "retired", "missed": 1, "scheduled_for": due.isoformat()},
            )
            return job, None, False
        missed, run_kind, run = 0, "late" if late > 0 else "on_time", True
        nxt: datetime | None = None
    else:
        grace = sched.grace_seconds(job["schedule"], due)
        nxt = sched.next_time(job["schedule"], now, anchor=due)
        if late <= grace:
            missed, run_kind, run = 0, "late" if late >= 1 else "on_time", True
        else:
            missed = 1 + sched.occurrences_between(job["schedule"], due, now)
            run_kind, run = "catch_up", catch_up
    repeat = dict(job["repeat"])
    if run:
        repeat["completed"] = int(repeat.get("completed") or 0) + 1
    done = repeat["times"] is not None and repeat["completed"] >= repeat["times"]
    if done or nxt is None:
        nxt = None
    job.update(
        repeat=repeat,
        next_run_at=_iso(nxt),
        state="running" if run else ("completed" if done or nxt is None else "scheduled"),
        last_fire={"kind": run_kind, "missed": missed, "scheduled_for": due.isoformat()},
    )
    if not run:
        job.update(
            last_status="error",
            last_error=f"skipped {missed} missed run(s) (cron.catch_up_missed is off)",
        )
    return job, _ts(nxt), run


def fire_now(job: dict[str, Any], now: datetime) -> tuple[dict[str, Any], float | None, bool]:
    """A run someone asked for (``run``): starts now; the schedule keeps its next time."""
    job = dict(job)
    job.update(
        state="running",
        last_fire={"kind": "manual", "missed": 0, "scheduled_for": now.isoformat()},
        _state_before=job["state"],
    )
    return job, _ts(_parse(job.get("next_run_at"), now)), True


def finish(
    job: dict[str, Any], now: datetime, status: str, error: str | None
) -> tuple[dict[str, Any], float | None]:
    """The job after a run ended with ``status`` (one of `LAST_STATUSES`)."""
    job = dict(job)
    before = job.pop("_state_before", None)
    nxt = _parse(job.get("next_run_at"), now)
    times, completed = job["repeat"]["times"], job["repeat"]["completed"]
    if before is not None:  # a manual run leaves the schedule where it was
        state = before
    elif nxt is None or (times is not None and completed >= times):
        state, nxt = "completed", None
    else:
        state = "scheduled" if job["enabled"] else "paused"
    job.update(
        state=state,
        next_run_at=_iso(nxt),
        last_run_at=now.isoformat(),
        last_status=status,
        last_error=error,
    )
    return job, _ts(nxt)


def _check_parsed(parsed: dict[str, Any]) -> None:
    """Refuse a stored schedule no time can be computed from."""
    kind = parsed["kind"]
    if kind == "interval":
        minutes = parsed.get("minutes")
        if isinstance(minutes, bool) or not isinstance(minutes, int):
            raise JobError(f"interval minutes must be a whole number, got {minutes!r}")
        if not 1 <= minutes <= sched.MAX_MINUTES:
            raise JobError(f"interval of {minutes} minutes is out of range")
    elif kind == "once":
        try:
            datetime.fromisoformat(str(parsed.get("run_at")))
        except ValueError:
            raise JobError(f"invalid run_at {parsed.get('run_at')!r}") from None


def from_reference(ref: dict[str, Any], now: datetime) -> tuple[dict[str, Any], float | None]:
    """A job of a reference ``cron/jobs.json`` as a hermesd job (id and timing kept)."""
    if not isinstance(ref.get("id"), str) or not isinstance(ref.get("schedule"), dict):
        raise JobError("a reference job needs an id and a schedule")
    parsed = dict(ref["schedule"])
    if parsed.get("kind") not in ("once", "interval", "cron"):
        raise JobError(f"unknown schedule kind {parsed.get('kind')!r}")
    if parsed["kind"] == "cron" and not croniter.is_valid(str(parsed.get("expr"))):
        raise JobError(f"invalid cron expression {parsed.get('expr')!r}")
    _check_parsed(parsed)
    parsed.setdefault("display", ref.get("schedule_display") or parsed["kind"])
    given_repeat = ref.get("repeat")
    repeat: dict[str, Any] = given_repeat if isinstance(given_repeat, dict) else {}
    enabled = ref.get("enabled", True) is not False
    state = ref.get("state") if ref.get("state") in STATES else "scheduled"
    if state == "running":
        state = "scheduled"
    if not enabled and state != "completed":
        state = "paused"
    nxt = _parse(ref.get("next_run_at"), now)
    if nxt is None and state == "scheduled":
        nxt = sched.first_time(parsed, now) if parsed["kind"] != "once" else None
        if nxt is None:
            state = "completed"
    skills = ref.get("skills") or ([ref["skill"]] if ref.get("skill") else [])
    job = {
        "id": ref["id"][:64],
        "name": str(ref.get("name") or ref.get("prompt") or "cron job")[:NAME_CHARS],
        "prompt": str(ref.get("prompt") or ""),
        "skills": [str(s) for s in skills],
        "model": ref.get("model") if isinstance(ref.get("model"), str) else None,
        "schedule": parsed,
        "schedule_display": parsed["display"],
        "repeat": {
            "times": repeat.get("times") if isinstance(repeat.get("times"), int) else None,
            "completed": int(repeat.get("completed") or 0),
        },
        "enabled": enabled,
        "state": state,
        "paused_at": ref.get("paused_at"),
        "paused_reason": ref.get("paused_reason"),
        "created_at": ref.get("created_at") or now.isoformat(),
        "next_run_at": _iso(nxt),
        "last_run_at": ref.get("last_run_at"),
        "last_status": ref.get("last_status") if ref.get("last_status") in LAST_STATUSES else None,
        "last_error": ref.get("last_error"),
        "deliver": str(ref.get("deliver") or "local"),
        "origin": ref.get("origin") if isinstance(ref.get("origin"), dict) else None,
        "enabled_toolsets": ref.get("enabled_toolsets") or None,
        "workdir": ref.get("workdir") or None,
        "session": None,
        "imported_from": "reference",
    }
    return job, _ts(nxt)
