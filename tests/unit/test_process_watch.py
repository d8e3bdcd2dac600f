"""The rules of ``watch_patterns`` (`hermesd.tools.process_notices`): what a line match is, the
per-process rate limit with its strikes, and the daemon-wide bound. Time is passed in, so no
test waits."""

from __future__ import annotations

from hermesd.tools.process_notices import (
    GLOBAL_MAX,
    STRIKE_LIMIT,
    WATCH_INTERVAL,
    Breaker,
    Watch,
    completion_notice,
)


def test_a_pattern_is_a_substring_of_a_line_without_escape_sequences() -> None:
    watch = Watch(["READY", "a.b"])
    assert watch.scan("booting\n\x1b[32mserver READY\x1b[0m\r\naxb\n") == [
        ("READY", "server READY")
    ]


def test_a_line_split_between_two_reads_matches_once() -> None:
    watch = Watch(["listening on"])
    assert watch.scan("server listen") == []
    assert watch.scan("ing on 80") == [("listening on", "server listening on 80")]
    assert watch.scan("80\nnext\n") == []  # the same line, finished: not again


def test_a_match_inside_the_interval_is_dropped_and_counted_in_the_next_notice() -> None:
    watch = Watch(["x"])
    assert watch.admit([("x", "x 1")], now=100.0) is not None
    assert watch.admit([("x", "x 2"), ("x", "x 3")], now=101.0) is None
    later = watch.admit([("x", "x 4")], now=100.0 + WATCH_INTERVAL)
    assert later is not None and later.suppressed == 2 and later.lines == ["x 4"]


def test_windows_in_a_row_with_drops_switch_the_watch_off() -> None:
    watch, now = Watch(["x"]), 0.0
    for _ in range(STRIKE_LIMIT):
        assert watch.admit([("x", "x")], now) is not None
        assert watch.admit([("x", "x")], now + 1) is None
        now += WATCH_INTERVAL
    assert watch.disabled


def test_a_quiet_window_starts_the_strike_count_again() -> None:
    watch, now = Watch(["x"]), 0.0
    for _ in range(STRIKE_LIMIT - 1):
        watch.admit([("x", "x")], now)
        watch.admit([("x", "x")], now + 1)
        now += WATCH_INTERVAL
    watch.admit([("x", "x")], now)  # a window with no drop
    now += WATCH_INTERVAL
    watch.admit([("x", "x")], now)
    watch.admit([("x", "x")], now + 1)
    assert not watch.disabled


def test_the_daemon_wide_bound_pauses_match_notices() -> None:
    breaker = Breaker()
    assert all(breaker.admit(0.0) for _ in range(GLOBAL_MAX))
    assert not breaker.admit(1.0)
    assert not breaker.admit(20.0)  # still paused
    assert breaker.admit(40.0) and breaker.dropped == 2


def test_a_completion_notice_keeps_the_end_of_long_output_from_a_line_start() -> None:
    output = "".join(f"line {i}\n" for i in range(1000))
    notice = completion_notice("proc_1", "make", 2, "exited", None, output)
    assert notice.startswith("[Notice from background process proc_1, not from the user")
    assert "exit code 2" in notice and "line 999" in notice and "line 1\n" not in notice
    assert "[output cut: its last" in notice
    assert '<untrusted-data source="process:proc_1">' in notice
