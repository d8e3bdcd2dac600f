"""`Door`: an HTTP request as a client of the RPC layer, in the daemon's own process.

Each HTTP request (or event stream) opens a `Link`: a real `hermesd.rpc.connection.Connection`
whose transport is a pipe in memory instead of a socket. Calls go through the same router,
parameter validation, access gate, budgets and handlers as a socket client's; the caller is
the token's identity instead of ``SO_PEERCRED``. What the daemon sends back (responses,
``session.event`` notifications, ``approval.request`` server requests) is decoded here and
handed to the HTTP side. An ``approval.request`` is never answered by the link itself: a person
answers it with ``approvals.respond`` (over HTTP or any other door); the link going away answers
nothing, as a socket client's disconnect does. This module knows no HTTP and no method.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

import msgpack

from hermesd.http.tokens import Identity
from hermesd.rpc.connection import Connection, Limits, Peer, Router
from hermesd.rpc.protocol import RpcError

log = logging.getLogger(__name__)

QUEUE_LIMIT = 10_000  # messages a stream may hold unread before it is dropped (a slow client)


class _Pipe(asyncio.Transport):
    """The transport of a `Link`: what the connection writes is decoded and handed on."""

    def __init__(self, link: Link) -> None:
        super().__init__()
        self._link = link
        self._closing = False

    def write(self, data: Any) -> None:
        if not self._closing:
            self._link._received(bytes(data))

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            asyncio.get_running_loop().call_soon(self._link._lost)

    def abort(self) -> None:
        self.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class Link:
    """One in-process RPC connection as ``identity``: calls, and the messages sent to it."""

    _msgids = itertools.count(1)

    def __init__(self, door: Door, identity: Identity, client: str) -> None:
        self.door = door
        self.identity = identity
        self._replies: dict[int, asyncio.Future[Any]] = {}
        self._unpacker = msgpack.Unpacker(raw=False, max_buffer_size=0)
        #: notifications and server requests, in order: (kind, method, params)
        self.inbox: asyncio.Queue[tuple[str, str, Any]] = asyncio.Queue()
        self.closed = False
        self.conn = Connection(
            door.router,
            door.limits,
            self._admit,
            door.on_close,
            read_buffer=door.read_buffer,
        )
        self.conn.connection_made(_Pipe(self))
        self.conn.client_name = client

    def _admit(self, conn: Connection, transport: asyncio.Transport) -> RpcError | None:
        conn.peer = Peer(0, self.identity.uid, -1)
        conn.admitted(self.identity.trust, None)
        self.door.links.add(self)
        return None

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Call ``method`` as this link's identity; raises `RpcError` as a socket client sees."""
        msgid = next(self._msgids) & 0xFFFFFFFF
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._replies[msgid] = fut
        self.conn.data_received(
            msgpack.packb([0, msgid, method, [params or {}]], use_bin_type=True)
        )
        try:
            return await fut
        finally:
            self._replies.pop(msgid, None)

    def _received(self, data: bytes) -> None:
        self._unpacker.feed(data)
        for msg in self._unpacker:
            kind = msg[0]
            if kind == 1:
                fut = self._replies.get(msg[1])
                if fut is not None and not fut.done():
                    if msg[2] is not None:
                        fut.set_exception(RpcError.from_wire(msg[2]))
                    else:
                        fut.set_result(msg[3])
            elif kind == 2:
                self._queue(("notification", msg[1], msg[2]))
            elif kind == 0:  # a server request (approval.request): answered by a person
                self._queue(("request", msg[2], msg[3]))

    def _queue(self, item: tuple[str, str, Any]) -> None:
        if self.inbox.qsize() >= QUEUE_LIMIT:
            log.warning(
                "HTTP stream of %s is not reading its events; dropping it", self.identity.name
            )
            self.close()
            return
        self.inbox.put_nowait(item)

    def _lost(self) -> None:
        self.door.links.discard(self)
        self.conn.connection_lost(None)
        for fut in self._replies.values():
            if not fut.done():
                fut.set_exception(ConnectionError("the HTTP client went away"))
        self.inbox.put_nowait(("closed", "", None))

    def close(self) -> None:
        """Close the connection: its attachments end, unanswered asks answer nothing."""
        if not self.closed:
            self.closed = True
            self.conn.close()


class Door:
    """Opens links into the daemon's router; one per HTTP listener."""

    def __init__(
        self,
        router: Router,
        limits: Limits,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        self.router = router
        self.limits = limits
        self.on_close = on_close
        self.links: set[Link] = set()
        self.read_buffer = memoryview(bytearray(1))  # never read into: data comes by call

    def open(self, identity: Identity, client: str = "http") -> Link:
        """A new connection as ``identity``."""
        return Link(self, identity, client)

    async def call(
        self, identity: Identity, method: str, params: dict[str, Any] | None = None
    ) -> Any:
        """One call on a connection of its own, closed after the answer."""
        link = self.open(identity)
        try:
            return await link.call(method, params)
        finally:
            link.close()
