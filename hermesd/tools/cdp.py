"""A Chrome DevTools Protocol client: JSON messages over a pipe pair or a websocket.

`CdpConnection` owns message ids and pending replies over one transport: `PipeTransport` for a
browser started with ``--remote-debugging-pipe`` (NUL-terminated JSON on two file descriptors,
read with the event loop's reader callbacks, so nothing blocks the loop), `WebSocketTransport`
for a browser a provider runs elsewhere (the ``websockets`` client). `CdpConnection.send`
awaits one command's result (a `CdpError` with the browser's message when it fails, or when the
connection ends first); events go to the listeners registered with `on`. It knows nothing of
pages or tools: `hermesd.tools.browser_session` builds on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)

MAX_MESSAGE = 64 * 1024 * 1024  # a screenshot of a tall page is large; more is refused
Listener = Callable[[dict[str, Any], str | None], None]


class CdpError(Exception):
    """A command the browser refused, or a connection that ended; the message says which."""


class Transport(Protocol):
    """One way to exchange whole CDP messages."""

    async def send(self, text: str) -> None: ...

    async def receive(self) -> str | None:
        """The next message, None once the other end has closed."""
        ...

    async def close(self) -> None: ...


class PipeTransport:
    """``--remote-debugging-pipe``: we write commands to ``write_fd``, read from ``read_fd``."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self._read_fd, self._write_fd = read_fd, write_fd
        self._loop = asyncio.get_running_loop()
        self._buffer = bytearray()
        self._messages: asyncio.Queue[str | None] = asyncio.Queue()
        self._loop.add_reader(read_fd, self._readable)
        self._closed = False

    def _readable(self) -> None:
        try:
            chunk = os.read(self._read_fd, 1 << 20)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._loop.remove_reader(self._read_fd)
            self._messages.put_nowait(None)
            return
        self._buffer += chunk
        while (end := self._buffer.find(b"\0")) >= 0:
            self._messages.put_nowait(self._buffer[:end].decode("utf-8", "replace"))
            del self._buffer[: end + 1]
        if len(self._buffer) > MAX_MESSAGE:
            log.error("browser pipe: a message larger than %d bytes; closing", MAX_MESSAGE)
            self._loop.remove_reader(self._read_fd)
            self._messages.put_nowait(None)

    async def send(self, text: str) -> None:
        if self._closed:
            raise CdpError("the browser connection is closed")
        data = memoryview(text.encode() + b"\0")
        while data:
            try:
                written = os.write(self._write_fd, data)
            except BlockingIOError:
                done = self._loop.create_future()
                self._loop.add_writer(self._write_fd, done.set_result, None)
                try:
                    await done
                finally:
                    self._loop.remove_writer(self._write_fd)
                continue
            except OSError as exc:
                raise CdpError(f"the browser connection is closed ({exc})") from None
            data = data[written:]

    async def receive(self) -> str | None:
        return await self._messages.get()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._read_fd)
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._messages.put_nowait(None)


class WebSocketTransport:
    """A browser's DevTools websocket (``ws://`` or ``wss://``), as a provider returns it."""

    def __init__(self, socket: Any) -> None:
        self._socket = socket

    @classmethod
    async def connect(cls, url: str, timeout: float) -> WebSocketTransport:
        """Open ``url``; `CdpError` when it cannot be reached in ``timeout`` seconds."""
        from websockets.asyncio.client import connect

        try:
            socket = await asyncio.wait_for(
                connect(url, max_size=MAX_MESSAGE, ping_interval=None, proxy=None), timeout
            )
        except (OSError, TimeoutError, ValueError) as exc:
            raise CdpError(f"could not reach the browser's DevTools URL: {exc}") from None
        except Exception as exc:  # the library's handshake errors
            raise CdpError(f"the browser's DevTools URL refused the connection: {exc}") from None
        return cls(socket)

    async def send(self, text: str) -> None:
        try:
            await self._socket.send(text)
        except Exception as exc:
            raise CdpError(f"the browser connection is closed ({exc})") from None

    async def receive(self) -> str | None:
        try:
            message = await self._socket.recv()
        except Exception:
            return None
        return message if isinstance(message, str) else message.decode("utf-8", "replace")

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._socket.close(), 5)


class CdpConnection:
    """Commands and events over one `Transport`; `start` begins reading."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._next = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._listeners: dict[str, list[Listener]] = {}
        self._reader: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()

    def start(self) -> None:
        """Start reading messages (replies and events)."""
        self._reader = asyncio.get_running_loop().create_task(self._read())

    def on(self, method: str, listener: Listener) -> None:
        """Call ``listener(params, session_id)`` for every event ``method``."""
        self._listeners.setdefault(method, []).append(listener)

    async def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """The result of one command; `CdpError` when it fails or takes over ``timeout``."""
        if self.closed.is_set():
            raise CdpError("the browser has closed")
        self._next += 1
        ident = self._next
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        reply = asyncio.get_running_loop().create_future()
        self._pending[ident] = reply
        try:
            await self.transport.send(json.dumps(message))
            return await asyncio.wait_for(reply, timeout)
        except TimeoutError:
            raise CdpError(f"the browser did not answer {method} in {timeout:g}s") from None
        finally:
            self._pending.pop(ident, None)

    async def _read(self) -> None:
        try:
            while (text := await self.transport.receive()) is not None:
                try:
                    message = json.loads(text)
                except ValueError:
                    log.warning("browser: a message that is not JSON was dropped")
                    continue
                if isinstance(message, dict):
                    self._dispatch(message)
        finally:
            self.closed.set()
            for reply in self._pending.values():
                if not reply.done():
                    reply.set_exception(CdpError("the browser connection closed"))

    def _dispatch(self, message: dict[str, Any]) -> None:
        ident = message.get("id")
        if ident is not None:
            reply = self._pending.get(ident)
            if reply is None or reply.done():
                return
            if "error" in message:
                error = message["error"]
                text = error.get("message") if isinstance(error, dict) else error
                reply.set_exception(CdpError(str(text)))
            else:
                reply.set_result(message.get("result") or {})
            return
        for listener in self._listeners.get(str(message.get("method")), ()):
            try:
                listener(message.get("params") or {}, message.get("sessionId"))
            except Exception:
                log.exception("browser: an event listener failed")

    async def close(self) -> None:
        """Close the transport and stop reading."""
        await self.transport.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self.closed.set()
