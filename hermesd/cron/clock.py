"""The scheduler's clock: the system's, or a test clock that moves only when told to.

`ManualClock` exists so tests never sleep for a schedule: it starts at the Unix time given in
``HERMESD_TEST_CLOCK``. The test that started the daemon moves it through a socket it handed the
daemon at start (``HERMESD_TEST_CLOCK_FD``, an inherited descriptor: `serve_test_clock`), never
through the RPC socket: no client of the daemon can reach the clock, and without both variables
in the daemon's own environment at start there is nothing to reach (docs/cron.md). Timezones
come from ``cron.timezone``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

log = logging.getLogger(__name__)

TEST_CLOCK_ENV = "HERMESD_TEST_CLOCK"
TEST_CLOCK_FD_ENV = "HERMESD_TEST_CLOCK_FD"

#: moves the test clock by seconds, ticks, with ``wait`` awaits the runs: ``{now, started}``
Move = Callable[[float, bool], Awaitable[dict[str, Any]]]


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


def test_clock_channel(env: Mapping[str, str], clock: Clock) -> socket.socket | None:
    """The socket the starting test handed over as ``HERMESD_TEST_CLOCK_FD`` (with a test
    clock only), made non-inheritable at once so no process the daemon starts can hold it."""
    value = env.get(TEST_CLOCK_FD_ENV)
    if not value or not clock.manual:
        return None
    fd = int(value)
    os.set_inheritable(fd, False)
    return socket.socket(fileno=fd)


async def serve_test_clock(channel: socket.socket, move: Move) -> None:
    """Answer each ``{"advance": s, "wait": b}`` line on ``channel`` with a JSON line of what
    `move` did, until the test closes its end."""
    reader, writer = await asyncio.open_connection(sock=channel)
    try:
        while line := await reader.readline():
            try:
                request = json.loads(line)
                reply = await move(float(request.get("advance") or 0), bool(request.get("wait")))
            except (ValueError, TypeError, AttributeError) as exc:
                log.warning("test clock: bad request %r: %s", line[:200], exc)
                reply = {"error": str(exc)}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
    finally:
        writer.close()


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
