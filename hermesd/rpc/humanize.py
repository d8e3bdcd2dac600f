"""How a span of time reads to a person, the same in ``hermesctl status`` and ``/status``.

Lives beside the protocol because both sides of the socket show the ``uptime_s`` it carries;
standard library only (hermesctl imports it on its start-up path).
"""

from __future__ import annotations


def duration(seconds: float) -> str:
    """``42s``, ``3m 5s``, ``2h 10m``, ``4d 1h``: the two largest units."""
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"
