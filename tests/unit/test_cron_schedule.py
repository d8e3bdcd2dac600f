"""The schedule grammar, next times and the grace, checked against what the reference
(hermes-agent 0.19 ``cron.jobs.parse_schedule`` and its grace) gives for the same input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from hermesd.cron import jobs
from hermesd.cron.schedule import (
    ScheduleError,
    grace_seconds,
    next_time,
    occurrences_between,
    parse_schedule,
)

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", {"kind": "once", "display": "once in 30m"}),
        ("2h", {"kind": "once", "display": "once in 2h"}),
        ("1d", {"kind": "once", "display": "once in 1d"}),
        ("90 minutes", {"kind": "once", "display": "once in 90 minutes"}),
        ("0m", {"kind": "once", "display": "once in 0m"}),
        ("every 30m", {"kind": "interval", "minutes": 30, "display": "every 30m"}),
        ("every 2h", {"kind": "interval", "minutes": 120, "display": "every 120m"}),
        ("every 1 day", {"kind": "interval", "minutes": 1440, "display": "every 1440m"}),
        ("0 9 * * *", {"kind": "cron", "expr": "0 9 * * *", "display": "0 9 * * *"}),
        ("*/15 * * * 1-5", {"kind": "cron", "expr": "*/15 * * * 1-5", "display": "*/15 * * * 1-5"}),
        ("0 9 * * * 30", {"kind": "cron", "expr": "0 9 * * * 30", "display": "0 9 * * * 30"}),
        ("2026-02-03T14:00", {"kind": "once", "display": "once at 2026-02-03 14:00"}),
        ("2026-02-03T14:00:00+02:00", {"kind": "once", "display": "once at 2026-02-03 14:00"}),
        ("2026-02-03", {"kind": "once", "display": "once at 2026-02-03 00:00"}),
    ],
)
def test_each_form_parses_as_the_reference_does(text: str, expected: dict[str, object]) -> None:
    parsed = parse_schedule(text, NOW)
    parsed.pop("run_at", None)
    assert parsed == expected


def test_a_delay_runs_that_long_from_now_and_a_naive_time_is_in_the_zone() -> None:
    assert parse_schedule("2h", NOW)["run_at"] == (NOW + timedelta(hours=2)).isoformat()
    berlin = NOW.astimezone(ZoneInfo("Europe/Berlin"))
    assert parse_schedule("2026-03-02T16:00", berlin)["run_at"] == "2026-03-02T16:00:00+01:00"
    aware = parse_schedule("2026-03-02T16:00:00Z", berlin)["run_at"]
    assert aware == "2026-03-02T16:00:00+00:00"


@pytest.mark.parametrize(
    "text", ["soon", "every banana", "61 * * * *", "every 0m", "1 2 3 4 5 6 7", "2026-02-30"]
)
def test_what_the_grammar_refuses(text: str) -> None:
    with pytest.raises(ScheduleError):
        parse_schedule(text, NOW)


@pytest.mark.parametrize(
    ("schedule", "grace"),
    [
        ({"kind": "interval", "minutes": 60}, 1800),
        ({"kind": "interval", "minutes": 1}, 120),
        ({"kind": "interval", "minutes": 1440}, 7200),
        ({"kind": "cron", "expr": "0 9 * * *"}, 7200),
        ({"kind": "cron", "expr": "*/5 * * * *"}, 150),
    ],
)
def test_the_grace_is_half_the_period_between_two_minutes_and_two_hours(
    schedule: dict[str, object], grace: float
) -> None:
    assert grace_seconds(schedule, NOW) == grace


def test_an_interval_keeps_its_phase_after_a_late_run() -> None:
    every_hour = {"kind": "interval", "minutes": 60}
    due = NOW + timedelta(hours=1)
    late = due + timedelta(minutes=25)
    assert next_time(every_hour, late, anchor=due) == NOW + timedelta(hours=2)
    assert occurrences_between(every_hour, due, due + timedelta(hours=4, minutes=30)) == 4


def test_fire_counts_repeats_before_the_run_and_completes_a_one_shot() -> None:
    job, next_ts = jobs.create({"schedule": "30m", "prompt": "x"}, NOW)
    assert next_ts == (NOW + timedelta(minutes=30)).timestamp()
    fired, nxt, run = jobs.fire(job, NOW + timedelta(minutes=30))
    assert run and nxt is None
    assert fired["repeat"] == {"times": 1, "completed": 1}
    done, _ = jobs.finish(fired, NOW + timedelta(minutes=31), "ok", None)
    assert done["state"] == "completed"


def test_without_cron_timezone_the_system_zone_is_used_by_name(monkeypatch) -> None:
    from hermesd.cron.clock import zone

    monkeypatch.setenv("TZ", "Europe/Berlin")
    berlin = zone(None)
    assert str(berlin) == "Europe/Berlin"
    # a daily 09:00 job keeps 09:00 local across the change to summer time (29 March 2026)
    before = datetime(2026, 3, 28, 10, 0, tzinfo=berlin)
    after = next_time({"kind": "cron", "expr": "0 9 * * *"}, before)
    assert (after.hour, after.utcoffset()) == (9, timedelta(hours=2))
