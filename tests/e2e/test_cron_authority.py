"""A model-made cron job has the authority of the session it was made in, and no more.

A real hermesd on the cron test clock, with ``socket.group`` set so that ``nobody`` (a member)
can talk to it (`tests.support.otheruser`). The scripted model makes jobs with the
``cronjob`` tool: a ``workdir`` outside its session's workspace is refused; a member's job
cannot name the owner's session, and the member's tool sees only the member's jobs; a member's
job stored with the owner's session as its target (as a job made before these checks would be)
is refused at delivery, its run's session belongs to the member; a job whose origin session
was deleted is listed as orphaned by ``cron.list``, ``cron.get``, ``/cron list`` and
``hermesctl cron list``.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cron import HOUR, advance, start_cron
from tests.support.daemon import DaemonProcess, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.otheruser import talk_as

NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")


def _tool_result(model: ScriptedModelServer, marker: str) -> dict[str, Any]:
    request = next(
        r
        for r in model.requests
        if marker in str(r["messages"]) and r["messages"][-1]["role"] == "tool"
    )
    result: dict[str, Any] = json.loads(request["messages"][-1]["content"])
    return result


def _owner_turn(daemon: DaemonProcess, message: str) -> str:
    with daemon.client() as c:
        sid: str = c.call("session.create")["id"]
        c.call("session.send", {"session_id": sid, "message": message, "wait": True}, timeout=30)
    return sid


def _as_member(daemon: DaemonProcess, method: str, params: dict[str, Any]) -> Any:
    out = talk_as(
        NOBODY.pw_uid, NOBODY.pw_gid, daemon.socket, [[0, 1, method, [params]]], timeout=30
    )
    [(error, result)] = [(m[2], m[3]) for m in out["received"] if m[0] == 1]
    assert error is None, error
    return result


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=lambda request: reply("done")) as server:
        yield server


@pytest.fixture
def workspace() -> Path:
    return short_tmpdir("cw-")


def _start(start: Any, model: ScriptedModelServer, workspace: Path) -> DaemonProcess:
    daemon = start_cron(
        start,
        model,
        f"socket:\n  group: {NOGROUP.gr_name}\nterminal:\n  cwd: {workspace}\n",
    )
    os.chmod(daemon.socket.parent, 0o755)
    return daemon


# --- workdir ----------------------------------------------------------------------------------


def test_a_model_made_job_with_workdir_outside_the_workspace_is_refused(
    start: Any, model: ScriptedModelServer, workspace: Path
) -> None:
    daemon = _start(start, model, workspace)
    create = {"action": "create", "schedule": "1h", "prompt": "tidy up", "workdir": "/"}
    model.push(call_tools(tool_call("cronjob", create)), reply("could not"))
    _owner_turn(daemon, "WORKDIR-ROOT")
    result = _tool_result(model, "WORKDIR-ROOT")
    assert result["success"] is False
    assert "outside this session's workspace" in result["error"], result
    assert daemon.call("cron.list")["jobs"] == []


def test_a_model_made_job_works_in_its_sessions_workspace(
    start: Any, model: ScriptedModelServer, workspace: Path
) -> None:
    (workspace / "sub").mkdir()
    daemon = _start(start, model, workspace)
    model.push(
        call_tools(tool_call("cronjob", {"action": "create", "schedule": "1h", "prompt": "a"})),
        call_tools(
            tool_call(
                "cronjob",
                {
                    "action": "create",
                    "schedule": "1h",
                    "prompt": "b",
                    "workdir": f"{workspace}/sub",
                },
            )
        ),
        reply("done"),
    )
    _owner_turn(daemon, "WORKDIR-INSIDE")
    jobs = daemon.call("cron.list")["jobs"]
    assert sorted(j["workdir"] for j in jobs) == [str(workspace), str(workspace / "sub")]


def test_the_owner_may_still_choose_any_workdir_through_cron_create(
    start: Any, model: ScriptedModelServer, workspace: Path
) -> None:
    daemon = _start(start, model, workspace)
    job = daemon.call("cron.create", {"schedule": "1h", "prompt": "x", "workdir": "/"})
    assert job["workdir"] == "/"


# --- a member's jobs --------------------------------------------------------------------------


@needs_root
def test_a_members_job_cannot_deliver_into_the_owners_session(
    start: Any, model: ScriptedModelServer, workspace: Path
) -> None:
    daemon = _start(start, model, workspace)
    model.push(reply("owner here"))
    owner_sid = _owner_turn(daemon, "OWNER-FIRST")
    member_sid = _as_member(daemon, "session.create", {})["id"]
    attempts = {
        "MEMBER-DELIVER-1": {"deliver": f"session:{owner_sid}"},
        "MEMBER-DELIVER-2": {"deliver": f"origin,session:{owner_sid}"},
    }
    for marker, fields in attempts.items():
        create = {"action": "create", "schedule": "1h", "prompt": "x", **fields}
        model.push(call_tools(tool_call("cronjob", create)), reply("no"))
        _as_member(
            daemon, "session.send", {"session_id": member_sid, "message": marker, "wait": True}
        )
        result = _tool_result(model, marker)
        assert result["success"] is False and owner_sid in result["error"], (marker, result)
    assert daemon.call("cron.list")["jobs"] == []
    # nor by changing a job it may have
    model.push(
        call_tools(tool_call("cronjob", {"action": "create", "schedule": "1h", "prompt": "y"})),
        reply("made"),
    )
    _as_member(
        daemon, "session.send", {"session_id": member_sid, "message": "MEMBER-OK", "wait": True}
    )
    job_id = _tool_result(model, "MEMBER-OK")["job"]["id"]
    change = {"action": "update", "job_id": job_id, "deliver": f"session:{owner_sid}"}
    model.push(call_tools(tool_call("cronjob", change)), reply("no"))
    _as_member(
        daemon, "session.send", {"session_id": member_sid, "message": "MEMBER-EDIT", "wait": True}
    )
    result = _tool_result(model, "MEMBER-EDIT")
    assert result["success"] is False and owner_sid in result["error"], result
    assert daemon.call("cron.get", {"job_id": job_id})["job"]["deliver"] == "origin"


@needs_root
def test_a_members_job_runs_as_the_member_and_delivers_only_to_its_sessions(
    start: Any, model: ScriptedModelServer, workspace: Path
) -> None:
    daemon = _start(start, model, workspace)
    model.push(reply("owner here"))
    owner_sid = _owner_turn(daemon, "OWNER-SECOND")
    member_sid = _as_member(daemon, "session.create", {})["id"]
    create = {"action": "create", "schedule": "every 1h", "prompt": "MEMBER-JOB report"}
    model.push(call_tools(tool_call("cronjob", create)), reply("scheduled"))
    _as_member(
        daemon, "session.send", {"session_id": member_sid, "message": "MEMBER-MAKE", "wait": True}
    )
    job_id = _tool_result(model, "MEMBER-MAKE")["job"]["id"]
    # the member's tool sees its own job, not the owner's
    daemon.call("cron.create", {"schedule": "3h", "prompt": "owner's own"})
    model.push(call_tools(tool_call("cronjob", {"action": "list"})), reply("listed"))
    _as_member(
        daemon, "session.send", {"session_id": member_sid, "message": "MEMBER-LIST", "wait": True}
    )
    assert [j["id"] for j in _tool_result(model, "MEMBER-LIST")["jobs"]] == [job_id]
    # a job stored with the owner's session as its target (as one made before the check at
    # creation would be): the run is refused delivery there, and nothing reaches it
    with sqlite3.connect(daemon.home / "state.db") as db:
        db.execute(
            "UPDATE cron_jobs SET doc = json_set(doc, '$.deliver', ?) WHERE id = ?",
            (f"origin,session:{owner_sid}", job_id),
        )
    before = daemon.call("session.history", {"session_id": owner_sid})["messages"]
    model.push(reply("MEMBER-REPORT-TEXT"))
    advance(daemon, HOUR)
    [run] = daemon.call("cron.runs", {"job_id": job_id})["runs"]
    assert run["status"] == "delivery_failed" and "another user" in run["error"], run
    assert daemon.call("session.history", {"session_id": owner_sid})["messages"] == before
    member_history = daemon.call("session.history", {"session_id": member_sid})["messages"]
    assert "MEMBER-REPORT-TEXT" in member_history[-1]["content"]
    run_session = daemon.call("session.get", {"session_id": run["session_id"]})
    assert run_session["owner_uid"] == NOBODY.pw_uid
    assert run_session["cwd"] == str(workspace)


# --- orphaned jobs ----------------------------------------------------------------------------


def test_a_job_whose_origin_session_was_deleted_is_listed_as_orphaned(
    start: Any, model: ScriptedModelServer, workspace: Path
) -> None:
    daemon = _start(start, model, workspace)
    create = {"action": "create", "schedule": "every 1h", "prompt": "ORPHAN", "name": "orphan"}
    model.push(call_tools(tool_call("cronjob", create)), reply("scheduled"))
    sid = _owner_turn(daemon, "MAKE-ORPHAN")
    kept = daemon.call("cron.create", {"schedule": "1h", "prompt": "kept", "name": "kept"})
    assert [j["orphaned"] for j in daemon.call("cron.list")["jobs"]] == [False, False]
    daemon.call("session.delete", {"session_id": sid})
    listed = {j["name"]: j["orphaned"] for j in daemon.call("cron.list")["jobs"]}
    assert listed == {"orphan": True, "kept": False}
    job_id = next(j["id"] for j in daemon.call("cron.list")["jobs"] if j["name"] == "orphan")
    assert daemon.call("cron.get", {"job_id": job_id})["job"]["orphaned"] is True
    shown = subprocess.run(
        [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket), "cron", "list"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    line = {
        j: next(x for x in shown.stdout.splitlines() if x.startswith(j))
        for j in (job_id, kept["id"])
    }
    assert "orphaned" in line[job_id] and "orphaned" not in line[kept["id"]], shown.stdout
    text = daemon.call("command.run", {"line": "/cron list"})["output"]
    assert "orphaned" in text and kept["id"] in text
