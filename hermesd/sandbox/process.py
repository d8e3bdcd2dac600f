"""What the daemon does to itself at start so that its tools cannot reach into it.

``umask 077``: everything the daemon and its tools create is private to its user unless
widened on purpose. ``PR_SET_DUMPABLE=0`` (as ssh-agent does): a process of the same user
may not ptrace the daemon or read its ``/proc/<pid>/mem``, ``environ`` or ``maps``, where the
API key and the ``.env`` values live. Root (with ``CAP_SYS_PTRACE``) is not stopped by it;
the sandbox's pid namespace or Landlock is what stops a tool running as root.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
UMASK = 0o077


def harden_daemon() -> None:
    """Set the umask and make the process non-dumpable; logs a warning if the latter fails."""
    os.umask(UMASK)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:
        log.warning("could not make hermesd non-dumpable: %s", exc)


def is_dumpable() -> bool:
    """Whether this process may be traced and read by its user (for ``status``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))
