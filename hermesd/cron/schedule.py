"""What a schedule string means: its parsed form, its next time, and how late it may fire.

The grammar is the reference's ``parse_schedule``: a delay (``30m``, ``2h``, ``1d``: once, that
long from now), an interval (``every 30m``: recurring), a cron expression (5 fields, or 6 with
seconds, computed with ``croniter``) and an ISO 8601 timestamp (once; a time without an offset
is read in the configured timezone). Pure functions of the text and a time: no clock, no store.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo
from typing import Any

from croniter import croniter

ONESHOT_GRACE = 120.0  # seconds a one-shot may be late and still run
MIN_GRACE = 120.0
MAX_GRACE = 7200.0
MAX_MINUTES = 10 * 366 * 1440  # a delay or interval of at most about ten years

FORMS = (
    "a delay such as '30m', '2h' or '1d' (runs once), an interval such as 'every 30m' or "
    "'every 2h' (recurring), a cron expression such as '0 9 * * *' (5 fields: minute hour "
    "day-of-month month day-of-week), or an ISO timestamp such as '2026-02-03T14:00' (runs once)"
)

_DURATION = re.compile(
    r"^(\d+)\s*(m|min|mins|minute|minutes|h|hr|hrs|hour|hours|d|day|days)$", re.IGNORECASE
)
_CRON_FIELD = re.compile(r"^[\d*\-,/]+$")
_UNIT_MINUTES = {"m": 1, "h": 60, "d": 1440}


class ScheduleError(ValueError):
    """A schedule that cannot be understood; the message names the forms expected."""


def parse_duration(text: str, *, zero: bool = False) -> int:
    """Minutes in ``30m``, ``2h``, ``1d`` (and their longer spellings); 0 only with ``zero``
    (a one-shot delay of nothing runs at the next tick; an interval of nothing never ends)."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ScheduleError(f"invalid duration '{text.strip()}': use a form like 30m, 2h or 1d")
    digits = match.group(1)
    minutes = int(digits[:12]) * _UNIT_MINUTES[match.group(2)[0].lower()]
    if minutes <= 0 and not zero:
        raise ScheduleError(f"invalid duration '{text.strip()}': it must be at least 1 minute")
    if len(digits) > 12 or minutes > MAX_MINUTES:
        raise ScheduleError(f"invalid duration '{text.strip()[:40]}': at most 10 years")
    return minutes


def parse_schedule(text: str, now: datetime) -> dict[str, Any]:
    """The schedule record for ``text`` (``kind`` once|interval|cron, its fields, ``display``);
    ``now`` is aware, in the configured timezone. `ScheduleError` names the forms expected."""
    if not isinstance(text, str) or not text.strip():
        raise ScheduleError(f"empty schedule: use {FORMS}")
    original = text.strip()
    if original.lower().startswith("every "):
        try:
            minutes = parse_duration(original[6:])
        except ScheduleError as exc:
            raise ScheduleError(f"invalid interval '{original}' ({exc}): use {FORMS}") from None
        return {"kind": "interval", "minutes": minutes, "display": f"every {minutes}m"}
    parts = original.split()
    if len(parts) >= 5 and all(_CRON_FIELD.match(p) for p in parts[:5]):
        if len(parts) > 6 or not croniter.is_valid(original):
            raise ScheduleError(f"invalid cron expression '{original}': use {FORMS}")
        return {"kind": "cron", "expr": original, "display": original}
    if "T" in original or re.match(r"^\d{4}-\d{2}-\d{2}", original):
        try:
            when = datetime.fromisoformat(original.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ScheduleError(f"invalid timestamp '{original}' ({exc}): use {FORMS}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=now.tzinfo)
        return {
            "kind": "once",
            "run_at": when.isoformat(),
            "display": f"once at {when.strftime('%Y-%m-%d %H:%M')}",
        }
    try:
        minutes = parse_duration(original, zero=True)
    except ScheduleError as exc:
        if "at most" in str(exc) or "at least" in str(exc):
            raise
        shown = original if len(original) <= 80 else original[:80] + "…"
        raise ScheduleError(f"invalid schedule '{shown}': use {FORMS}") from None
    run_at = now + timedelta(minutes=minutes)
    return {"kind": "once", "run_at": run_at.isoformat(), "display": f"once in {original}"}


def next_time(
    schedule: dict[str, Any], after: datetime, anchor: datetime | None = None
) -> datetime:
    """The first time of a recurring ``schedule`` strictly after ``after``. An interval counts
    its periods from ``anchor`` (the time it was due), so a late run does not shift it."""
    kind = schedule.get("kind")
    if kind == "interval":
        period = timedelta(minutes=int(schedule["minutes"]))
        if anchor is None:
            return after + period
        if anchor > after:
            return anchor
        periods = (after - anchor) // period + 1
        return anchor + periods * period
    if kind == "cron":
        nxt: datetime = croniter(schedule["expr"], after).get_next(datetime)
        return nxt
    raise ScheduleError(f"a '{kind}' schedule has no next time")


def occurrences_between(schedule: dict[str, Any], start: datetime, end: datetime) -> int:
    """How many times a recurring schedule was due in (``start``, ``end``], capped at 10,000."""
    if schedule.get("kind") == "interval":
        period = timedelta(minutes=int(schedule["minutes"]))
        return min(10_000, max(0, int((end - start) // period)))
    count, it = 0, croniter(schedule["expr"], start)
    while count < 10_000 and it.get_next(datetime) <= end:
        count += 1
    return count


def period_seconds(schedule: dict[str, Any], around: datetime) -> float | None:
    """The length of one period of a recurring schedule (for a cron expression: the gap
    between its next two times after ``around``); None for a one-shot."""
    kind = schedule.get("kind")
    if kind == "interval":
        return int(schedule["minutes"]) * 60.0
    if kind == "cron":
        it = croniter(schedule["expr"], around)
        first: datetime = it.get_next(datetime)
        second: datetime = it.get_next(datetime)
        return (second - first).total_seconds()
    return None


def grace_seconds(schedule: dict[str, Any], around: datetime) -> float:
    """How late a job may fire and still count as on time: half its period, 2 min to 2 h."""
    period = period_seconds(schedule, around)
    if period is None:
        return ONESHOT_GRACE
    return max(MIN_GRACE, min(period / 2, MAX_GRACE))


def first_time(schedule: dict[str, Any], now: datetime) -> datetime:
    """When a new job with ``schedule`` first runs."""
    if schedule.get("kind") == "once":
        return aware(datetime.fromisoformat(schedule["run_at"]), now.tzinfo)
    return next_time(schedule, now)


def aware(when: datetime, zone: tzinfo | None) -> datetime:
    """``when`` with a timezone (``zone`` when it had none)."""
    return when if when.tzinfo is not None else when.replace(tzinfo=zone)
