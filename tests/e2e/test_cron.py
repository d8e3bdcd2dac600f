"""Scheduled jobs end to end: a real hermesd on the test clock, the scripted model.

Every schedule form, repeat counts, pause/resume, [SILENT], toolsets off in a run, a run
into a session two clients watch, approvals in a run, missed runs. The scheduler's clock is
the test clock (tests/support/cron.py): time moves only when a test moves it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from hermesctl.client import Client
from hermesd.rpc.protocol import Codes, RpcError
from tests.support.cron import HOUR, MINUTE, T0, advance, prompts_seen, start_cron
from tests.support.daemon import DaemonProcess
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    reply,
    tool_call,
)


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=lambda request: reply("done")) as server:
        yield server


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def test_a_delay_runs_once_after_that_delay(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "30m", "prompt": "DELAY-1 check the logs"})
    assert job["schedule"]["kind"] == "once"
    assert job["next_run_at"] == _iso(T0 + 30 * MINUTE)
    assert job["repeat"] == {"times": 1, "completed": 0}
    assert advance(daemon, 29 * MINUTE)["started"] == []
    assert advance(daemon, MINUTE)["started"] == [job["id"]]
    done = daemon.call("cron.get", {"job_id": job["id"]})["job"]
    assert done["state"] == "completed"
    assert done["last_status"] == "ok"
    assert done["next_run_at"] is None
    assert advance(daemon, 10 * HOUR)["started"] == []
    assert prompts_seen(model, "DELAY-1") == 1


def test_an_interval_runs_every_period(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 2h", "prompt": "EVERY-2H"})
    assert job["schedule"] == {"kind": "interval", "minutes": 120, "display": "every 120m"}
    for _ in range(3):
        assert advance(daemon, 2 * HOUR)["started"] == [job["id"]]
    job = daemon.call("cron.get", {"job_id": job["id"]})["job"]
    assert job["repeat"]["completed"] == 3
    assert job["state"] == "scheduled"
    assert job["next_run_at"] == _iso(T0 + 8 * HOUR)


def test_a_cron_expression_runs_at_its_times(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "0 9 * * *", "prompt": "DAILY-9"})
    assert job["schedule"]["kind"] == "cron"
    assert job["next_run_at"] == _iso(T0 + HOUR)  # 09:00 the same day
    assert advance(daemon, HOUR)["started"] == [job["id"]]
    job = daemon.call("cron.get", {"job_id": job["id"]})["job"]
    assert job["next_run_at"] == _iso(T0 + 25 * HOUR)


def test_a_naive_timestamp_is_read_in_cron_timezone(start, model) -> None:
    daemon = start_cron(start, model, tz="Asia/Kolkata")
    job = daemon.call("cron.create", {"schedule": "2026-03-02T16:00", "prompt": "TS-NAIVE"})
    # 16:00 in Kolkata (UTC+5:30) is 10:30 UTC
    due = datetime.fromisoformat(job["next_run_at"]).timestamp()
    assert due == T0 + 2.5 * HOUR
    assert job["schedule"]["display"] == "once at 2026-03-02 16:00"


def test_a_timestamp_with_an_offset_runs_then(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call(
        "cron.create", {"schedule": "2026-03-02T09:15:00+00:00", "prompt": "TS-AWARE"}
    )
    assert advance(daemon, HOUR)["started"] == []
    assert advance(daemon, 15 * MINUTE)["started"] == [job["id"]]


def test_an_invalid_schedule_is_refused_naming_the_forms(start, model) -> None:
    daemon = start_cron(start, model)
    for schedule in ("soon", "every banana", "61 * * * *", "2026-13-45T10:00", "", "1 2 3"):
        with pytest.raises(RpcError) as err:
            daemon.call("cron.create", {"schedule": schedule, "prompt": "x"})
        assert err.value.code == Codes.INVALID_PARAMS, schedule
        assert "'30m'" in err.value.message and "'0 9 * * *'" in err.value.message, schedule
    with pytest.raises(RpcError, match="at least 1 minute"):
        daemon.call("cron.create", {"schedule": "every 0m", "prompt": "x"})
    with pytest.raises(RpcError, match="in the past"):
        daemon.call("cron.create", {"schedule": "2020-01-01T00:00", "prompt": "x"})
    assert daemon.call("cron.list")["jobs"] == []
    assert "Traceback" not in daemon.log()


def _job(daemon: DaemonProcess, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = daemon.call("cron.get", {"job_id": job_id})["job"]
    return job


def _runs(daemon: DaemonProcess, job_id: str) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = daemon.call("cron.runs", {"job_id": job_id})["runs"]
    return runs


def _wait_run_finished(daemon: DaemonProcess, job_id: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = _runs(daemon, job_id)
        if runs and runs[0]["status"] != "running":
            return runs[0]
        time.sleep(0.05)
    raise AssertionError(f"the run of {job_id} did not finish: {_runs(daemon, job_id)}")


def _wait_pending(client: Client, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = client.call("approvals.pending")["pending"]
        if pending:
            return dict(pending[0])
        time.sleep(0.05)
    raise AssertionError("no pending approval appeared")


def test_repeat_stops_a_recurring_job_after_that_many_runs(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "REPEAT-2", "repeat": 2})
    assert job["repeat"] == {"times": 2, "completed": 0}
    assert advance(daemon, HOUR)["started"] == [job["id"]]
    assert advance(daemon, HOUR)["started"] == [job["id"]]
    assert advance(daemon, HOUR)["started"] == []
    done = _job(daemon, job["id"])
    assert done["state"] == "completed"
    assert done["repeat"] == {"times": 2, "completed": 2}
    assert prompts_seen(model, "REPEAT-2") == 2


def test_a_paused_job_does_not_fire_and_resumes_from_its_next_time(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "PAUSED-1"})
    paused = daemon.call("cron.pause", {"job_id": job["id"], "reason": "holiday"})
    assert (paused["state"], paused["enabled"], paused["paused_reason"]) == (
        "paused",
        False,
        "holiday",
    )
    assert advance(daemon, 3 * HOUR + 10 * MINUTE)["started"] == []
    resumed = daemon.call("cron.resume", {"job_id": job["id"]})
    assert resumed["state"] == "scheduled"
    assert resumed["next_run_at"] == _iso(T0 + 4 * HOUR)  # the missed hours are skipped
    assert advance(daemon, 50 * MINUTE)["started"] == [job["id"]]
    assert prompts_seen(model, "PAUSED-1") == 1


def test_a_run_is_a_cron_session_with_the_prompt(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "SESSION-1 report"})
    advance(daemon, HOUR)
    run = _runs(daemon, job["id"])[0]
    assert run["session_id"] == f"cron_{job['id']}_20260302_090000"
    assert (run["status"], run["kind"], run["output"]) == ("ok", "on_time", "done")
    session = daemon.call("session.get", {"session_id": run["session_id"]})
    assert session["platform"] == "cron"
    history = daemon.call("session.history", {"session_id": run["session_id"]})["messages"]
    assert "SESSION-1 report" in history[0]["content"]
    assert history[-1]["content"] == "done"
    assert _job(daemon, job["id"])["last_session"] == run["session_id"]


def test_a_silent_answer_is_kept_but_not_delivered(start, model) -> None:
    daemon = start_cron(start, model)
    inbox = daemon.call("session.create", {"title": "inbox"})["id"]
    job = daemon.call(
        "cron.create",
        {"schedule": "every 1h", "prompt": "SILENT-1", "deliver": f"session:{inbox}"},
    )
    model.push(reply("[SILENT]"))
    advance(daemon, HOUR)
    silent = _runs(daemon, job["id"])[0]
    assert (silent["status"], silent["silent"], silent["output"]) == ("ok", True, "[SILENT]")
    assert daemon.call("session.history", {"session_id": inbox})["messages"] == []
    model.push(reply("NO_REPLY"))
    advance(daemon, HOUR)
    assert _runs(daemon, job["id"])[0]["silent"] is True
    model.push(reply("Disk is 91% full"))
    advance(daemon, HOUR)
    delivered = daemon.call("session.history", {"session_id": inbox})["messages"]
    assert len(delivered) == 1
    assert "Disk is 91% full" in delivered[0]["content"]
    assert _runs(daemon, job["id"])[0]["silent"] is False


def test_a_run_is_offered_no_cronjob_clarify_or_configured_toolsets(start, model) -> None:
    daemon = start_cron(start, model, "  disabled_toolsets: [skills]\n")
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "TOOLS-1"})
    model.push(call_tools(tool_call("cronjob", {"action": "list"})), reply("ok"))
    advance(daemon, HOUR)
    requests = [r for r in model.requests if "TOOLS-1" in str(r["messages"])]
    offered = {t["function"]["name"] for t in requests[0].get("tools", [])}
    assert offered & {"cronjob", "cronjob_manage", "skills_list", "skill_view"} == set()
    assert "read_file" in offered or "terminal" in offered
    tool_result = next(m for m in requests[1]["messages"] if m["role"] == "tool")
    assert "not available in this turn" in tool_result["content"]
    assert _runs(daemon, job["id"])[0]["status"] == "ok"
    # an ordinary turn is offered the cronjob tool
    with daemon.client() as c:
        sid = c.call("session.create")["id"]
        c.call("session.send", {"session_id": sid, "message": "ORDINARY-1", "wait": True})
    ordinary = next(r for r in model.requests if "ORDINARY-1" in str(r["messages"]))
    names = {t["function"]["name"] for t in ordinary.get("tools", [])}
    assert {"cronjob", "cronjob_manage", "skills_list"} <= names


def test_a_run_into_an_existing_session_is_seen_live_by_every_attached_client(start, model) -> None:
    daemon = start_cron(start, model)
    with daemon.client() as first, daemon.client() as second:
        sid = first.call("session.create", {"title": "watched"})["id"]
        second.call("session.attach", {"session_id": sid})
        job = daemon.call(
            "cron.create", {"schedule": "every 1h", "prompt": "LIVE-1", "session": sid}
        )
        model.push(reply("the live answer"))
        advance(daemon, HOUR)
        for client in (first, second):
            events = []
            while not events or events[-1]["type"] != "turn.finished":
                note = client.next_notification(timeout=10)
                assert note is not None, events
                events.append(note.params[0])
            assert events[0]["type"] == "turn.started"
            assert "LIVE-1" in events[0]["user_message"]
            assert any(e.get("content") == "the live answer" for e in events)
    run = _runs(daemon, job["id"])[0]
    assert run["session_id"] == sid
    history = daemon.call("session.history", {"session_id": sid})["messages"]
    assert history[-1]["content"] == "the live answer"


def test_a_job_naming_a_missing_session_is_refused(start, model) -> None:
    daemon = start_cron(start, model)
    with pytest.raises(RpcError, match="no session 'nope'"):
        daemon.call("cron.create", {"schedule": "1h", "prompt": "x", "session": "nope"})


def test_an_approval_in_a_run_is_answered_from_another_client(start, model, tmp_path) -> None:
    daemon = start_cron(start, model, "terminal:\n  cwd: /tmp\n")
    target = tmp_path / "doomed"
    (target / "sub").mkdir(parents=True)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "APPROVE-1"})
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {target}"})), reply("gone"))
    advance(daemon, HOUR, wait=False)
    with daemon.client() as other:
        pending = _wait_pending(other)
        assert pending["session_id"].startswith(f"cron_{job['id']}_")
        assert pending["command"] == f"rm -r {target}"
        other.call("approvals.respond", {"id": pending["id"], "choice": "once"})
    run = _wait_run_finished(daemon, job["id"])
    assert (run["status"], run["output"]) == ("ok", "gone")
    assert not target.exists()


def test_an_unanswered_approval_in_a_run_times_out_denied(start, model, tmp_path) -> None:
    daemon = start_cron(start, model, "  approval_timeout: 1\nterminal:\n  cwd: /tmp\n")
    target = tmp_path / "kept"
    (target / "sub").mkdir(parents=True)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "TIMEOUT-1"})
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {target}"})), reply("no"))
    advance(daemon, HOUR)
    assert target.exists()
    requests = [r for r in model.requests if "TIMEOUT-1" in str(r["messages"])]
    denial = next(m for m in requests[-1]["messages"] if m["role"] == "tool")["content"]
    assert "timed out" in denial
    assert _runs(daemon, job["id"])[0]["status"] == "ok"


def test_cron_mode_deny_refuses_approvals_in_runs_without_asking(start, model, tmp_path) -> None:
    daemon = start_cron(start, model, "approvals:\n  cron_mode: deny\nterminal:\n  cwd: /tmp\n")
    target = tmp_path / "kept"
    (target / "sub").mkdir(parents=True)
    daemon.call("cron.create", {"schedule": "every 1h", "prompt": "DENY-1"})
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {target}"})), reply("no"))
    advance(daemon, HOUR)
    assert target.exists()
    requests = [r for r in model.requests if "DENY-1" in str(r["messages"])]
    denial = next(m for m in requests[-1]["messages"] if m["role"] == "tool")["content"]
    assert "approvals.cron_mode: deny" in denial


def test_a_run_late_within_the_grace_fires_late(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "GRACE-1"})
    # due at 09:00; the grace of an hourly job is 30 minutes
    assert advance(daemon, HOUR + 25 * MINUTE)["started"] == [job["id"]]
    run = _runs(daemon, job["id"])[0]
    assert (run["kind"], run["missed"]) == ("late", 0)
    assert _job(daemon, job["id"])["next_run_at"] == _iso(T0 + 2 * HOUR)


def test_missed_runs_past_the_grace_collapse_into_one_catch_up_after_a_restart(
    start, model
) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "CATCHUP-1"})
    daemon.stop()
    # down from 08:00 to 13:30: 09:00 … 13:00 were missed
    again = start_cron(start, model, home=daemon.home, clock=T0 + 5.5 * HOUR)
    run = _wait_run_finished(again, job["id"])
    assert (run["kind"], run["missed"], run["status"]) == ("catch_up", 5, "ok")
    assert prompts_seen(model, "CATCHUP-1") == 1
    assert _job(again, job["id"])["next_run_at"] == _iso(T0 + 6 * HOUR)
    assert advance(again, 20 * MINUTE)["started"] == []


def test_catch_up_off_skips_missed_runs(start, model) -> None:
    daemon = start_cron(start, model, "  catch_up_missed: false\n")
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "SKIP-1"})
    assert advance(daemon, 5.5 * HOUR)["started"] == []
    skipped = _job(daemon, job["id"])
    assert "skipped 5 missed run(s)" in skipped["last_error"]
    assert skipped["next_run_at"] == _iso(T0 + 6 * HOUR)
    assert prompts_seen(model, "SKIP-1") == 0


def test_a_one_shot_far_past_due_is_retired_without_running(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "30m", "prompt": "RETIRE-1"})
    daemon.stop()
    again = start_cron(start, model, home=daemon.home, clock=T0 + 2 * HOUR)
    deadline = time.monotonic() + 20
    while _job(again, job["id"])["state"] != "completed" and time.monotonic() < deadline:
        time.sleep(0.05)
    retired = _job(again, job["id"])
    assert (retired["state"], retired["last_status"]) == ("completed", "error")
    assert "retired without running" in retired["last_error"]
    assert prompts_seen(model, "RETIRE-1") == 0
