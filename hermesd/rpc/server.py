"""The listening Unix socket: creation or activation, peer credentials, the connection limits.

Owns the socket file (safe parent directory, stale-socket detection, 0600/0660 mode, group),
adopts a socket passed by systemd instead when there is one, checks ``SO_PEERCRED`` on every
connection (and whether the peer is a tool's process, `hermesd.rpc.peer_trust`) and hands
admitted connections to ``rpc.Connection``. It limits connections in all and per uid, keeps the
last slots for the daemon's owner, holds the memory budgets every connection shares
(``rpc.budgets``) and closes connections that are overdue (a stalled partial message, or idle).
It does not know any method.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import grp
import logging
import os
import socket
import stat
import struct
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermesd.caller import MEMBER, OWNER, TOOL
from hermesd.rpc.budgets import Budgets
from hermesd.rpc.connection import Connection, Limits, Peer, Router
from hermesd.rpc.peer_trust import PeerTrust
from hermesd.rpc.protocol import Codes, RpcError

log = logging.getLogger(__name__)

EX_UNAVAILABLE = 69
BACKLOG = 1024  # pending connections the kernel queues before accept (capped by somaxconn)


class SocketInUse(Exception):
    """Another live daemon answers on the socket path, or the path is not ours to replace."""


def peer_credentials(sock: socket.socket) -> Peer:
    """pid, uid and gid of the process at the other end (``SO_PEERCRED``)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(pid, uid, gid)


def _supplementary_groups(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Groups:"):
                    return {int(g) for g in line.split()[1:]}
    except (OSError, ValueError):
        pass
    return set()


def resolve_group(group: str | int | None) -> int | None:
    """Group name or gid → gid; raises ValueError for an unknown group."""
    if group is None or group == "":
        return None
    if isinstance(group, int) or str(group).isdigit():
        return int(group)
    try:
        return grp.getgrnam(str(group)).gr_gid
    except KeyError:
        raise ValueError(f"unknown group '{group}'") from None


class Gatekeeper:
    """Decides who may talk to the daemon: its own uid, root, and members of one group."""

    def __init__(self, gid: int | None) -> None:
        self.owner_uid = os.geteuid()
        self.gid = gid

    def is_owner(self, peer: Peer) -> bool:
        return peer.uid in (self.owner_uid, 0)

    def allows(self, peer: Peer) -> bool:
        if self.is_owner(peer):
            return True
        if self.gid is None:
            return False
        if peer.gid == self.gid or self.gid in _supplementary_groups(peer.pid):
            return True
        try:
            import pwd

            name = pwd.getpwuid(peer.uid).pw_name
            return name in grp.getgrgid(self.gid).gr_mem
        except KeyError:
            return False


def _probe_live(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError as exc:
        # EACCES/EPERM: cannot tell; assume live rather than delete someone else's socket
        return exc.errno in (errno.EACCES, errno.EPERM)
    else:
        return True
    finally:
        probe.close()


def bind_socket(path: Path, mode: int, gid: int | None) -> socket.socket:
    """Create the listening socket file safely, replacing a stale one."""
    parent = path.parent
    if not parent.exists():
        parent.mkdir(mode=0o750 if gid is not None else 0o700, parents=True)
        if gid is not None:
            os.chown(parent, -1, gid)
    if os.path.lexists(path):
        st = os.lstat(path)
        if not stat.S_ISSOCK(st.st_mode):
            raise SocketInUse(f"{path} exists and is not a socket; refusing to replace it")
        if _probe_live(path):
            raise SocketInUse(f"another hermesd is already listening on {path}")
        log.info("removing stale socket %s", path)
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # no window in which the socket is reachable by others
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    if gid is not None:
        os.chown(path, -1, gid)
    os.chmod(path, mode)
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


def adopt_socket(fd: int) -> socket.socket:
    """Wrap a socket passed by systemd; it must be a listening AF_UNIX stream socket."""
    sock = socket.socket(fileno=fd)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise SocketInUse(f"activated fd {fd} is not a Unix stream socket")
    sock.setblocking(False)
    return sock


class SocketServer:
    """Accepts connections and keeps the set of live ones."""

    def __init__(
        self,
        router: Router,
        limits: Limits,
        gatekeeper: Gatekeeper,
        max_connections: int,
        on_close: Callable[[Connection], None] | None = None,
        *,
        max_per_uid: int = 0,
        owner_reserved: int = 0,
        budgets: Budgets | None = None,
    ) -> None:
        """``max_per_uid`` bounds the connections of each uid but the owner's (0: no bound);
        the last ``owner_reserved`` of ``max_connections`` are the owner's alone."""
        self.router = router
        self.limits = limits
        self.gatekeeper = gatekeeper
        self.trust = PeerTrust()  # a tool's process is never the owner (issue 18)
        self.max_connections = max_connections
        self.max_per_uid = max_per_uid
        self.owner_reserved = min(owner_reserved, max_connections)
        self.budgets = budgets if budgets is not None else Budgets()
        self.connections: set[Connection] = set()
        self._per_uid: Counter[int] = Counter()
        self.cancelled_on_disconnect = 0  # handlers cancelled because their peer went away
        self.expired: Counter[str] = Counter()  # connections closed as overdue, by reason
        self._sweeper: asyncio.TimerHandle | None = None
        self.path: Path | None = None
        self.activated = False
        self._owns_file = False
        self._server: asyncio.AbstractServer | None = None
        # One read buffer for every connection of this (single-loop) server; see rpc.Connection.
        self._read_buffer = memoryview(bytearray(256 * 1024))
        self._on_close = on_close

    async def start(self, path: Path, mode: int, activated_fds: list[int]) -> None:
        """Listen on the activated socket if there is one, else create ``path``."""
        if activated_fds:
            sock = adopt_socket(activated_fds[0])
            for extra in activated_fds[1:]:
                log.warning("ignoring extra activated fd %d", extra)
                os.close(extra)
            name = sock.getsockname()
            self.path = Path(name) if isinstance(name, str) and name else path
            self.activated = True
            self._adopt_socket_group()
        else:
            sock = bind_socket(path, mode, self.gatekeeper.gid)
            self.path = path
            self._owns_file = True
        loop = asyncio.get_running_loop()
        # asyncio re-listens with its own backlog (default 100): keep ours, or a burst of
        # connecting clients gets EAGAIN.
        self._server = await loop.create_unix_server(
            self._new_connection, sock=sock, backlog=BACKLOG
        )
        self._schedule_sweep()

    def _adopt_socket_group(self) -> None:
        """Admit the group systemd gave an activated socket (``SocketGroup=``, mode 0660).

        Without ``socket.group`` in config.yaml, the socket file's group is the one its mode
        lets in, so members must pass the SO_PEERCRED check too.
        """
        if self.gatekeeper.gid is not None or self.path is None:
            return
        try:
            st = os.stat(self.path)
        except OSError:
            return
        if st.st_mode & 0o060 == 0o060:
            self.gatekeeper.gid = st.st_gid
            log.info("activated socket is group-accessible: admitting members of gid %d", st.st_gid)

    def _new_connection(self) -> Connection:
        return Connection(
            self.router,
            self.limits,
            self._admit,
            self._closed,
            read_buffer=self._read_buffer,
            budgets=self.budgets,
        )

    def _admit(self, conn: Connection, transport: asyncio.Transport) -> RpcError | None:
        sock: Any = transport.get_extra_info("socket")
        try:
            conn.peer = peer_credentials(sock)
        except OSError as exc:
            log.warning("cannot read peer credentials: %s; refusing connection", exc)
            return RpcError(Codes.PERMISSION_DENIED, "peer credentials unavailable")
        if not self.gatekeeper.allows(conn.peer):
            log.warning(
                "refused connection from uid %d gid %d pid %d",
                conn.peer.uid,
                conn.peer.gid,
                conn.peer.pid,
            )
            return RpcError(
                Codes.PERMISSION_DENIED,
                f"uid {conn.peer.uid} is not allowed to use this hermesd",
                {"uid": conn.peer.uid},
            )
        tool_origin = self.trust.tool_origin(sock, conn.peer.pid, conn.peer.uid)
        if tool_origin is not None:
            log.info("connection from pid %d: %s; not the owner", conn.peer.pid, tool_origin)
            conn.admitted(TOOL, tool_origin)
        else:
            conn.admitted(OWNER if self.gatekeeper.is_owner(conn.peer) else MEMBER, None)
        refusal = self._over_limit(conn)
        if refusal is not None:
            conn.admitted(MEMBER, tool_origin)  # never counted as the owner's
            log.warning("%s; refusing uid %d", refusal, conn.peer.uid)
            return RpcError(Codes.TOO_MANY_CONNECTIONS, refusal, {"uid": conn.peer.uid})
        self.connections.add(conn)
        self._per_uid[conn.peer.uid] += 1
        return None

    def _over_limit(self, conn: Connection) -> str | None:
        """Why ``conn`` cannot be admitted now, or None."""
        count = len(self.connections)
        if count >= self.max_connections:
            return f"hermesd is at its limit of {self.max_connections} connections"
        if conn.is_owner:
            return None
        if count >= self.max_connections - self.owner_reserved:
            return (
                f"hermesd is at its limit of {self.max_connections - self.owner_reserved} "
                f"connections for users other than its owner"
            )
        if self.max_per_uid and self._per_uid[conn.peer.uid] >= self.max_per_uid:
            return f"uid {conn.peer.uid} is at its limit of {self.max_per_uid} connections"
        return None

    def _closed(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self._per_uid[conn.peer.uid] -= 1
            if self._per_uid[conn.peer.uid] <= 0:
                del self._per_uid[conn.peer.uid]
        self.cancelled_on_disconnect += conn.cancelled_on_close
        if self._on_close is not None:
            self._on_close(conn)

    # --- overdue connections ---------------------------------------------------------------

    def _sweep_interval(self) -> float | None:
        bounds = [t for t in (self.limits.frame_timeout, self.limits.idle_timeout) if t]
        return min(5.0, max(0.05, min(bounds) / 4)) if bounds else None

    def _schedule_sweep(self) -> None:
        interval = self._sweep_interval()
        if interval is not None:
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(interval, self._sweep)

    def _sweep(self) -> None:
        """Close every connection that is overdue (`Connection.overdue`)."""
        now = time.monotonic()
        for conn in list(self.connections):
            overdue = conn.overdue(now)
            if overdue is not None:
                self.expired[overdue[0]] += 1
                conn.expire(overdue[1])
        self._schedule_sweep()

    def status(self) -> dict[str, Any]:
        """Connection and budget figures for ``status``."""
        return {
            "connections_by_uid": {str(uid): n for uid, n in sorted(self._per_uid.items())},
            "requests_in_flight": sum(c.inflight for c in self.connections),
            "requests_cancelled_on_disconnect": self.cancelled_on_disconnect,
            "connections_expired": dict(self.expired),
            "budgets": self.budgets.status(),
        }

    def stop_accepting(self) -> None:
        """Close the listening socket; remove its file when we created it."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        if self._owns_file and self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self._owns_file = False

    async def drain(self, timeout: float) -> None:
        """Refuse new requests, let in-flight ones finish within ``timeout``, close all."""
        for conn in self.connections:
            conn.refusing = True
        await asyncio.gather(*(c.drain_requests(timeout) for c in list(self.connections)))
        for conn in list(self.connections):
            conn.close()
        if self.connections:
            await asyncio.wait([c.closed for c in list(self.connections)], timeout=1.0)
