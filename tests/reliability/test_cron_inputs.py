"""Bad input to the scheduler: a structured error, the traceback (if any) only in the log, the
daemon still serving. Covers the cron.* methods and a broken reference jobs.json."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.cron import advance, start_cron
from tests.support.daemon import DaemonProcess
from tests.support.modelserver import ScriptedModelServer, reply


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=lambda request: reply("done")) as server:
        yield server


def _refused(daemon: DaemonProcess, method: str, params: dict[str, object], code: str) -> str:
    with pytest.raises(RpcError) as err:
        daemon.call(method, params)
    assert err.value.code == code, (method, params, err.value.message)
    return err.value.message


def test_bad_job_fields_are_refused_with_the_field_named(start, model) -> None:
    daemon = start_cron(start, model)
    bad = Codes.INVALID_PARAMS
    cases = [
        ({"schedule": "1h", "prompt": "x", "repeat": "twice"}, "repeat"),
        ({"schedule": "1h", "prompt": "x", "repeat": True}, "repeat"),
        ({"schedule": "1h", "prompt": "x", "skills": "not-a-list"}, "skills"),
        ({"schedule": "1h", "prompt": "x", "enabled_toolsets": [1, 2]}, "enabled_toolsets"),
        ({"schedule": "1h", "prompt": "x", "workdir": "relative/dir"}, "absolute"),
        ({"schedule": "1h", "prompt": "x", "workdir": "/no/such/dir"}, "not a directory"),
        ({"schedule": "1h", "prompt": "x" * 100_001}, "longer than"),
        ({"schedule": "1h", "prompt": "x", "name": "n" * 201}, "longer than"),
        ({"schedule": "1h", "prompt": "   "}, "prompt is required"),
        ({"schedule": 5, "prompt": "x"}, "schedule"),
        ({"schedule": "1h", "prompt": "x", "bogus": 1}, "bogus"),
        ({"schedule": "9" * 400 + "m", "prompt": "x"}, "at most 10 years"),
        ({"schedule": "every 99999999999999h", "prompt": "x"}, "interval"),
        ({"schedule": "*/0 * * * *", "prompt": "x"}, "cron expression"),
        ({"schedule": "0 9 * * * * *", "prompt": "x"}, "cron expression"),
    ]
    for params, needle in cases:
        message = _refused(daemon, "cron.create", params, bad)
        assert needle in message, (params, message)
    assert daemon.call("cron.list")["jobs"] == []
    assert "Traceback" not in daemon.log()


def test_acting_on_a_job_that_does_not_exist_is_not_found(start, model) -> None:
    daemon = start_cron(start, model)
    for method in ("cron.get", "cron.pause", "cron.resume", "cron.remove", "cron.run", "cron.runs"):
        message = _refused(daemon, method, {"job_id": "nope"}, Codes.NOT_FOUND)
        assert "no cron job 'nope'" in message
    _refused(daemon, "cron.update", {"job_id": "nope", "prompt": "y"}, Codes.NOT_FOUND)
    assert daemon.call("ping")["pong"] is True


def test_a_completed_job_cannot_be_paused_or_resumed_until_rescheduled(start, model) -> None:
    daemon = start_cron(start, model)
    job = daemon.call("cron.create", {"schedule": "1m", "prompt": "ONCE"})
    advance(daemon, 60)
    assert "has completed" in _refused(
        daemon, "cron.pause", {"job_id": job["id"]}, Codes.INVALID_PARAMS
    )
    assert "has completed" in _refused(
        daemon, "cron.resume", {"job_id": job["id"]}, Codes.INVALID_PARAMS
    )
    again = daemon.call("cron.update", {"job_id": job["id"], "schedule": "every 5m"})
    assert again["state"] == "scheduled"


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"jobs": "no"}',
        '[1, 2, "three"]',
        '{"jobs": [{"id": 5, "schedule": {}}, {"id": "x", "schedule": {"kind": "cron", '
        '"expr": "nonsense"}}, {"id": "y", "schedule": {"kind": "interval", "minutes": "x"}}]}',
    ],
)
def test_a_broken_reference_jobs_json_is_skipped_with_a_warning(
    start, model, home, content
) -> None:
    (home / "cron").mkdir(parents=True)
    (home / "cron" / "jobs.json").write_text(content)
    daemon = start_cron(start, model, home=home)
    assert daemon.call("cron.list")["jobs"] == []
    log = daemon.log()
    assert "cannot import" in log or "not importing job" in log
    assert "Traceback" not in log


def test_a_stored_job_with_an_impossible_schedule_is_paused_and_the_others_run(
    start, model
) -> None:
    import json
    import sqlite3

    daemon = start_cron(start, model)
    broken = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "BROKEN"})
    fine = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "FINE"})
    daemon.stop()
    db = sqlite3.connect(daemon.home / "state.db")
    doc = json.loads(
        db.execute("SELECT doc FROM cron_jobs WHERE id = ?", (broken["id"],)).fetchone()[0]
    )
    doc["schedule"]["minutes"] = 0
    db.execute("UPDATE cron_jobs SET doc = ? WHERE id = ?", (json.dumps(doc), broken["id"]))
    db.commit()
    db.close()
    again = start_cron(start, model, home=daemon.home)
    started = advance(again, 3600)["started"]
    assert started == [fine["id"]]
    paused = again.call("cron.get", {"job_id": broken["id"]})["job"]
    assert (paused["state"], paused["last_status"]) == ("paused", "error")
    assert "cannot be computed" in paused["last_error"]
    assert again.call("ping")["pong"] is True


def test_an_unknown_cron_timezone_is_a_configuration_error(home) -> None:
    import subprocess
    import sys

    (home / "config.yaml").write_text("cron:\n  timezone: Mars/Olympus_Mons\n")
    check = subprocess.run(
        [sys.executable, "-m", "hermesd", "--check-config"],
        env={**__import__("os").environ, "HERMES_HOME": str(home)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 78
    assert "cron.timezone: unknown timezone 'Mars/Olympus_Mons'" in check.stderr
    assert "Traceback" not in check.stderr
