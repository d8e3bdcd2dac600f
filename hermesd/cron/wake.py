"""Scale to zero under systemd: when idle, arm a timer for the next due job and exit.

With ``cron.scale_to_zero`` on and the daemon started by socket activation, a daemon that has
had no connection, no turn, no run and no pending approval for ``cron.idle_exit`` seconds
asks systemd for a transient timer (``systemd-run --on-calendar``) whose service connects to
the socket, and stops. The socket unit keeps listening; the timer's connection (or any
client's) starts hermesd again, and the restarted scheduler runs what is due. `decide` is the
whole policy and `timer_commands` the command lines; both are pure, so both are tested here,
where systemd is not PID 1 and ``systemctl`` cannot run. `ScaleToZero` applies them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger(__name__)

UNIT = "hermesd-cron-wake"
SOON = 120.0  # a job due sooner than this: stay up rather than exit and be woken


@dataclass(frozen=True)
class Activity:
    """What keeps the daemon up, at one moment."""

    socket_activated: bool
    connections: int
    turns: int
    runs: int
    pending_approvals: int


@dataclass(frozen=True)
class Decision:
    """Whether to exit now, and when to be woken (None: only by a client)."""

    exit: bool
    wake_at: float | None
    reason: str


def decide(
    activity: Activity, idle_for: float, next_due: float | None, now: float, idle_exit: float
) -> Decision:
    """The scale-to-zero policy: exit only when idle long enough and a wake-up can be armed."""
    if not activity.socket_activated:
        return Decision(False, None, "not socket-activated: nothing would start hermesd again")
    busy = [
        f"{count} {what}"
        for count, what in (
            (activity.connections, "connection(s)"),
            (activity.turns, "turn(s) running"),
            (activity.runs, "cron run(s)"),
            (activity.pending_approvals, "pending approval(s)"),
        )
        if count
    ]
    if busy:
        return Decision(False, None, "busy: " + ", ".join(busy))
    if idle_for < idle_exit:
        return Decision(False, None, f"idle for {idle_for:.0f} s of {idle_exit:.0f} s")
    if next_due is not None and next_due - now < max(SOON, idle_exit):
        return Decision(False, None, "the next job is due soon")
    return Decision(True, next_due, "idle")


def calendar(ts: float) -> str:
    """``ts`` as a systemd calendar time, in UTC and rounded up to the second."""
    return datetime.fromtimestamp(int(ts) + (ts % 1 > 0), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def timer_commands(
    wake_at: float | None,
    *,
    scope: str,
    socket_path: Path,
    python: str = sys.executable,
    unit: str = UNIT,
) -> list[list[str]]:
    """The commands that replace the wake-up timer: stop the old one, then (with a time) start
    ``systemd-run`` with a timer whose service pings the socket, starting hermesd."""
    user = ["--user"] if scope == "user" else []
    commands = [["systemctl", *user, "stop", f"{unit}.timer", f"{unit}.service"]]
    if wake_at is None:
        return commands
    commands.append(
        [
            "systemd-run",
            *user,
            f"--unit={unit}",
            "--description=Wake hermesd for its next scheduled job",
            f"--on-calendar={calendar(wake_at)}",
            "--timer-property=AccuracySec=1s",
            "--timer-property=Persistent=true",
            "--collect",
            "--",
            python,
            "-m",
            "hermesctl",
            "--socket",
            str(socket_path),
            "ping",
        ]
    )
    return commands


Run = Callable[[list[str]], Awaitable[int]]


async def run_command(argv: list[str]) -> int:
    """Run one command, its output to the log; its exit status (127: not found)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:
        log.warning("scale to zero: cannot run %s: %s", argv[0], exc)
        return 127
    out, _ = await proc.communicate()
    if proc.returncode:
        log.warning(
            "scale to zero: %s exited %s: %s", argv[0], proc.returncode, out.decode()[-500:]
        )
    return proc.returncode or 0


class ScaleToZero:
    """Watches for idleness and, when `decide` says so, arms the timer and stops the daemon."""

    def __init__(
        self,
        *,
        activity: Callable[[], Activity],
        next_due: Callable[[], Awaitable[float | None]],
        now: Callable[[], float],
        stop: Callable[[], None],
        socket_path: Callable[[], Path | None],
        idle_exit: float,
        scope: str,
        run: Run = run_command,
    ) -> None:
        self.activity = activity
        self.next_due = next_due
        self.now = now
        self.request_stop = stop
        self.socket_path = socket_path
        self.idle_exit = idle_exit
        self.scope = scope
        self.run = run
        self._busy_at = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    # the daemon's service protocol: it runs beside the others, after the cron service

    def bind(self, router: object) -> None:
        pass

    async def start(self) -> None:
        self._busy_at = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._watch())

    def status(self) -> dict[str, object]:
        return {"scale_to_zero": True}

    def reload(self, cfg: object) -> None:
        pass

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        step = max(0.2, min(15.0, self.idle_exit / 4))
        while True:
            await asyncio.sleep(step)
            try:
                if await self.check():
                    return
            except Exception:
                log.exception("scale to zero: the idle check failed")

    async def check(self) -> bool:
        """Exit now if idle; True when the daemon was asked to stop."""
        activity = self.activity()
        if activity.connections or activity.turns or activity.runs or activity.pending_approvals:
            self._busy_at = time.monotonic()
        idle_for = time.monotonic() - self._busy_at
        decision = decide(activity, idle_for, await self.next_due(), self.now(), self.idle_exit)
        path = self.socket_path()
        if not decision.exit or path is None:
            return False
        for argv in timer_commands(decision.wake_at, scope=self.scope, socket_path=path):
            status = await self.run(argv)
            if argv[0] == "systemd-run" and status != 0:
                log.warning("scale to zero: no wake-up timer could be armed; staying up")
                self._busy_at = time.monotonic()
                return False
        when = calendar(decision.wake_at) if decision.wake_at is not None else "a client connects"
        log.info("scale to zero: idle for %.0f s; exiting until %s", idle_for, when)
        self.request_stop()
        return True
