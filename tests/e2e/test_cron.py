"""Scheduled jobs end to end: a real hermesd on the test clock, the scripted model.

Every schedule form, repeat counts, pause/resume, [SILENT], toolsets off in a run, a run
into a session two clients watch, approvals in a run, missed runs. The scheduler's clock is
the test clock (tests/support/cron.py): time moves only when a test moves it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.cron import HOUR, MINUTE, T0, advance, prompts_seen, start_cron
from tests.support.modelserver import ScriptedModelServer, reply


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
