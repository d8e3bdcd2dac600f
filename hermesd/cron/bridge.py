"""The running daemon's `CronService`, for code that cannot be handed it: the ``cron.jobs``
module plugins import (`hermesd.cron.reference_modules`). Set when the service starts,
cleared when it stops; nothing else reads it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hermesd.cron.service import CronService

_active: list[CronService] = []
REFERENCE_MODULES = Path(__file__).resolve().parent / "reference_modules"


def add_reference_modules() -> None:
    """Make ``cron`` importable in this process (the daemon's): its directory goes at the end
    of ``sys.path``, and it holds no other top-level name."""
    if str(REFERENCE_MODULES) not in sys.path:
        sys.path.append(str(REFERENCE_MODULES))


def activate(service: CronService) -> None:
    """Make ``service`` the one ``cron.jobs`` talks to."""
    add_reference_modules()
    _active[:] = [service]


def deactivate(service: CronService) -> None:
    if _active and _active[0] is service:
        _active.clear()


def active() -> CronService:
    """The running service; RuntimeError outside a running daemon."""
    if not _active:
        raise RuntimeError(
            "hermesd's cron service is not running in this process: cron.jobs works only "
            "inside hermesd"
        )
    return _active[0]
