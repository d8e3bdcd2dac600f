"""The ACP bridge's connection to hermesd: the socket ``hermesctl.client.Client`` opened, driven
from asyncio.

``Client`` finds the socket, reports a daemon that is not running and says ``hello``; this
module takes its socket over so that requests, the daemon's notifications and its
``approval.request`` requests can interleave with the editor's messages on one event loop.
It keeps no state of its own beyond the requests in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from hermesctl.client import Client
from hermesd.rpc import wire
from hermesd.rpc.protocol import Codes, RpcError

log = logging.getLogger("hermesctl.acp")

NotificationHandler = Callable[[str, dict[str, Any]], None]
RequestHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]


class DaemonLink:
    """Requests to hermesd and what it sends back, on the running event loop."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_notification: NotificationHandler,
        on_request: RequestHandler,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._on_notification = on_notification
        self._on_request = on_request
        self._decoder = wire.Decoder(wire.DEFAULT_MAX_MESSAGE)
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = asyncio.Event()

    @classmethod
    async def open(
        cls, client: Client, on_notification: NotificationHandler, on_request: RequestHandler
    ) -> DaemonLink:
        """Take over ``client``'s connected socket (hello already said)."""
        sock = socket.socket(fileno=client.sock.detach())
        sock.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=2**20)
        return cls(reader, writer, on_notification, on_request)

    def start(self) -> asyncio.Task[None]:
        """Start reading what the daemon sends; the task ends when the daemon hangs up."""
        return asyncio.create_task(self._read_loop(), name="hermesd-link")

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One request; its result, or the daemon's error as RpcError."""
        if self.closed.is_set():
            raise RpcError(Codes.SHUTTING_DOWN, "the connection to hermesd is closed")
        self._next_id = (self._next_id + 1) & wire.MAX_MSGID
        msgid = self._next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msgid] = future
        try:
            self._writer.write(wire.pack_request(msgid, method, [params or {}]))
            await self._writer.drain()
            return await future
        finally:
            self._pending.pop(msgid, None)

    async def close(self) -> None:
        """Hang up."""
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    async def _read_loop(self) -> None:
        try:
            while data := await self._reader.read(65536):
                for obj in self._decoder.feed(data):
                    self._dispatch(wire.classify(obj))
        except (OSError, wire.FrameError, wire.StreamError) as exc:
            log.warning("connection to hermesd failed: %s", exc)
        finally:
            self.closed.set()
            gone = RpcError(Codes.SHUTTING_DOWN, "hermesd closed the connection")
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(gone)

    def _dispatch(self, msg: wire.Message) -> None:
        if type(msg) is wire.Response:
            future = self._pending.get(msg.msgid)
            if future is None or future.done():
                return
            if msg.error is not None:
                future.set_exception(RpcError.from_wire(msg.error))
            else:
                future.set_result(msg.result)
        elif type(msg) is wire.Notification:
            params = msg.params[0] if msg.params and isinstance(msg.params[0], dict) else {}
            self._on_notification(msg.method, params)
        elif type(msg) is wire.Request:
            params = msg.params[0] if msg.params and isinstance(msg.params[0], dict) else {}
            task = asyncio.create_task(self._answer(msg.msgid, msg.method, params))
            self._tasks.add(task)  # held so that it is not collected while it waits
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, msgid: int, method: str, params: dict[str, Any]) -> None:
        try:
            result = await self._on_request(method, params)
        except RpcError as err:
            reply = wire.pack_response(msgid, err.to_wire(), None)
        except Exception as exc:  # the editor's side failed: answer nothing, say why in the log
            log.exception("answering %s failed", method)
            failure = RpcError(Codes.INTERNAL, f"hermesctl acp: {exc}")
            reply = wire.pack_response(msgid, failure.to_wire(), None)
        else:
            reply = wire.pack_response(msgid, None, result)
        if not self.closed.is_set():
            with contextlib.suppress(OSError):
                self._writer.write(reply)
                await self._writer.drain()
