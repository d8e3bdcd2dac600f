"""The daemon's resident memory (RSS, from ``/proc/self/statm``) and which plugin grows it.

`GROWTH` (a `PluginGrowth`) keeps, per plugin, the running total of how much the daemon's RSS
changed across that plugin's calls on the worker pools; the first time a plugin's total passes
the threshold (``limits.plugin_memory_warn``) it is named in the log, once. Deltas of calls that
overlap are counted for each of them: a hint at the culprit, not an account. Standard library
only.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)

_PAGE = os.sysconf("SC_PAGE_SIZE")
WARN_BYTES = 256 * 1024 * 1024  # a plugin's calls grew the daemon by this much: name it


_statm: int | None = None  # kept open: a pread is ~1.5 µs, an open/read/close ~13 µs, and
# this runs twice around every plugin call on the turn path


def rss_bytes() -> int:
    """The daemon's resident set size now, in bytes (0 where /proc is missing)."""
    global _statm
    try:
        if _statm is None:
            _statm = os.open(f"/proc/{os.getpid()}/statm", os.O_RDONLY)  # not inherited
        return int(os.pread(_statm, 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


class PluginGrowth:
    """Per plugin: the RSS growth summed over its calls, and a warning once past a bound."""

    def __init__(self, threshold: int = WARN_BYTES) -> None:
        self.threshold = threshold
        self._lock = threading.Lock()
        self._totals: dict[str, int] = {}
        self._warned: set[str] = set()

    def add(self, key: str, before: int, after: int) -> None:
        """Count one call of plugin ``key`` that ran with the RSS at ``before``, then ``after``."""
        with self._lock:
            total = self._totals.get(key, 0) + (after - before)
            self._totals[key] = total
            if total < self.threshold or key in self._warned:
                return
            self._warned.add(key)
        log.warning(
            "plugin %s: the daemon's memory grew by %d MiB over its calls (now %d MiB "
            "resident); it may be leaking: disable it (plugins.disabled) or report it",
            key,
            total // (1024 * 1024),
            after // (1024 * 1024),
        )

    def largest(self, count: int = 3) -> dict[str, int]:
        """The plugins whose calls grew the RSS most (by 1 MiB or more), in bytes."""
        with self._lock:
            grown = sorted(self._totals.items(), key=lambda kv: kv[1], reverse=True)
        return {k: v for k, v in grown[:count] if v >= 1024 * 1024}


#: The one account every worker pool adds to (``status`` and ``doctor`` read it).
GROWTH = PluginGrowth()
