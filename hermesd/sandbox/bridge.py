"""The bridge to the egress proxy inside a bubblewrap sandbox that has no network.

Run as ``python -I -S bridge.py SOCKET PORT FILTER_FD -- PROGRAM ARGS...`` as the first
program of a sandbox made with ``--unshare-net`` (its own loopback, nothing else): it listens
on ``127.0.0.1:PORT`` inside that namespace, forks a relay that copies every connection to the
proxy's Unix socket ``SOCKET`` (bound into the sandbox), then applies the seccomp program read
from ``FILTER_FD`` (what bubblewrap's ``--seccomp`` would have applied: it cannot be applied
before the relay exists, as it may refuse Unix sockets) and executes PROGRAM. So PROGRAM and
everything it starts reach the network only through the proxy's port.

The relay is not dumpable, so the confined program (same uid, no capabilities) cannot ptrace
it into opening other sockets, and it dies with PROGRAM. Standard library only: it is started
once per call, like `hermesd.sandbox.landlock_exec`, whose seccomp code it reuses.
"""

from __future__ import annotations

import _socket  # not socket and threading: importing them would cost every call milliseconds
import _thread
import os
import select
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hermesd.sandbox import landlock_exec
else:  # run by path with -I: its neighbour is not importable as part of the package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import landlock_exec

PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
SIGKILL = 9
CHUNK = 65536
Socket = _socket.socket


def relay(listener: Socket, target: str) -> None:
    """Accept on ``listener`` forever; each connection is copied to and from ``target``."""
    landlock_exec._call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    landlock_exec._call("prctl", PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the caller reads the command's output until every writer is gone
        os.dup2(null, fd)
    while True:
        fd, _ = listener._accept()  # type: ignore[attr-defined]  # _socket has no accept()
        _thread.start_new_thread(_pump, (Socket(fileno=fd), target))


def _pump(client: Socket, target: str) -> None:
    upstream = Socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(target)
    except OSError:
        client.close()
        upstream.close()
        return
    open_ends = {client: upstream, upstream: client}  # each end, read from, goes to the other
    try:
        while open_ends:
            ready, _, _ = select.select(list(open_ends), [], [])
            for end in ready:
                if end in open_ends:
                    _move(end, open_ends, upstream)
    finally:
        client.close()
        upstream.close()


def _move(end: Socket, open_ends: dict[Socket, Socket], last: Socket) -> None:
    """One read from ``end`` passed on; at its end of file (or when the other side can take
    no more) that direction is over, and once ``last`` is over, the exchange is."""
    other = open_ends[end]
    try:
        data = end.recv(CHUNK)
        if data:
            other.sendall(data)
            return
    except OSError:
        pass  # the proxy may refuse and close before reading all: still pass on its answer
    del open_ends[end]
    try:  # noqa: SIM105 (contextlib is one import more for every call)
        other.shutdown(_socket.SHUT_WR)
    except OSError:
        pass
    if end is last:
        open_ends.clear()


def main(argv: list[str]) -> None:
    if len(argv) < 6 or argv[4] != "--":
        landlock_exec.fail("usage: bridge.py SOCKET PORT FILTER_FD -- PROGRAM [ARGS...]")
    target, port, filter_fd, program = argv[1], int(argv[2]), int(argv[3]), argv[5:]
    listener = Socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
    except OSError as exc:
        landlock_exec.fail(f"the network bridge cannot listen on 127.0.0.1:{port}: {exc}")
    if os.fork() == 0:
        try:
            os.close(filter_fd)
            relay(listener, target)
        finally:
            os._exit(0)
    listener.close()
    chunks = []
    while chunk := os.read(filter_fd, 4096):
        chunks.append(chunk)
    os.close(filter_fd)
    landlock_exec.apply_filter(b"".join(chunks))
    try:
        os.execv(program[0], program)
    except OSError as exc:
        landlock_exec.fail(f"cannot run {program[0]}: {exc}")


if __name__ == "__main__":
    main(sys.argv)
