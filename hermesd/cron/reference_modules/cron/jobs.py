"""``cron.jobs`` as plugins know it from the reference, backed by hermesd's scheduler.

Plugin code calls these from its worker threads (hermes-dreaming's ``/dreaming install-cron``
calls `create_job` and `list_jobs`); each call runs on the daemon's event loop through
`hermesd.cron.service.CronService` and waits for it, so a job made here is stored and
scheduled exactly as one made with hermesctl. Arguments hermesd has no use for are refused
with `NotImplementedError` rather than ignored. Importing this module has no side effects.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hermesd.cron import bridge
from hermesd.rpc.protocol import RpcError

__all__ = [
    "create_job",
    "get_job",
    "list_jobs",
    "pause_job",
    "remove_job",
    "resume_job",
    "trigger_job",
    "update_job",
]


def _call(method: str, *args: Any) -> Any:
    service = bridge.active()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            f"cron.jobs.{method} blocks until the daemon answers: call it from a plugin's "
            "thread (a sync handler), not from a coroutine on the event loop"
        )
    try:
        return service.call_from_thread(getattr(service, method)(*args))
    except RpcError as exc:
        if exc.code.endswith("NotFound"):
            return None
        raise ValueError(exc.message) from None


def create_job(
    prompt: str | None,
    schedule: str,
    name: str | None = None,
    repeat: int | None = None,
    deliver: str | None = None,
    origin: dict[str, Any] | None = None,
    skill: str | None = None,
    skills: list[str] | None = None,
    model: str | None = None,
    provider: str | None = None,
    base_url: str | None = None,
    script: str | None = None,
    context_from: str | list[str] | None = None,
    enabled_toolsets: list[str] | None = None,
    workdir: str | None = None,
    no_agent: bool = False,
    attach_to_session: bool | None = None,
) -> dict[str, Any]:
    """Schedule a job (the reference's signature); ValueError for a bad schedule or field."""
    unsupported = [
        label
        for label, value in (
            ("provider", provider),
            ("base_url", base_url),
            ("script", script),
            ("context_from", context_from),
            ("no_agent", no_agent or None),
            ("attach_to_session", attach_to_session),
        )
        if value
    ]
    if unsupported:
        raise NotImplementedError(
            f"hermesd's cron does not support {', '.join(unsupported)} (docs/cron.md)"
        )
    fields: dict[str, Any] = {
        "prompt": prompt,
        "schedule": schedule,
        "name": name,
        "repeat": repeat,
        "deliver": deliver,
        "origin": origin,
        "skills": skills or ([skill] if skill else None),
        "model": model,
        "enabled_toolsets": enabled_toolsets,
        "workdir": workdir,
    }
    job: dict[str, Any] = _call("create", {k: v for k, v in fields.items() if v is not None})
    return job


def list_jobs(include_disabled: bool = False) -> list[dict[str, Any]]:
    """The jobs (enabled ones only unless ``include_disabled``), as the reference lists them."""
    found: list[dict[str, Any]] = _call("list_jobs", include_disabled)
    return found


def get_job(job_id: str) -> dict[str, Any] | None:
    """One job, or None."""
    job: dict[str, Any] | None = _call("get", job_id)
    return job


def update_job(job_id: str, updates: dict[str, Any]) -> dict[str, Any] | None:
    """The job with ``updates`` applied, or None when there is no such job."""
    job: dict[str, Any] | None = _call("update", job_id, dict(updates))
    return job


def pause_job(job_id: str, reason: str | None = None) -> dict[str, Any] | None:
    job: dict[str, Any] | None = _call("pause", job_id, reason)
    return job


def resume_job(job_id: str) -> dict[str, Any] | None:
    job: dict[str, Any] | None = _call("resume", job_id)
    return job


def remove_job(job_id: str) -> bool:
    """True when the job existed and is gone."""
    return bool(_call("remove", job_id))


def trigger_job(job_id: str) -> dict[str, Any] | None:
    """Run the job now; the job, or None when there is no such job."""
    found = _call("run_now", job_id)
    return None if found is None else found[0]
