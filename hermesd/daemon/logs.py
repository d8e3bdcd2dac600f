"""Logging set-up: structured journald records when stderr is the journal, plain lines otherwise.

systemd sets ``JOURNAL_STREAM=<dev>:<inode>`` for a unit whose stderr goes to the journal;
when it matches our stderr we log through ``systemd.journal`` so priority, logger name and
source location become journal fields instead of text.
"""

from __future__ import annotations

import logging
import os
import sys

from hermesd.redact import RedactingFilter


def stderr_is_journal() -> bool:
    """True when stderr is connected to the journal (per ``JOURNAL_STREAM``)."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    try:
        dev, ino = (int(x) for x in stream.split(":"))
        st = os.fstat(sys.stderr.fileno())
    except (ValueError, OSError):
        return False
    return st.st_dev == dev and st.st_ino == ino


def setup(level: str = "INFO") -> str:
    """Install the root handler; returns ``"journal"`` or ``"stderr"``."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    target = "stderr"
    handler: logging.Handler
    if stderr_is_journal():
        try:
            from systemd.journal import JournalHandler

            handler = JournalHandler(SYSLOG_IDENTIFIER="hermesd")
            handler.setFormatter(logging.Formatter("%(message)s"))
            target = "journal"
        except ImportError:
            handler = _stderr_handler()
    else:
        handler = _stderr_handler()
    handler.addFilter(RedactingFilter())  # secrets never reach the log
    root.addHandler(handler)
    from hermesd.daemon.logring import RING

    root.addHandler(RING)  # recent records for `hermesctl logs`
    set_level(level)
    return target


def set_level(level: str) -> None:
    """Change the level of hermesd's loggers (config reload calls this)."""
    logging.getLogger().setLevel(getattr(logging, level.upper(), logging.INFO))


def _stderr_handler() -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
    )
    return handler
