"""Which services a daemon runs, in which order.

The one place that knows every service: it builds them from the daemon's configuration and
appends them to ``daemon.services`` (their order is start-up order; stop runs in reverse).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .daemon import Daemon


def wire_services(daemon: "Daemon") -> None:
    """Create the services and attach them to ``daemon``."""
