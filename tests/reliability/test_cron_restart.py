"""A scheduled job never runs twice for one due time, whatever happens to the daemon.

The daemon is killed with SIGKILL (no clean-up at all) after a run finished and in the middle
of a run, then started again on the same HERMES_HOME and test clock.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from tests.support.cron import HOUR, MINUTE, T0, advance, prompts_seen, start_cron
from tests.support.daemon import DaemonProcess
from tests.support.modelserver import ScriptedModelServer, reply


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=lambda request: reply("done")) as server:
        yield server


def _kill(daemon: DaemonProcess) -> None:
    daemon.signal(signal.SIGKILL)
    daemon.proc.wait(10)


def _wait_for(predicate, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_a_finished_run_is_not_repeated_after_kill_9_and_restart(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "KILL-AFTER"})
    assert advance(daemon, HOUR)["started"] == [job["id"]]
    _kill(daemon)
    again = start_cron(start, model, home=daemon.home, clock=T0 + HOUR)
    assert advance(again, 0)["started"] == []
    assert advance(again, 59 * MINUTE)["started"] == []
    assert prompts_seen(model, "KILL-AFTER") == 1
    assert advance(again, MINUTE)["started"] == [job["id"]]
    assert prompts_seen(model, "KILL-AFTER") == 2


def test_a_run_killed_midway_is_closed_as_interrupted_and_not_run_again(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "KILL-DURING"})
    model.push(reply("too late", delay=20))
    advance(daemon, HOUR, wait=False)
    _wait_for(lambda: prompts_seen(model, "KILL-DURING") == 1)
    _kill(daemon)
    again = start_cron(start, model, home=daemon.home, clock=T0 + HOUR + MINUTE)
    job_after = again.call("cron.get", {"job_id": job["id"]})
    assert job_after["job"]["state"] == "scheduled"
    assert job_after["job"]["last_status"] == "error"
    assert "interrupted" in job_after["job"]["last_error"]
    assert job_after["runs"][0]["status"] == "error"
    assert job_after["job"]["next_run_at"].startswith("2026-03-02T10:00")
    assert advance(again, 30 * MINUTE)["started"] == []
    assert prompts_seen(model, "KILL-DURING") == 1
    assert advance(again, 30 * MINUTE)["started"] == [job["id"]]
    assert prompts_seen(model, "KILL-DURING") == 2


def test_a_claim_held_by_a_live_daemon_is_left_alone(start, model) -> None:
    """Two daemons on one state.db: the second neither runs nor steals the first's run."""
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "TWO-DAEMONS"})
    model.push(reply("slow answer", delay=3))
    advance(daemon, HOUR, wait=False)
    _wait_for(lambda: prompts_seen(model, "TWO-DAEMONS") == 1)
    second = start_cron(start, model, home=daemon.home, clock=T0 + HOUR)
    assert advance(second, 0)["started"] == []
    assert second.call("cron.get", {"job_id": job["id"]})["job"]["state"] == "running"
    _wait_for(lambda: daemon.call("cron.get", {"job_id": job["id"]})["job"]["state"] == "scheduled")
    assert prompts_seen(model, "TWO-DAEMONS") == 1
    assert daemon.call("cron.get", {"job_id": job["id"]})["job"]["last_status"] == "ok"


def test_a_run_cut_by_sigterm_is_recorded_as_stopped_and_not_run_again(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "TERM-DURING"})
    model.push(reply("too late", delay=20))
    advance(daemon, HOUR, wait=False)
    _wait_for(lambda: prompts_seen(model, "TERM-DURING") == 1)
    assert daemon.stop() == 0
    again = start_cron(start, model, home=daemon.home, clock=T0 + HOUR + MINUTE)
    shown = again.call("cron.get", {"job_id": job["id"]})
    assert shown["runs"][0]["status"] == "error"
    assert shown["runs"][0]["error"] == "hermesd stopped during this run"
    assert shown["job"]["state"] == "scheduled"
    assert advance(again, 0)["started"] == []
    assert prompts_seen(model, "TERM-DURING") == 1


def test_pausing_during_a_run_leaves_the_job_paused_after_it(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "PAUSE-DURING"})
    model.push(reply("finished", delay=2))
    advance(daemon, HOUR, wait=False)
    _wait_for(lambda: prompts_seen(model, "PAUSE-DURING") == 1)
    during = daemon.call("cron.pause", {"job_id": job["id"]})
    assert (during["state"], during["enabled"]) == ("running", False)
    daemon.call("cron.update", {"job_id": job["id"], "prompt": "PAUSE-DURING edited"})
    _wait_for(lambda: daemon.call("cron.get", {"job_id": job["id"]})["job"]["state"] != "running")
    after = daemon.call("cron.get", {"job_id": job["id"]})
    assert (after["job"]["state"], after["job"]["last_status"]) == ("paused", "ok")
    assert after["job"]["prompt"] == "PAUSE-DURING edited"
    assert after["runs"][0]["output"] == "finished"
    assert advance(daemon, 3 * HOUR)["started"] == []
