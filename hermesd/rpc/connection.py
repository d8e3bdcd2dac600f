"""One msgpack-RPC connection on the daemon side, as an asyncio protocol.

Owns message ids in both directions, the futures of requests we sent, the handler tasks of
requests we received (many in flight, answered in completion order), notifications, and the
bounds on a connection: in-flight requests and bytes waiting to be written to a slow reader,
and its share of the daemon's memory budgets (``rpc.budgets``: bytes of a partial message,
of requests in flight and of queued output, per uid and in all). Its handlers are cancelled
when the peer goes away. It tells the server when it is overdue (a partial message stalled,
or idle with nothing in flight and no session attached). It knows the method table only
through a ``Router``; it never touches sockets beyond its transport and knows nothing about
sessions, plugins or systemd.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import itertools
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from hermesd.caller import MEMBER, Caller, current_caller
from hermesd.rpc import wire
from hermesd.rpc.access import AccessGate
from hermesd.rpc.budgets import Budgets, OverBudget
from hermesd.rpc.protocol import METHODS, Codes, MethodSpec, RpcError

log = logging.getLogger(__name__)

#: The connection whose request is being handled; tasks a handler starts inherit it (a turn
#: started by session.send, a tool call from tools.call). Read only in ``rpc/`` and the
#: services' RPC edges (``*/service.py``); domain code gets a `Caller` (tests/unit/test_caller.py).
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
    frame_timeout: float = 30.0  # a partial message with no whole one for this long: closed
    idle_timeout: float = 900.0  # nothing in flight, nothing attached, silent: closed (0: never)


@dataclass(slots=True)
class Call:
    """What a handler knows about the request it serves: the connection and who is asking."""

    conn: Connection
    msgid: int
    method: str
    caller: Caller


Handler = Callable[[Call, dict[str, Any]], Any]


class Router:
    """Maps declared method names to handlers; refuses names that are not declared."""

    def __init__(self) -> None:
        self._routes: dict[str, tuple[MethodSpec, Handler, bool]] = {}
        self.gate = AccessGate()  # each method's declared access, checked before its handler

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
_ADMITTED: weakref.WeakValueDictionary[int, Connection] = weakref.WeakValueDictionary()


def connection_of(caller: Caller | None) -> Connection | None:
    """The open connection ``caller`` asked through (to ask its client something back)."""
    conn = _ADMITTED.get(caller.connection_id) if caller is not None else None
    return conn if conn is not None and conn.is_open else None


# Queued output is counted against the budgets exactly once it passes this mark (asyncio tells
# the protocol when such a backlog has drained); below it, a connection's count may lag.
OUTPUT_MARK = 64 * 1024
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
        budgets: Budgets | None = None,
    ) -> None:
        self.id = next(self._ids)
        self.router = router
        self.peer = Peer(0, -1, -1)
        #: who is asking, set when the server admits the peer (`admitted`); until then no one
        self.caller = Caller(-1, 0, MEMBER, connection_id=self.id)
        self.limits = limits
        self._admit = admit
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
        self._budgets = budgets
        self._input_held = 0  # bytes of a partial message counted against the budget
        self._output_held = 0  # queued output counted against the budget
        #: sessions this connection is attached to (kept by the session service): an attached
        #: connection waits for events, so it is never idle
        self.attachments: set[str] = set()
        self.last_active = time.monotonic()
        self.partial_since: float | None = None  # when the current partial message began
        self.cancelled_on_close = 0  # handlers cancelled because the peer went away

    # --- transport callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        with contextlib.suppress(NotImplementedError):  # a stand-in transport (bench/ipc.py)
            transport.set_write_buffer_limits(high=OUTPUT_MARK, low=0)
        refusal = self._admit(self, transport)  # sets peer and caller
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
        self.last_active = time.monotonic()
        whole = False
        try:
            for obj in self._decoder.feed(data):
                whole = True
                self._handle(obj)
                if self._transport is None or self._transport.is_closing():
                    return
        except wire.StreamError as exc:
            code = Codes.PAYLOAD_TOO_LARGE if exc.too_large else Codes.PARSE
            self._close_with(code, str(exc))
        finally:
            self._settle_input(whole)

    def _settle_input(self, whole: bool) -> None:
        """Count what waits for the rest of a message against the input budget (closing the
        connection past it: one read, at most the read buffer, may overshoot); note when
        that partial message began."""
        buffered = self._decoder.buffered
        if self._budgets is not None and buffered != self._input_held:
            try:
                if buffered > self._input_held:
                    self._budgets.take("input", self.peer.uid, buffered - self._input_held)
                else:
                    self._budgets.give("input", self.peer.uid, self._input_held - buffered)
                self._input_held = buffered
            except OverBudget as exc:
                self._close_with(Codes.OVER_BUDGET, str(exc), {"budget": exc.kind})
        if not buffered:
            self.partial_since = None
        elif whole or self.partial_since is None:
            self.partial_since = time.monotonic()

    def _close_with(self, code: str, message: str, data: Any = None) -> None:
        log.warning("connection %d (uid %d): %s; closing it", self.id, self.peer.uid, message)
        self.notify("hermes.error", [{"code": code, "message": message, "data": data}])
        self.close()

    def overdue(self, now: float) -> tuple[str, str] | None:
        """(kind, reason) when the server should close this connection now: a partial message with
        no whole one for ``frame_timeout``, or idle (nothing in flight, no request of ours
        unanswered, no session attached, silent) for ``idle_timeout``."""
        limits = self.limits
        if self.partial_since is not None:
            if limits.frame_timeout and now - self.partial_since > limits.frame_timeout:
                return "partial_message", (
                    f"a partial message was not completed within {limits.frame_timeout:g}s"
                )
            return None
        if (
            limits.idle_timeout
            and now - self.last_active > limits.idle_timeout
            and not self._tasks
            and not self._pending
            and not self.attachments
        ):
            return "idle", f"idle for {limits.idle_timeout:g}s"
        return None

    def expire(self, reason: str) -> None:
        """Close an overdue connection, telling the peer why (``hermes.error.Timeout``)."""
        self._close_with(Codes.TIMEOUT, f"hermesd closed the connection: {reason}")

    def eof_received(self) -> bool | None:
        return False  # close our side too; pending handler results are dropped

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._corked = None
        # Nobody can read the answers any more: stop the work and free what it holds.
        for task in list(self._tasks):
            if not task.done():
                task.cancel()
                self.cancelled_on_close += 1
        if self.cancelled_on_close:
            log.info(
                "connection %d (uid %d) went away: %d request(s) cancelled",
                self.id,
                self.peer.uid,
                self.cancelled_on_close,
            )
        if self._budgets is not None:
            self._budgets.give("input", self.peer.uid, self._input_held)
            self._budgets.give("output", self.peer.uid, self._output_held)
        self._input_held = self._output_held = 0
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("client disconnected"))
        self._pending.clear()
        self.router.gate.confirmations.forget(self.id)
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
            if self.router.gate.admit(spec, self.caller, params):
                handler, is_async = self.router.gate.guarded(spec, handler), True
            if is_async and len(self._tasks) >= self.limits.max_inflight:
                raise _too_many(self.limits.max_inflight)
            # a request whose handler outlives this call keeps its params alive: counted
            size = self._hold_params(req.method) if is_async else 0
            call = Call(self, req.msgid, req.method, self.caller)
            token, caller_token = current_connection.set(self), current_caller.set(self.caller)
            try:
                pending = handler(call, params)
            except BaseException:
                self._release_params(size)
                raise
            finally:
                current_caller.reset(caller_token)
                current_connection.reset(token)
            if not is_async:
                if not inspect.isawaitable(pending):
                    self._reply(req.msgid, None, pending)
                    return
                try:  # a sync handler that returned work to wait for (ping with a delay)
                    if len(self._tasks) >= self.limits.max_inflight:
                        raise _too_many(self.limits.max_inflight)
                    size = self._hold_params(req.method)
                except RpcError:
                    if inspect.iscoroutine(pending):
                        pending.close()
                    raise
        except RpcError as err:
            self._send(wire.pack_response(req.msgid, err.to_wire(), None))
            return
        except Exception:
            log.exception("method %s failed", req.method)
            self._send(wire.pack_response(req.msgid, _internal(req.method), None))
            return
        # the task copies the context it is created in
        token, caller_token = current_connection.set(self), current_caller.set(self.caller)
        task = asyncio.get_running_loop().create_task(self._run(req, pending))
        current_caller.reset(caller_token)
        current_connection.reset(token)
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._finished, size))

    def _hold_params(self, method: str) -> int:
        """Count the request just decoded against the in-flight budget; its size."""
        if self._budgets is None:
            return 0
        size = self._decoder.last_size
        try:
            self._budgets.take("inflight", self.peer.uid, size)
        except OverBudget as exc:
            log.warning(
                "connection %d (uid %d): %s refused: %s", self.id, self.peer.uid, method, exc
            )
            raise RpcError(
                Codes.OVER_BUDGET,
                f"{method} not run: {exc}; retry when requests in flight have finished",
                {"budget": exc.kind, "scope": exc.scope, "limit": exc.limit},
            ) from None
        return size

    def _release_params(self, size: int) -> None:
        if self._budgets is not None:
            self._budgets.give("inflight", self.peer.uid, size)

    def _finished(self, size: int, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._release_params(size)
        self.last_active = time.monotonic()

    async def _run(self, req: wire.Request, coro: Awaitable[Any]) -> None:
        try:
            result = await coro
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
            self._send(wire.pack_response(req.msgid, _failure(req.method, exc), None))
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
        queued = transport.get_write_buffer_size()
        if queued == self._output_held:
            return
        if queued > self.limits.max_output:
            log.warning(
                "connection %d (uid %d) is not reading its messages (%d bytes queued); "
                "disconnecting it",
                self.id,
                self.peer.uid,
                queued,
            )
            transport.abort()
            return
        if self._budgets is None:
            return
        try:
            self._account_output(queued)
        except OverBudget as exc:
            log.warning(
                "connection %d (uid %d) is not reading its messages (%d bytes queued): %s; "
                "disconnecting it",
                self.id,
                self.peer.uid,
                queued,
                exc,
            )
            transport.abort()

    def _account_output(self, queued: int) -> None:
        assert self._budgets is not None
        if queued > self._output_held:
            self._budgets.take("output", self.peer.uid, queued - self._output_held)
        else:
            self._budgets.give("output", self.peer.uid, self._output_held - queued)
        self._output_held = queued

    def pause_writing(self) -> None:
        pass  # the peer reads slowly; max_output and the output budget bound what waits

    def resume_writing(self) -> None:
        """The queue has drained (asyncio calls this after a backlog): stop counting it."""
        if self._budgets is not None and self._transport is not None:
            self._account_output(self._transport.get_write_buffer_size())

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

    def admitted(self, trust: str, tool_origin: str | None) -> None:
        """Record who the admitted peer is (the server's verdict): its `Caller`."""
        peer = self.peer
        self.caller = Caller(peer.uid, peer.pid, trust, self.client_name, self.id, tool_origin)
        _ADMITTED[self.id] = self

    @property
    def is_owner(self) -> bool:
        """The peer is the daemon's owner (not a member, not a tool's process)."""
        return self.caller.is_owner

    @property
    def client_name(self) -> str:
        """The client's name from ``hello`` (for logs and ``session.attach``'s ``clients``)."""
        return self.caller.client

    @client_name.setter
    def client_name(self, name: str) -> None:
        self.caller = dataclasses.replace(self.caller, client=name)

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


def _too_many(limit: int) -> RpcError:
    return RpcError(
        Codes.TOO_MANY_REQUESTS, f"more than {limit} requests in flight on this connection"
    )


def _failure(method: str, exc: Exception) -> dict[str, Any]:
    """The error map answering a handler that raised ``exc`` (the traceback goes to the log)."""
    if isinstance(exc, RpcError):
        return exc.to_wire()
    code = getattr(exc, "rpc_code", None)
    if code in _DECLARED_CODES:  # an error that names its wire code (a full disk)
        log.error("method %s failed: %s", method, exc)
        return {"code": code, "message": str(exc), "data": getattr(exc, "rpc_data", None)}
    log.exception("method %s failed", method, exc_info=exc)
    return _internal(method)


def _internal(what: str) -> dict[str, Any]:
    return {
        "code": Codes.INTERNAL,
        "message": f"internal error in {what}; see the daemon log",
        "data": None,
    }
