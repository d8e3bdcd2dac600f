"""``hermesctl cron add|list|show|pause|resume|remove|run|logs``: scheduled jobs.

Thin wrappers over the ``cron.*`` methods (docs/cron.md). ``add SCHEDULE PROMPT…`` takes the
schedule as one argument (quote ``"every 2h"`` and ``"0 9 * * *"``); ``logs ID`` prints the
newest runs with their output.
"""

from __future__ import annotations

import argparse

from hermesctl.client import Client
from hermesctl.subcommands.base import (
    COMMANDS,
    EXIT_OK,
    emit_json,
    positive_int,
    relative_time,
    table,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up
    from typing import Any


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cron", help="scheduled jobs: add, list, pause, run, read their runs")
    s = p.add_subparsers(dest="cron_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str, job: bool = True) -> argparse.ArgumentParser:
        a = s.add_parser(name, help=help_text)
        a.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
        )
        if job:
            a.add_argument("job_id", metavar="ID")
        return a

    a = action("add", "schedule a prompt", job=False)
    a.add_argument("schedule", help="30m | 'every 2h' | '0 9 * * *' | 2026-06-01T09:00")
    a.add_argument("prompt", nargs="+", help="what the run asks (self-contained)")
    a.add_argument("--name")
    a.add_argument("--repeat", type=positive_int, help="runs in all")
    a.add_argument("--deliver", help="local, origin or session:ID (comma-separated)")
    a.add_argument("--skill", action="append", dest="skills", help="load this skill (repeatable)")
    a.add_argument("--model")
    a.add_argument("--toolset", action="append", dest="toolsets", help="only these toolsets")
    a.add_argument("--workdir", help="absolute directory the run's tools work in")
    a.add_argument("--session", help="run as a turn of this existing session")
    action("list", "every job", job=False)
    action("show", "one job and its newest runs")
    a = action("pause", "stop a job from firing")
    a.add_argument("--reason")
    action("resume", "schedule a paused job again")
    action("remove", "delete a job and its runs")
    action("run", "run a job now")
    a = action("logs", "a job's newest runs with their output")
    a.add_argument("-n", "--limit", type=positive_int, default=5)


def _line(job: dict[str, Any]) -> str:
    last = job.get("last_status") or "never ran"
    orphaned = "  (orphaned: its session was deleted)" if job.get("orphaned") else ""
    return (
        f"{job['id']}  {job['state']:<9}  {job['schedule_display']:<18}  "
        f"next {job.get('next_run_at') or '-'}  last {last}  {job['name']}{orphaned}"
    )


def _table(jobs: list[dict[str, Any]]) -> str:
    rows = [
        [
            j["id"],
            f"{j['state']} (orphaned)" if j.get("orphaned") else j["state"],
            j["schedule_display"],
            relative_time(j.get("next_run_at")) if j.get("next_run_at") else "-",
            (
                f"{j['last_status']} {relative_time(j.get('last_run_at'))}"
                if j.get("last_status")
                else "never ran"
            ),
            j["name"],
        ]
        for j in jobs
    ]
    return table(["JOB ID", "STATE", "SCHEDULE", "NEXT RUN", "LAST RUN", "NAME"], rows)


def _show(job: dict[str, Any]) -> None:
    print(_line(job))
    for key in ("prompt", "skills", "model", "deliver", "session", "workdir", "last_error"):
        if job.get(key):
            print(f"  {key}: {job[key]}")
    repeat = job.get("repeat") or {}
    times = repeat.get("times")
    print(f"  runs: {repeat.get('completed', 0)} of {times if times else 'unlimited'}")


def _run_line(run: dict[str, Any]) -> str:
    extra = f", {run['missed']} missed" if run.get("missed") else ""
    silent = " (silent)" if run.get("silent") else ""
    return f"run {run['id']}  {run['status']}{silent}  {run['kind']}{extra}  {run['session_id']}"


def _do(args: argparse.Namespace, client: Client) -> int:
    verb = args.cron_command
    result: Any
    if verb == "add":
        params: dict[str, Any] = {"schedule": args.schedule, "prompt": " ".join(args.prompt)}
        for key, value in (
            ("name", args.name),
            ("repeat", args.repeat),
            ("deliver", args.deliver),
            ("skills", args.skills),
            ("model", args.model),
            ("enabled_toolsets", args.toolsets),
            ("workdir", args.workdir),
            ("session", args.session),
        ):
            if value is not None:
                params[key] = value
        result = client.call("cron.create", params)
    elif verb == "list":
        result = client.call("cron.list")["jobs"]
    elif verb == "logs":
        result = client.call("cron.runs", {"job_id": args.job_id, "limit": args.limit})["runs"]
    elif verb == "pause":
        params = {"job_id": args.job_id}
        if args.reason:
            params["reason"] = args.reason
        result = client.call("cron.pause", params)
    else:
        method = {"show": "cron.get", "resume": "cron.resume", "remove": "cron.remove"}.get(
            verb, "cron.run"
        )
        result = client.call(method, {"job_id": args.job_id})
    if getattr(args, "json", False):
        emit_json(result)
        return EXIT_OK
    if verb == "list":
        print(_table(result) if result else "no cron jobs")
    elif verb == "logs":
        if not result:
            print("no runs yet")
        for run in result:
            print(_run_line(run))
            body = run.get("output") or run.get("error") or ""
            print("\n".join("    " + line for line in body.splitlines()))
    elif verb == "show":
        _show(result["job"])
        for run in result["runs"]:
            print("  " + _run_line(run))
    elif verb == "remove":
        print(f"removed {args.job_id}")
    elif verb == "run":
        print(("started: " if result["started"] else "already running: ") + _line(result["job"]))
    else:
        print(_line(result))
    return EXIT_OK


COMMANDS["cron"] = _do
