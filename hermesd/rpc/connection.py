"""One msgpack-RPC connection on the daemon side, as an asyncio protocol.

Owns message ids in both directions, the futures of requests we sent, the handler tasks of
requests we received (many in flight, answered in completion order), notifications, and the
bounds on a connection: in-flight requests and bytes waiting to be written to a slow reader.
It knows the method table only through a ``Router``; it never touches sockets beyond its
transport and knows nothing about sessions, plugins or systemd.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from hermesd.rpc import wire
from hermesd.rpc.protocol import METHODS, Codes, MethodSpec, RpcError

log = logging.getLogger(__name__)

#: The connection whose request is being handled; tasks a handler starts inherit it (a turn
#: started by session.send, a tool call from tools.call), so a service can ask that client.
current_connection: contextvars.ContextVar[Connection | None] = contextvars.ContextVar(
    "hermesd_current_connection", default=None
)


@dataclass(frozen=True, slots=True)
class Peer:
    pid: int
    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class Limits:
    max_message: int = wire.DEFAULT_MAX_MESSAGE
    max_output: int = 4 * wire.DEFAULT_MAX_MESSAGE
    max_inflight: int = 256
    request_timeout: float = 300.0


@dataclass(slots=True)
class Call:
    """What a handler knows about the request it serves."""

    conn: Connection
    msgid: int
    method: str


Handler = Callable[[Call, dict[str, Any]], Any]


class Router:
    """Maps declared method names to handlers; refuses names that are not declared."""

    def __init__(self) -> None:
        self._routes: dict[str, tuple[MethodSpec, Handler, bool]] = {}

    def bind(self, name: str, handler: Handler) -> None:
        """Attach a handler to a method declared in ``protocol.METHODS``."""
        if name not in METHODS:
            raise KeyError(f"method {name} is not declared in protocol.METHODS")
        self._routes[name] = (METHODS[name], handler, inspect.iscoroutinefunction(handler))

    def missing(self) -> list[str]:
        """Declared methods without a handler."""
        return sorted(set(METHODS) - set(self._routes))

    def lookup(self, name: str) -> tuple[MethodSpec, Handler, bool]:
        route = self._routes.get(name)
        if route is None:
            raise RpcError(Codes.METHOD_NOT_FOUND, f"unknown method '{name}'", {"method": name})
        return route

    def names(self) -> list[str]:
        return sorted(self._routes)


READ_BUFFER = 65536
_DECLARED_CODES = frozenset(v for k, v in vars(Codes).items() if k.isupper())


class Connection(asyncio.BufferedProtocol):
    """The daemon's end of one client connection.

    A buffered protocol: the transport reads into a preallocated buffer (with a plain Protocol
    asyncio allocates a 256 KiB bytes object per read, which glibc serves with
    mmap/mremap/munmap: three system calls per request). The buffer may be shared by every
    connection of one event loop: asyncio fills it and calls ``buffer_updated`` back to back, and
    the decoder copies what it is fed before any other connection reads.
    """

    _ids = itertools.count(1)

    def __init__(
        self,
        router: Router,
        limits: Limits,
        admit: Callable[[Connection, asyncio.Transport], RpcError | None],
        on_close: Callable[[Connection], None] | None = None,
        on_notification: Callable[[Connection, str, list[Any]], None] | None = None,
        read_buffer: memoryview | None = None,
    ) -> None:
        self.id = next(self._ids)
        self.router = router
        self.peer = Peer(0, -1, -1)
        self.is_owner = False
        self.tool_origin: str | None = None  # set when the peer is a tool's process
        self.limits = limits
        self._admit = admit
        self.client_name = ""
        self.client_protocol = ""
        self.closed = asyncio.get_running_loop().create_future()
        self._on_close = on_close
        self._on_notification = on_notification
        self._decoder = wire.Decoder(limits.max_message)
        self._encoder = wire.Encoder()
        self._view = read_buffer if read_buffer is not None else memoryview(bytearray(READ_BUFFER))
        self._transport: asyncio.Transport | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 0
        self._corked: list[bytes] | None = None  # output waiting for the end of a loop round
        self.refusing = False  # set while the daemon drains: new requests get ShuttingDown

    # --- transport callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        refusal = self._admit(self, transport)  # sets peer and is_owner
        if refusal is not None:
            self.notify("hermes.error", [refusal.to_wire()])
            self.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self._view[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        if self._transport is None or self._transport.is_closing():
            return  # refused or closing: read nothing more
        try:
            for obj in self._decoder.feed(data):
                self._handle(obj)
                if self._transport is None or self._transport.is_closing():
                    return
        except wire.StreamError as exc:
            code = Codes.PAYLOAD_TOO_LARGE if exc.too_large else Codes.PARSE
            log.warning("connection %d (uid %d): %s; closing it", self.id, self.peer.uid, exc)
            self.notify("hermes.error", [{"code": code, "message": str(exc), "data": None}])
            self.close()

    def eof_received(self) -> bool | None:
        return False  # close our side too; pending handler results are dropped

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._corked = None
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("client disconnected"))
        self._pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)
        if self._on_close is not None:
            self._on_close(self)

    # --- incoming ----------------------------------------------------------------------------

    def _handle(self, obj: Any) -> None:
        try:
            msg = wire.classify(obj)
        except wire.FrameError as exc:
            err = {"code": Codes.INVALID_REQUEST, "message": str(exc), "data": None}
            if exc.msgid is not None:
                self._send(wire.pack_response(exc.msgid, err, None))
            else:
                self.notify("hermes.error", [err])
            return
        if type(msg) is wire.Request:
            self._on_request(msg)
        elif type(msg) is wire.Response:
            fut = self._pending.pop(msg.msgid, None)
            if fut is None or fut.done():
                log.debug("connection %d: response to unknown id %s ignored", self.id, msg.msgid)
            elif msg.error is not None:
                fut.set_exception(RpcError.from_wire(msg.error))
            else:
                fut.set_result(msg.result)
        else:
            assert type(msg) is wire.Notification
            if self._on_notification is not None:
                try:
                    self._on_notification(self, msg.method, msg.params)
                except Exception:
                    log.exception("notification %s from connection %d failed", msg.method, self.id)

    def _on_request(self, req: wire.Request) -> None:
        try:
            if self.refusing:
                raise RpcError(Codes.SHUTTING_DOWN, "hermesd is shutting down")
            spec, handler, is_async = self.router.lookup(req.method)
            params = spec.validate(req.params)
            if spec.owner_only and not self.is_owner:
                raise RpcError(
                    Codes.PERMISSION_DENIED,
                    f"{req.method} may only be called by the daemon's owner",
                    {"peer_uid": self.peer.uid},
                )
            if is_async and len(self._tasks) >= self.limits.max_inflight:
                raise self._too_many()
            call = Call(self, req.msgid, req.method)
            token = current_connection.set(self)
            try:
                pending = handler(call, params)
            finally:
                current_connection.reset(token)
            if not is_async:
                if not inspect.isawaitable(pending):
                    self._reply(req.msgid, None, pending)
                    return
                if len(self._tasks) >= self.limits.max_inflight:
                    if inspect.iscoroutine(pending):
                        pending.close()
                    raise self._too_many()
        except RpcError as err:
            self._send(wire.pack_response(req.msgid, err.to_wire(), None))
            return
        except Exception:
            log.exception("method %s failed", req.method)
            self._send(wire.pack_response(req.msgid, _internal(req.method), None))
            return
        token = current_connection.set(self)  # the task copies the context it is created in
        task = asyncio.get_running_loop().create_task(self._run(req, pending))
        current_connection.reset(token)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _too_many(self) -> RpcError:
        return RpcError(
            Codes.TOO_MANY_REQUESTS,
            f"more than {self.limits.max_inflight} requests in flight on this connection",
        )

    async def _run(self, req: wire.Request, coro: Awaitable[Any]) -> None:
        try:
            result = await coro
        except RpcError as err:
            self._send(wire.pack_response(req.msgid, err.to_wire(), None))
        except asyncio.CancelledError:
            self._send(
                wire.pack_response(
                    req.msgid,
                    {"code": Codes.SHUTTING_DOWN, "message": "request cancelled", "data": None},
                    None,
                )
            )
            raise
        except Exception as exc:
            code = getattr(exc, "rpc_code", None)
            if code in _DECLARED_CODES:  # an error that names its wire code (a full disk)
                log.error("method %s failed: %s", req.method, exc)
                self._send(
                    wire.pack_response(
                        req.msgid,
                        {"code": code, "message": str(exc), "data": getattr(exc, "rpc_data", None)},
                        None,
                    )
                )
                return
            log.exception("method %s failed", req.method)
            self._send(wire.pack_response(req.msgid, _internal(req.method), None))
        else:
            self._reply(req.msgid, None, result)

    def _reply(self, msgid: int, error: Any, result: Any) -> None:
        try:
            data = self._encoder.response(msgid, error, result)
        except Exception:
            log.exception("result of request %d could not be encoded", msgid)
            data = wire.pack_response(msgid, _internal("encoding the result"), None)
        if len(data) > self.limits.max_message:
            err = RpcError(
                Codes.PAYLOAD_TOO_LARGE,
                f"result of {len(data)} bytes exceeds the {self.limits.max_message}-byte"
                " message limit",
            )
            data = wire.pack_response(msgid, err.to_wire(), None)
        self._send(data)

    # --- outgoing ----------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        if self._corked is not None:  # behind what waits for the end of this loop round
            self._corked.append(data)
            return
        self._write(data)

    def send_soon(self, data: bytes) -> None:
        """Send ``data`` (an encoded message) at the end of the loop's current round.

        Everything queued on this connection meanwhile goes out in one write: a socket write
        costs ~50 µs here, and 100 turns at once emit thousands of events. Whatever is sent on
        the connection after it (a response, a request) waits behind it, so order is kept; a
        connection with nothing queued writes at once as before.
        """
        if self._corked is None:
            self._corked = [data]
            asyncio.get_running_loop().call_soon(self._uncork)
        else:
            self._corked.append(data)

    def _uncork(self) -> None:
        parts, self._corked = self._corked, None
        if parts:
            self._write(parts[0] if len(parts) == 1 else b"".join(parts))

    def _write(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(data)
        if transport.get_write_buffer_size() > self.limits.max_output:
            log.warning(
                "connection %d (uid %d) is not reading its messages (%d bytes queued); "
                "disconnecting it",
                self.id,
                self.peer.uid,
                transport.get_write_buffer_size(),
            )
            transport.abort()

    def send_packed(self, data: bytes) -> None:
        """Send an already-encoded message (one encoding fanned out to many connections)."""
        self._send(data)

    def notify(self, method: str, params: list[Any]) -> None:
        """Send a notification; silently dropped when the connection is gone."""
        self._send(self._encoder.notification(method, params))

    async def request(self, method: str, params: list[Any], timeout: float | None = None) -> Any:
        """Send a request to the client and wait for its response."""
        if self._transport is None:
            raise ConnectionError("client disconnected")
        self._next_id = (self._next_id + 1) & wire.MAX_MSGID
        msgid = self._next_id
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msgid] = fut
        self._send(self._encoder.request(msgid, method, params))
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._pending.pop(msgid, None)

    @property
    def inflight(self) -> int:
        return len(self._tasks)

    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def drain_requests(self, timeout: float) -> None:
        """Wait for in-flight handlers, then cancel the ones still running."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)

    def close(self) -> None:
        """Close after flushing what is queued."""
        self._uncork()
        if self._transport is not None:
            self._transport.close()


def _internal(what: str) -> dict[str, Any]:
    return {
        "code": Codes.INTERNAL,
        "message": f"internal error in {what}; see the daemon log",
        "data": None,
    }
