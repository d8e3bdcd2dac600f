"""Every way into the scheduler: the model's cronjob tool, /cron, hermesctl cron, the
reference's jobs.json, and the test hook's refusal outside tests."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.cron import HOUR, advance, start_cron
from tests.support.daemon import DaemonProcess, run_hermesctl
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=lambda request: reply("done")) as server:
        yield server


def _ctl(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_hermesctl(["--socket", str(daemon.socket), "cron", *args])


def _tool_result(model: ScriptedModelServer, marker: str) -> dict[str, Any]:
    request = next(
        r
        for r in model.requests
        if marker in str(r["messages"]) and r["messages"][-1]["role"] == "tool"
    )
    result: dict[str, Any] = json.loads(request["messages"][-1]["content"])
    return result


def test_the_model_schedules_a_job_that_answers_back_into_its_session(start, model) -> None:
    daemon = start_cron(start, model)
    create = {"action": "create", "schedule": "every 1h", "prompt": "TOOL-1 water the plants"}
    model.push(call_tools(tool_call("cronjob", create)), reply("scheduled"))
    with daemon.client() as c:
        sid = c.call("session.create")["id"]
        c.call("session.send", {"session_id": sid, "message": "MAKE-TOOL-1", "wait": True})
    created = _tool_result(model, "MAKE-TOOL-1")
    assert created["success"] is True
    job = daemon.call("cron.get", {"job_id": created["job"]["id"]})["job"]
    assert (job["deliver"], job["origin"]["session_id"]) == ("origin", sid)
    model.push(reply("plants watered"))
    advance(daemon, HOUR)
    history = daemon.call("session.history", {"session_id": sid})["messages"]
    assert "plants watered" in history[-1]["content"]


def test_the_model_lists_then_removes_with_the_alias(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "TOOL-2"})
    model.push(
        call_tools(tool_call("cronjob_manage", {"action": "list"})),
        call_tools(tool_call("cronjob_manage", {"action": "remove", "job_id": job["id"]})),
        reply("removed it"),
    )
    with daemon.client() as c:
        sid = c.call("session.create")["id"]
        c.call("session.send", {"session_id": sid, "message": "LIST-TOOL-2", "wait": True})
    listed = _tool_result(model, "LIST-TOOL-2")
    assert [j["id"] for j in listed["jobs"]] == [job["id"]]
    assert daemon.call("cron.list")["jobs"] == []


def test_the_tool_reports_bad_input_to_the_model(start, model) -> None:
    daemon = start_cron(start, model)
    model.push(
        call_tools(tool_call("cronjob", {"action": "create", "schedule": "whenever"})),
        call_tools(tool_call("cronjob", {"action": "pause"})),
        call_tools(tool_call("cronjob", {"action": "pause", "job_id": "guessed"})),
        reply("ok"),
    )
    with daemon.client() as c:
        sid = c.call("session.create")["id"]
        c.call("session.send", {"session_id": sid, "message": "BAD-TOOL-3", "wait": True})
    results = [
        json.loads(m["content"]) for m in model.last_request["messages"] if m["role"] == "tool"
    ]
    assert [r["success"] for r in results] == [False, False, False]
    assert "prompt is required" in results[0]["error"] or "schedule" in results[0]["error"]
    assert "list jobs first" in results[1]["error"]
    assert "no cron job 'guessed'" in results[2]["error"]
    assert "Never guess job IDs" in next(
        t["function"]["description"]
        for t in model.last_request["tools"]
        if t["function"]["name"] == "cronjob"
    )


def test_slash_cron_adds_lists_and_pauses(start, model) -> None:
    daemon = start_cron(start, model)
    added = daemon.call("command.run", {"line": "/cron add '0 9 * * *' SLASH-1 morning news"})
    assert added["ok"] is True
    job = daemon.call("cron.list")["jobs"][0]
    assert (job["schedule_display"], job["prompt"]) == ("0 9 * * *", "SLASH-1 morning news")
    listed = daemon.call("command.run", {"line": "/cron"})["output"]
    assert job["id"] in listed and "scheduled" in listed
    paused = daemon.call("command.run", {"line": f"/cron pause {job['id']}"})["output"]
    assert paused.startswith("Paused:")
    wrong = daemon.call("command.run", {"line": "/cron add soon x"})["output"]
    assert "invalid schedule 'soon'" in wrong


def test_hermesctl_cron_manages_a_job_from_add_to_remove(start, model) -> None:
    daemon = start_cron(start, model)
    added = _ctl(daemon, "add", "every 2h", "CTL-1", "rotate", "logs", "--name", "rotate")
    assert added.returncode == 0, added.stderr
    job_id = added.stdout.split()[0]
    assert "every 120m" in added.stdout
    assert job_id in _ctl(daemon, "list").stdout
    assert "paused" in _ctl(daemon, "pause", job_id).stdout
    assert "scheduled" in _ctl(daemon, "resume", job_id).stdout
    ran = _ctl(daemon, "run", job_id)
    assert ran.stdout.startswith("started: ")
    deadline = time.monotonic() + 20
    while "done" not in (logs := _ctl(daemon, "logs", job_id).stdout):
        assert time.monotonic() < deadline, logs
        time.sleep(0.1)
    assert "manual" in logs
    shown = json.loads(_ctl(daemon, "show", job_id, "--json").stdout)
    assert shown["job"]["name"] == "rotate"
    assert shown["job"]["state"] == "scheduled"  # a manual run leaves the schedule alone
    assert _ctl(daemon, "remove", job_id).returncode == 0
    assert "no cron jobs" in _ctl(daemon, "list").stdout


def test_hermesctl_cron_says_what_is_wrong_with_a_schedule(start, model) -> None:
    daemon = start_cron(start, model)
    bad = _ctl(daemon, "add", "tomorrowish", "x")
    assert bad.returncode != 0
    assert "invalid schedule 'tomorrowish'" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = _ctl(daemon, "show", "nope")
    assert missing.returncode != 0 and "no cron job 'nope'" in missing.stderr


def test_a_reference_jobs_json_is_imported_once(start, model, home) -> None:
    (home / "cron").mkdir(parents=True)
    reference = {
        "jobs": [
            {
                "id": "abc123def456",
                "name": "nightly",
                "prompt": "REF-1 summarize",
                "skills": [],
                "schedule": {"kind": "cron", "expr": "0 3 * * *", "display": "0 3 * * *"},
                "repeat": {"times": None, "completed": 7},
                "enabled": True,
                "state": "scheduled",
                "next_run_at": "2026-03-03T03:00:00+00:00",
                "deliver": "local",
            },
            {"id": "broken", "schedule": {"kind": "fortnightly"}},
        ],
        "updated_at": "2026-03-01T00:00:00+00:00",
    }
    (home / "cron" / "jobs.json").write_text(json.dumps(reference))
    daemon = start_cron(start, model, home=home)
    jobs = daemon.call("cron.list")["jobs"]
    assert [j["id"] for j in jobs] == ["abc123def456"]
    assert jobs[0]["repeat"] == {"times": None, "completed": 7}
    assert jobs[0]["next_run_at"] == "2026-03-03T03:00:00+00:00"
    assert "not importing job 'broken'" in daemon.log()
    daemon.call("cron.remove", {"job_id": "abc123def456"})
    daemon.stop()
    again = start_cron(start, model, home=home)
    assert [j["id"] for j in again.call("cron.list")["jobs"]] == ["abc123def456"]
    assert again.call("cron.list")["jobs"][0]["repeat"]["completed"] == 7


def test_no_rpc_method_moves_the_clock(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "HOURLY"})
    for params in ({"advance": 3600}, {"advance": 3600, "wait": True}):
        with pytest.raises(RpcError) as err:
            daemon.call("cron.clock", params)
        assert err.value.code == Codes.METHOD_NOT_FOUND
    assert "cron.clock" not in daemon.call("hello")["methods"]
    assert daemon.call("cron.get", {"job_id": job["id"]})["job"]["last_run_at"] is None
    assert advance(daemon, HOUR)["started"] == [job["id"]]  # the test's own channel does


def test_the_daemon_keeps_the_clock_channel_from_the_processes_it_starts(start, model) -> None:
    daemon = start_cron(start, model, "terminal:\n  cwd: /tmp\n")
    # readlink succeeds only while the daemon holds the descriptor (listing the whole fd table
    # races with descriptors the daemon opens and closes meanwhile).
    channel = os.readlink(f"/proc/{daemon.proc.pid}/fd/{_clock_fd(daemon)}")
    assert channel.startswith("socket:")
    command = "for f in /proc/self/fd/*; do readlink $f; done"
    out = daemon.call("tools.call", {"name": "terminal", "args": {"command": command}})
    assert channel not in json.loads(out["result"])["output"]
    assert advance(daemon, 0)["started"] == []  # and the daemon still answers on it


def _clock_fd(daemon: DaemonProcess) -> int:
    """The descriptor number the daemon was told (HERMESD_TEST_CLOCK_FD)."""
    environ = Path(f"/proc/{daemon.proc.pid}/environ").read_bytes().split(b"\0")
    prefix = b"HERMESD_TEST_CLOCK_FD="
    return int(next(v for v in environ if v.startswith(prefix))[len(prefix) :])


def test_cron_methods_are_for_the_owner_only(start, model) -> None:
    import grp
    import os
    import pwd

    from tests.support.otheruser import talk_as

    nobody = pwd.getpwnam("nobody")
    group = grp.getgrgid(nobody.pw_gid).gr_name
    daemon = start_cron(start, model, f"socket:\n  group: {group}\n")
    os.chmod(daemon.socket.parent, 0o755)
    out = talk_as(
        nobody.pw_uid,
        nobody.pw_gid,
        daemon.socket,
        [
            [0, 1, "cron.create", [{"schedule": "1h", "prompt": "x"}]],
            [0, 2, "cron.list", []],
        ],
    )
    replies = {m[1]: m for m in out["received"] if m[0] == 1}
    assert [replies[i][2]["code"] for i in (1, 2)] == [Codes.PERMISSION_DENIED] * 2
    assert daemon.call("cron.list")["jobs"] == []
