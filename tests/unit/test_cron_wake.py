"""Scale to zero: when an idle daemon exits, and the systemd-run command that wakes it."""

from __future__ import annotations

from pathlib import Path

from hermesd.cron.wake import Activity, calendar, decide, timer_commands

IDLE = Activity(socket_activated=True, connections=0, turns=0, runs=0, pending_approvals=0)
NOW = 1772438400.0  # 2026-03-02 08:00:00 UTC


def test_an_idle_activated_daemon_exits_and_wakes_for_the_next_job() -> None:
    decision = decide(IDLE, idle_for=400, next_due=NOW + 3600, now=NOW, idle_exit=300)
    assert (decision.exit, decision.wake_at) == (True, NOW + 3600)


def test_without_jobs_it_exits_and_only_a_client_wakes_it() -> None:
    decision = decide(IDLE, 400, None, NOW, 300)
    assert (decision.exit, decision.wake_at) == (True, None)


def test_a_daemon_not_started_by_its_socket_never_exits() -> None:
    started_by_hand = Activity(False, 0, 0, 0, 0)
    decision = decide(started_by_hand, 10_000, NOW + 3600, NOW, 300)
    assert not decision.exit and "not socket-activated" in decision.reason


def test_any_connection_turn_run_or_pending_approval_keeps_it_up() -> None:
    for busy in (
        Activity(True, 1, 0, 0, 0),
        Activity(True, 0, 1, 0, 0),
        Activity(True, 0, 0, 1, 0),
        Activity(True, 0, 0, 0, 1),
    ):
        decision = decide(busy, 10_000, NOW + 3600, NOW, 300)
        assert not decision.exit and decision.reason.startswith("busy"), busy


def test_it_stays_up_until_idle_long_enough_and_when_a_job_is_due_soon() -> None:
    assert not decide(IDLE, 299, NOW + 3600, NOW, 300).exit
    assert not decide(IDLE, 400, NOW + 100, NOW, 60).exit  # less than two minutes away
    assert not decide(IDLE, 400, NOW + 250, NOW, 300).exit  # sooner than idle_exit


def test_the_timer_pings_the_socket_at_the_due_second_in_utc() -> None:
    commands = timer_commands(
        NOW + 3600.2,
        scope="user",
        socket_path=Path("/run/user/1000/hermes/hermesd.sock"),
        python="/usr/bin/python3",
    )
    assert commands == [
        ["systemctl", "--user", "stop", "hermesd-cron-wake.timer", "hermesd-cron-wake.service"],
        [
            "systemd-run",
            "--user",
            "--unit=hermesd-cron-wake",
            "--description=Wake hermesd for its next scheduled job",
            "--on-calendar=2026-03-02 09:00:01 UTC",
            "--timer-property=AccuracySec=1s",
            "--timer-property=Persistent=true",
            "--collect",
            "--",
            "/usr/bin/python3",
            "-m",
            "hermesctl",
            "--socket",
            "/run/user/1000/hermes/hermesd.sock",
            "ping",
        ],
    ]


def test_the_system_scope_has_no_user_flag_and_no_time_only_stops_the_old_timer() -> None:
    commands = timer_commands(None, scope="system", socket_path=Path("/run/hermes/hermesd.sock"))
    assert commands == [
        ["systemctl", "stop", "hermesd-cron-wake.timer", "hermesd-cron-wake.service"]
    ]
    armed = timer_commands(NOW, scope="system", socket_path=Path("/run/hermes/hermesd.sock"))
    assert "--user" not in armed[1] and armed[1][0] == "systemd-run"


def test_calendar_times_are_utc_seconds() -> None:
    assert calendar(NOW) == "2026-03-02 08:00:00 UTC"
    assert calendar(NOW + 0.001) == "2026-03-02 08:00:01 UTC"
