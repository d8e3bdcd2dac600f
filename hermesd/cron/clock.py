"""The scheduler's clock: the system's, or a test clock that moves only when told to.

`ManualClock` exists so tests never sleep for a schedule: it starts at the Unix time given in
``HERMESD_TEST_CLOCK`` and advances through the ``cron.clock`` test hook (docs/cron.md), which
refuses to work unless that variable is set. Timezones come from ``cron.timezone``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

TEST_CLOCK_ENV = "HERMESD_TEST_CLOCK"


class Clock:
    """The system clock (Unix seconds)."""

    manual = False

    def now(self) -> float:
        """Seconds since the epoch."""
        return time.time()


class ManualClock(Clock):
    """A clock that stands still until `advance` moves it (tests only)."""

    manual = True

    def __init__(self, start: float) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (never back); the new time."""
        self._now += max(0.0, seconds)
        return self._now


def clock_from_env(env: Mapping[str, str]) -> Clock:
    """A `ManualClock` when ``HERMESD_TEST_CLOCK`` holds a Unix time, else the system's."""
    value = env.get(TEST_CLOCK_ENV)
    if value:
        return ManualClock(float(value))
    return Clock()


def zone(name: str | None) -> tzinfo | None:
    """The timezone named in ``cron.timezone``, else the system's by name (so daylight saving
    moves cron times), else None (the system's current offset). `ValueError` for a name the
    system does not know."""
    if not name:
        return system_zone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"cron.timezone: unknown timezone '{name}'") from None


def system_zone() -> tzinfo | None:
    """The system's zone by name: ``$TZ``, or where /etc/localtime points; None if unknown."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    with contextlib.suppress(OSError):
        target = os.readlink("/etc/localtime")
        if "zoneinfo/" in target:
            candidates.append(target.split("zoneinfo/", 1)[1])
    for candidate in candidates:
        if candidate:
            with contextlib.suppress(ZoneInfoNotFoundError, ValueError):
                return ZoneInfo(candidate)
    return None


def local(ts: float, tz: tzinfo | None) -> datetime:
    """``ts`` as an aware datetime in ``tz`` (the system's zone when None)."""
    if tz is None:
        return datetime.fromtimestamp(ts).astimezone()
    return datetime.fromtimestamp(ts, tz)
