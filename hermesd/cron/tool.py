"""The model's ``cronjob`` tool (also named ``cronjob_manage``) and the ``/cron`` command.

Both register through the same calls plugins use (`ToolRegistry.register` in toolset
``cronjob``, `CommandRegistry.register`) and act through `CronService`'s API. A job the model
creates remembers the session it was made in as its origin (``deliver: origin`` sends the
answer back there) and has that session's authority and no more (`hermesd.cron.authority`):
its workdir inside the session's workspace, its sessions its owner's, its run that owner's.
Runs never see this tool: the ``cronjob`` toolset is off inside them, so a run cannot schedule
more runs.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

from hermesd.rpc.protocol import RpcError

if TYPE_CHECKING:
    from hermesd.commands.registry import CommandRegistry
    from hermesd.cron.service import CronService
    from hermesd.tools.registry import ToolRegistry

TOOLSET = "cronjob"
ACTIONS = ("create", "list", "update", "pause", "resume", "remove", "run")

DESCRIPTION = (
    "Schedule, inspect and manage jobs that run a prompt later or on a schedule, each run "
    "being a new agent turn with no one present.\n"
    "action=create needs 'schedule' and 'prompt'. action=list shows the jobs with their ids. "
    "update, pause, resume, remove and run act on one job and need its 'job_id'.\n"
    "To stop a job: call action=list first, then action=remove with the id it shows. Never "
    "guess job IDs — always list first.\n"
    "A run starts without this conversation, so the prompt must say everything the task "
    "needs. With skills, the run loads them in order and then follows the prompt. A run "
    "cannot ask anyone anything; if it has nothing to report it answers [SILENT].\n"
    "Safety: cron-run sessions should not recursively schedule more cron jobs (this tool is "
    "not available inside a run)."
)

SCHEMA: dict[str, Any] = {
    "name": "cronjob",
    "description": DESCRIPTION,
    "parameters": {
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": list(ACTIONS),
                "description": "create, list, update, pause, resume, remove or run; create "
                "needs schedule and prompt",
            },
            "job_id": {
                "type": "string",
                "description": "the job's id from action=list (update/pause/resume/remove/run)",
            },
            "prompt": {"type": "string", "description": "a self-contained task for the run"},
            "schedule": {
                "type": "string",
                "description": "'30m' or '2h' (once, after that delay), 'every 2h' (recurring), "
                "'0 9 * * *' (cron expression), or '2026-06-01T09:00' (once, at that time)",
            },
            "name": {"type": "string", "description": "a short name for the job"},
            "repeat": {
                "type": "integer",
                "description": "how many runs in all; omit for once (one-shot) or forever",
            },
            "deliver": {
                "type": "string",
                "description": "omit to send the answer back to this conversation; 'local' "
                "keeps it only in the job's run log; 'session:<id>' sends it to that session",
            },
            "skills": {
                "type": "array",
                "items": {"type": "string"},
                "description": "skills the run loads, in order, before the prompt",
            },
            "model": {"type": "string", "description": "the model of the run (optional)"},
            "enabled_toolsets": {
                "type": "array",
                "items": {"type": "string"},
                "description": "only these toolsets in the run (optional)",
            },
            "workdir": {
                "type": "string",
                "description": "absolute directory the run's tools work in, inside this "
                "session's workspace (optional; default: the workspace)",
            },
        },
        "required": ["action"],
    },
}

_FIELDS = (
    "prompt",
    "schedule",
    "name",
    "repeat",
    "deliver",
    "skills",
    "model",
    "enabled_toolsets",
    "workdir",
)


def _brief(job: dict[str, Any]) -> dict[str, Any]:
    return {
        k: job.get(k)
        for k in (
            "id",
            "name",
            "schedule_display",
            "state",
            "enabled",
            "repeat",
            "next_run_at",
            "last_run_at",
            "last_status",
            "last_error",
            "deliver",
            "workdir",
            "orphaned",
        )
    }


async def run_action(
    cron: CronService, args: dict[str, Any], session_id: str | None
) -> dict[str, Any]:
    """Do one ``cronjob`` action with the authority of session ``session_id`` (its owner, its
    workspace: `hermesd.cron.authority`); the result the model reads."""
    action = str(args.get("action") or "").strip().lower()
    if action not in ACTIONS:
        return {"success": False, "error": f"action must be one of {', '.join(ACTIONS)}"}
    if not session_id:
        return {
            "success": False,
            "error": "the cronjob tool acts for a session and none was given; outside a "
            "session use hermesctl cron (the cron.* methods)",
        }
    try:
        who = await cron.authority_of(session_id)
        if action == "list":
            found = await cron.list_jobs(authority=who)
            return {"success": True, "count": len(found), "jobs": [_brief(j) for j in found]}
        if action == "create":
            fields = {k: args[k] for k in _FIELDS if args.get(k) is not None}
            fields["origin"] = {"platform": "hermesd", "session_id": session_id}
            job = await cron.create(fields, who)
            return {"success": True, "job": _brief(job), "message": f"Scheduled '{job['name']}'."}
        job_id = str(args.get("job_id") or "").strip()
        if not job_id:
            return {"success": False, "error": f"action={action} needs job_id: list jobs first"}
        if action == "update":
            changes = {k: args[k] for k in _FIELDS if k in args}
            return {"success": True, "job": _brief(await cron.update(job_id, changes, who))}
        if action == "pause":
            job = await cron.pause(job_id, args.get("reason"), who)
            return {"success": True, "job": _brief(job)}
        if action == "resume":
            return {"success": True, "job": _brief(await cron.resume(job_id, who))}
        if action == "remove":
            await cron.remove(job_id, who)
            return {"success": True, "removed": job_id}
        job, started = await cron.run_now(job_id, who)
        return {"success": True, "started": started, "job": _brief(job)}
    except RpcError as exc:
        return {"success": False, "error": exc.message}


def register_cron_tool(registry: ToolRegistry, cron: CronService) -> None:
    """Register ``cronjob`` and its alias ``cronjob_manage`` in toolset ``cronjob``."""

    async def cronjob(args: dict[str, Any], **kw: Any) -> str:
        result = await run_action(cron, args, kw.get("session_id") or kw.get("task_id"))
        return json.dumps(result, ensure_ascii=False)

    registry.register("cronjob", TOOLSET, SCHEMA, cronjob, is_async=True, emoji="⏰")
    registry.register(
        "cronjob_manage",
        TOOLSET,
        {**SCHEMA, "name": "cronjob_manage"},
        cronjob,
        is_async=True,
        emoji="⏰",
    )


USAGE = (
    "Usage: /cron [list] | /cron add SCHEDULE PROMPT… | /cron show|pause|resume|remove|run ID\n"
    "SCHEDULE is one word or quoted: 30m, 'every 2h', '0 9 * * *', 2026-06-01T09:00"
)


def _line(job: dict[str, Any]) -> str:
    status = job.get("last_status") or "never ran"
    orphaned = "  (orphaned: its session was deleted)" if job.get("orphaned") else ""
    return (
        f"{job['id']}  {job['state']:<9}  {job['schedule_display']:<18}  "
        f"next {job.get('next_run_at') or '-'}  last {status}  {job['name']}{orphaned}"
    )


def register_cron_command(commands: CommandRegistry, cron: CronService) -> None:
    """Register ``/cron``."""

    async def slash(raw_args: str) -> str:
        try:
            words = shlex.split(raw_args)
        except ValueError as exc:
            return f"/cron: {exc}\n{USAGE}"
        verb = words[0].lower() if words else "list"
        try:
            if verb == "list":
                found = await cron.list_jobs()
                return "\n".join(_line(j) for j in found) if found else "No cron jobs."
            if verb == "add" and len(words) >= 3:
                job = await cron.create({"schedule": words[1], "prompt": " ".join(words[2:])})
                return f"Scheduled {job['id']}: {_line(job)}"
            if verb in ("show", "pause", "resume", "remove", "run") and len(words) == 2:
                job_id = words[1]
                if verb == "show":
                    return json.dumps(await cron.get(job_id), indent=2, ensure_ascii=False)
                if verb == "pause":
                    return "Paused: " + _line(await cron.pause(job_id))
                if verb == "resume":
                    return "Resumed: " + _line(await cron.resume(job_id))
                if verb == "remove":
                    await cron.remove(job_id)
                    return f"Removed {job_id}."
                job, started = await cron.run_now(job_id)
                return ("Started: " if started else "Already running: ") + _line(job)
        except RpcError as exc:
            return f"/cron {verb}: {exc.message}"
        return USAGE

    commands.register(
        "cron",
        slash,
        description="List and manage scheduled jobs",
        args_hint="[list|add|show|pause|resume|remove|run]",
        access="owner",  # as every cron.* method: the jobs are the owner's
    )
