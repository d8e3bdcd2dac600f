"""Whether a connection comes from a process a tool started: such a peer is never the owner.

A tool's process (and everything it forks, after ``setsid`` or a double fork too) carries
marks it cannot shed: the sandbox runs it in a new pid namespace (bubblewrap) and every tool
process, under any mechanism or ``sandbox.mode: off``, inherits a seccomp filter the daemon
itself does not have (``Seccomp_filters`` in ``/proc/<pid>/status`` can only grow). A peer of
the daemon's own uid whose pid namespace differs from the daemon's, or that has more seccomp
filters than the daemon, is a tool's. Only same-uid peers are checked: a tool runs as the
daemon's uid and cannot become another.

The pid comes from ``SO_PEERCRED``; ``SO_PEERPIDFD`` (Linux 6.5) pins the very process, so a
pid reused after the peer exited is noticed: ``/proc/<pid>`` is opened, then the pidfd must
still be alive. When the peer cannot be examined the answer is "a tool's" (fail closed).
A peer the daemon cannot see (pid 0: another pid namespace above or beside ours) is not a
tool's, since a tool's namespaces are always below the daemon's. The rule also catches an
owner's client run inside some other container or seccomp sandbox: such a client is not
trusted to answer approvals either (docs/sandbox.md).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket

SO_PEERPIDFD = 77


def _filters(status: str) -> int:
    for line in status.splitlines():
        if line.startswith("Seccomp_filters:"):
            return int(line.split()[1])
    return 0


def _own() -> tuple[int, int]:
    with open("/proc/self/status", encoding="ascii") as fh:
        filters = _filters(fh.read())
    return filters, os.stat("/proc/self/ns/pid").st_ino


def _exited(pidfd: int) -> bool:
    """A pidfd is readable once its process exited (poll, not select: the descriptor number is
    above 1024 when the daemon holds a thousand connections)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


class PeerTrust:
    """Classifies peers against the daemon's own namespace and seccomp filter count."""

    def __init__(self) -> None:
        self.uid = os.geteuid()
        self.filters, self.pidns = _own()

    def tool_origin(self, sock: socket.socket, pid: int, uid: int) -> str | None:
        """Why the peer is a tool's process, or None when it is not."""
        if uid != self.uid or pid == 0:
            return None
        pidfd = -1
        with contextlib.suppress(OSError):
            pidfd = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
        try:
            return self._examine(pid, pidfd)
        finally:
            if pidfd >= 0:
                os.close(pidfd)

    def _examine(self, pid: int, pidfd: int) -> str | None:
        try:
            proc = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return "the peer process could not be examined"
        try:
            if pidfd >= 0 and _exited(pidfd):
                return "the peer process exited before it could be examined"
            status_fd = os.open("status", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc)
            with os.fdopen(status_fd, encoding="ascii", errors="replace") as fh:
                filters = _filters(fh.read())
            pidns = os.stat("ns/pid", dir_fd=proc).st_ino
        except (OSError, ValueError):
            return "the peer process could not be examined"
        finally:
            os.close(proc)
        if pidns != self.pidns:
            return "the peer runs in another pid namespace (a tool's sandbox)"
        if filters > self.filters:
            return "the peer carries the tool sandbox's seccomp marker"
        return None
