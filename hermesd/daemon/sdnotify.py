"""The service manager's side channel: readiness, status, watchdog and activated sockets.

Wraps systemd-python's ``sd_notify`` and ``sd_listen_fds``. Every call is a no-op when hermesd
is not run by systemd (no ``NOTIFY_SOCKET``, no ``LISTEN_FDS``), so the daemon calls them
unconditionally.
"""

from __future__ import annotations

import asyncio
import logging
import os

log = logging.getLogger(__name__)


def _notify(state: str) -> None:
    if not os.environ.get("NOTIFY_SOCKET"):
        return
    from systemd import daemon

    try:
        daemon.notify(state)
    except OSError as exc:  # the manager went away; nothing we can do but say so
        log.warning("sd_notify(%r) failed: %s", state, exc)


def ready(status: str) -> None:
    """Tell the manager start-up is complete."""
    _notify(f"READY=1\nSTATUS={status}\nMAINPID={os.getpid()}")


def status(text: str) -> None:
    """Update the one-line status shown by ``systemctl status``."""
    _notify(f"STATUS={text}")


def stopping(text: str = "Stopping") -> None:
    """Tell the manager a graceful stop has begun."""
    _notify(f"STOPPING=1\nSTATUS={text}")


def reloading(text: str = "Reloading") -> None:
    """Tell the manager a reload has begun (finish with ``ready``)."""
    _notify(f"RELOADING=1\nSTATUS={text}")


def watchdog_interval() -> float | None:
    """Half the watchdog period in seconds when a watchdog is armed for this process."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return max(int(usec) / 2_000_000, 0.05)
    except ValueError:
        return None


async def watchdog_loop(interval: float) -> None:
    """Ping the watchdog from the event loop, so a blocked loop stops the pings."""
    while True:
        _notify("WATCHDOG=1")
        await asyncio.sleep(interval)


#: the name a second socket unit gives the HTTP listener's fd (``FileDescriptorName=http``)
HTTP_FD_NAME = "http"
_activated: dict[int, str] | None = None


def _by_name() -> dict[int, str]:
    """Every fd systemd passed, with its name; read once (the environment is unset then)."""
    global _activated
    if _activated is None:
        _activated = {}
        if os.environ.get("LISTEN_FDS"):
            from systemd import daemon

            _activated = dict(daemon.listen_fds_with_names(unset_environment=True))
    return _activated


def listen_fds() -> list[int]:
    """File descriptors passed by socket activation for the RPC socket (all but ``http``)."""
    return sorted(fd for fd, name in _by_name().items() if name != HTTP_FD_NAME)


def http_fds() -> list[int]:
    """File descriptors passed by socket activation named ``http`` (the HTTP listener)."""
    return sorted(fd for fd, name in _by_name().items() if name == HTTP_FD_NAME)
