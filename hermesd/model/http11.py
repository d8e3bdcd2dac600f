"""A lean HTTP/1.1 transport for the ``openai`` SDK's HTTP client.

The SDK talks HTTP through ``httpx`` (or its fork ``httpx2``), whose default transport stacks
httpcore, anyio and h11: about half the daemon's CPU in a model round went there. This module
is an ``AsyncBaseTransport`` of that library, passed to the SDK as
``http_client=DefaultAsyncHttpxClient(transport=Http11Transport(...))``: the SDK still builds,
authenticates and sends every request and reads every error status; only the bytes on the wire
are ours. A request is one write (head and body together); a response is parsed from one
buffer fed by an ``asyncio.Protocol``; connections are kept alive in a pool per origin, and
one idle for more than ``KEEPALIVE_EXPIRY`` seconds is not reused (as in httpx). The model
client calls ``connect_ahead`` before the SDK builds a request, so that a burst of requests
needing new connections goes out in order, each as soon as it is built.

What it speaks: HTTP/1.1 over TCP or TLS, ``Content-Length``, chunked and close-delimited
bodies, interim ``1xx`` responses, ``Connection: close``; no HTTP/2, no proxies (the model
client keeps the library's own transport when a proxy is configured, see ``hermesd.model.client``).
Errors are the library's exception types, so the SDK maps them as it maps its own
(``ConnectTimeout``/``ReadTimeout``/``WriteTimeout``/``PoolTimeout`` become
``APITimeoutError``; ``ConnectError``/``ReadError``/``WriteError``/``RemoteProtocolError``
become ``APIConnectionError``). A request sent on a kept-alive connection that the server had
already closed (no byte of a response came back) is sent once more on a new connection.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import openai

# The HTTP library the SDK was built on (``httpx`` or ``httpx2``): its base classes and errors.
http: Any = sys.modules[
    next(
        c for c in openai.DefaultAsyncHttpxClient.__mro__ if c.__name__ == "AsyncClient"
    ).__module__.split(".")[0]
]

MAX_HEAD = 64 * 1024  # status line + headers
MAX_CHUNK_LINE = 4096  # a chunk-size line with its extensions
MAX_INTERIM = 10  # 1xx responses before the real one
READ_HIGH_WATER = 1024 * 1024  # stop reading from the socket above this much unread body
MAX_IDLE_PER_ORIGIN = 256
# Seconds an idle connection may still be reused (httpx's default): a connection idle for
# longer may have been dropped by a NAT or firewall without a FIN, and a request sent on it
# would wait for the whole read timeout instead of failing at once.
KEEPALIVE_EXPIRY = 5.0
HEX_DIGITS = b"0123456789abcdefABCDEF"


class _Closed(Exception):
    """The connection ended before the bytes a reader waited for."""


def _cause(exc: _Closed) -> BaseException | None:
    """The socket error behind a ``_Closed`` (None for a clean end of stream)."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else None


class _Conn(asyncio.Protocol):
    """One TCP (or TLS) connection: an unread-bytes buffer and at most one waiting reader."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.error: BaseException | None = None
        self.received_any = False  # a byte of the current response arrived
        self.used = False  # a request was sent on it (one opened ahead has not been)
        self.idle_since = 0.0  # time.monotonic() when it went back to the pool
        self._waiter: asyncio.Future[bool] | None = None
        self._drain: asyncio.Future[None] | None = None
        self._paused = False

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.received_any = True
        if len(self.buffer) > READ_HIGH_WATER and self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.error = exc
        self._wake()
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    def pause_writing(self) -> None:
        self._drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(False)  # False: data or end of stream; True: timed out

    # -- used by the transport ----------------------------------------------------------------

    @property
    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    async def wait_data(self, timeout: float | None) -> None:
        """Wait until more bytes arrive or the connection ends (``_Closed``)."""
        if self.closed:
            raise _Closed(self.error)
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        # a plain timer, not asyncio.timeout(): this runs for every read of every response
        timer = None if timeout is None else loop.call_later(timeout, self._expire, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        if waiter.result():
            raise http.ReadTimeout("timed out waiting for the model endpoint")
        if self.closed and not self.buffer:
            raise _Closed(self.error)

    @staticmethod
    def _expire(waiter: asyncio.Future[bool]) -> None:
        if not waiter.done():
            waiter.set_result(True)

    def take(self, n: int) -> bytes:
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        if self._paused and len(self.buffer) < READ_HIGH_WATER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def write(self, data: bytes, timeout: float | None) -> None:
        assert self.transport is not None
        self.transport.write(data)
        drain = self._drain
        if drain is not None and not drain.done():
            try:
                async with asyncio.timeout(timeout):
                    await drain
            except TimeoutError:
                raise http.WriteTimeout("timed out sending to the model endpoint") from None
        if self.closed:
            raise http.WriteError(f"connection closed while sending: {self.error or 'EOF'}")

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _timeouts(request: Any) -> tuple[float | None, float | None, float | None, float | None]:
    t = request.extensions.get("timeout") or {}
    return t.get("connect"), t.get("read"), t.get("write"), t.get("pool")


def _encode(request: Any, body: bytes) -> bytes:
    """The request as one byte string: request line, headers as httpx built them (Host,
    Content-Length, authorization), body (as one chunk if httpx announced a chunked one)."""
    target = request.url.raw_path or b"/"
    lines = [request.method.encode("ascii") + b" " + target + b" HTTP/1.1"]
    framed = False
    chunked = False
    for name, value in request.headers.raw:
        if b"\r" in name or b"\n" in name or b"\r" in value or b"\n" in value:
            raise http.LocalProtocolError(f"illegal header {name!r}")
        lower = name.lower()
        if lower == b"transfer-encoding":
            framed = chunked = True
        elif lower == b"content-length":
            framed = True
        lines.append(name + b": " + value)
    if body and not framed:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    if chunked:
        body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class _Body(http.AsyncByteStream):
    """The body of one response, read from its connection; the connection goes back to the
    pool when the body was read to its end and the server keeps it alive."""

    def __init__(
        self,
        transport: Http11Transport,
        origin: tuple[str, str, int],
        conn: _Conn,
        framing: str,
        length: int,
        keep: bool,
        read_timeout: float | None,
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._conn = conn
        self._framing = framing  # "length", "chunked", "close" or "none"
        self._left = length  # bytes left of the body (length) or of the current chunk
        self._keep = keep
        self._timeout = read_timeout
        self._done = framing == "none" or (framing == "length" and length == 0)
        self._in_chunk = False
        self._trailers = False
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while not self._done:
                data = self._parse()
                if data:
                    yield data
                elif not self._done:
                    await self._more()
        except _Closed as exc:
            self._drop()
            raise http.RemoteProtocolError(
                "the model endpoint closed the connection in the middle of a response"
            ) from _cause(exc)
        except BaseException:
            # a timeout or a malformed body: the connection is unusable. Also the end of an
            # iteration its reader abandoned (GeneratorExit when the generator is collected,
            # maybe long after aclose() handed a fully read connection back to the pool):
            # then the connection is no longer this body's to close.
            self._drop()
            raise
        self._release()

    def _drop(self) -> None:
        if not self._released:
            self._released = True
            self._conn.close()

    async def _more(self) -> None:
        conn = self._conn
        if conn.closed and self._framing == "close":
            self._done = True
            return
        try:
            await conn.wait_data(self._timeout)
        except _Closed:
            if self._framing == "close":
                self._done = True
                return
            raise

    def _parse(self) -> bytes:
        """As much body as the buffer holds now (b"" when it needs more bytes)."""
        buf = self._conn.buffer
        if self._framing == "close":
            return self._conn.take(len(buf))
        if self._framing == "length":
            data = self._conn.take(min(self._left, len(buf)))
            self._left -= len(data)
            self._done = self._left == 0
            return data
        parts: list[bytes] = []
        while True:
            if self._trailers:  # after the last chunk: trailer lines until an empty one
                end = buf.find(b"\r\n")
                if end < 0:
                    self._check_line(len(buf))
                    break
                line = self._conn.take(end + 2)
                if line == b"\r\n":
                    self._done = True
                    break
                continue
            if self._in_chunk:
                if self._left:
                    piece = self._conn.take(min(self._left, len(buf)))
                    self._left -= len(piece)
                    if piece:
                        parts.append(piece)
                    if self._left:
                        break
                if len(buf) < 2:
                    break
                if buf[:2] != b"\r\n":
                    raise http.RemoteProtocolError("malformed chunked body (no CRLF after a chunk)")
                del buf[:2]
                self._in_chunk = False
            end = buf.find(b"\r\n")
            if end < 0:
                self._check_line(len(buf))
                break
            line = self._conn.take(end + 2)
            digits = line.split(b";", 1)[0].strip()
            if not digits or digits.strip(HEX_DIGITS):  # int() would take "0x1a", "+1", "1_0"
                raise http.RemoteProtocolError(f"malformed chunk size {line[:40]!r}")
            size = int(digits, 16)
            if size == 0:
                self._trailers = True
                continue
            self._left, self._in_chunk = size, True
        return b"".join(parts)

    @staticmethod
    def _check_line(pending: int) -> None:
        if pending > MAX_CHUNK_LINE:
            raise http.RemoteProtocolError("chunk-size line too long")

    def _release(self) -> None:
        """Hand the connection back to the pool (body read to its end) or close it."""
        if self._released:
            return
        self._released = True
        conn = self._conn
        if self._done and self._keep and not conn.buffer and conn.usable:
            self._transport._checkin(self._origin, conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        self._release()  # read in part: the rest of the body would be in the way, so close


class Http11Transport(http.AsyncBaseTransport):
    """HTTP/1.1 with a keep-alive pool per origin; one instance serves any number of clients."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None = None,
        max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN,
        keepalive_expiry: float = KEEPALIVE_EXPIRY,
    ) -> None:
        if ssl_context is not None:  # this transport speaks HTTP/1.1 only: never offer h2
            ssl_context.set_alpn_protocols(["http/1.1"])
        self._ssl = ssl_context
        self._max_idle = max_idle_per_origin
        self._expiry = keepalive_expiry
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._origins: dict[str, tuple[str, str, int]] = {}  # connect_ahead's URLs parsed
        self._closed = False

    def _checkin(self, origin: tuple[str, str, int], conn: _Conn) -> None:
        idle = self._idle.setdefault(origin, [])
        if self._closed or len(idle) >= self._max_idle:
            conn.close()
        else:
            conn.idle_since = time.monotonic()
            idle.append(conn)

    def _checkout(self, origin: tuple[str, str, int]) -> _Conn | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()  # the most recently used first
            if conn.idle_since < time.monotonic() - self._expiry:
                for stale in (conn, *idle):  # the rest went idle earlier still
                    stale.close()
                idle.clear()
                return None
            if conn.usable and not conn.buffer:
                return conn
            conn.close()
        return None

    async def connect_ahead(self, url: str, timeout: float | None) -> None:
        """Have a kept-alive connection to ``url``'s origin idle, opening one if none is.

        Called before the SDK builds a request, so that the request goes out as soon as it is
        built. Otherwise, when many requests start together on one event loop and need new
        connections (a burst of turns), each connect's completion waits behind the SDK work of
        every request started after it, and none goes out until all are built. A failure is
        left to the request, which reports it.
        """
        if self._closed:
            return
        origin = self._origins.get(url)
        if origin is None:
            origin = _origin(http.URL(url))
            if origin is None:
                return
            if len(self._origins) < 64:  # a handful of endpoints, but never unbounded
                self._origins[url] = origin
        conn = self._checkout(origin)
        if conn is not None:  # back where it was, its idle time unchanged
            self._idle[origin].append(conn)
            return
        try:
            conn = await self._connect(origin, timeout)
        except (http.ConnectError, http.ConnectTimeout):
            return
        self._checkin(origin, conn)

    async def _connect(self, origin: tuple[str, str, int], timeout: float | None) -> _Conn:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        context: ssl.SSLContext | None = None
        if scheme == "https":
            if self._ssl is None:  # building one reads the CA bundle (~20 ms): build it once
                self._ssl = ssl.create_default_context()
            context = self._ssl
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    _Conn,
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                )
        except TimeoutError:
            raise http.ConnectTimeout(f"timed out connecting to {host}:{port}") from None
        except (OSError, ssl.SSLError) as exc:
            raise http.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        return conn

    async def handle_async_request(self, request: Any) -> Any:
        if self._closed:
            raise http.ConnectError("the HTTP transport is closed")
        origin = _origin(request.url)
        if origin is None:
            raise http.UnsupportedProtocol(f"unsupported URL scheme {request.url.scheme!r}")
        connect_t, read_t, write_t, _ = _timeouts(request)
        data = _encode(request, await request.aread())
        conn = self._checkout(origin)
        reused = conn is not None and conn.used
        while True:
            if conn is None:
                conn = await self._connect(origin, connect_t)
            try:
                return await self._exchange(request, origin, conn, data, read_t, write_t)
            except (_Closed, http.WriteError) as exc:
                conn.close()
                if reused and not conn.received_any:
                    # a kept-alive connection the server had closed: once more on a new one
                    conn, reused = None, False
                    continue
                if isinstance(exc, http.WriteError):
                    raise
                raise http.RemoteProtocolError(
                    "the model endpoint closed the connection "
                    + (
                        "in the middle of a response"
                        if conn.received_any
                        else "without a complete response"
                    )
                ) from _cause(exc)
            except BaseException:
                conn.close()
                raise

    async def _exchange(
        self,
        request: Any,
        origin: tuple[str, str, int],
        conn: _Conn,
        data: bytes,
        read_t: float | None,
        write_t: float | None,
    ) -> Any:
        conn.received_any = False
        conn.used = True
        await conn.write(data, write_t)
        for _ in range(MAX_INTERIM + 1):
            status, reason, version, headers = await self._read_head(conn, read_t)
            if not 100 <= status < 200 or status == 101:
                break
            # interim (100 Continue, 103 Early Hints): the real one follows
        else:
            raise http.RemoteProtocolError(f"more than {MAX_INTERIM} interim responses")
        framing, length, keep = _framing(request.method, status, version, headers)
        stream = _Body(self, origin, conn, framing, length, keep, read_t)
        return http.Response(
            status,
            headers=headers,
            stream=stream,
            extensions={"http_version": version, "reason_phrase": reason},
        )

    @staticmethod
    async def _read_head(
        conn: _Conn, read_t: float | None
    ) -> tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]:
        buf = conn.buffer
        start = 0
        while True:
            end = buf.find(b"\r\n\r\n", max(0, start - 3))
            if end >= 0 or len(buf) > MAX_HEAD:
                break
            start = len(buf)
            await conn.wait_data(read_t)
        if not 0 <= end <= MAX_HEAD:  # also when a head that is too long came in one read
            raise http.RemoteProtocolError("response headers too long")
        lines = conn.take(end + 4)[:-4].split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
            raise http.RemoteProtocolError(f"malformed status line {lines[0][:80]!r}")
        headers = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                raise http.RemoteProtocolError(f"malformed header line {line[:80]!r}")
            headers.append((name, value.strip()))
        return int(code), reason, version, headers

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()


def _origin(url: Any) -> tuple[str, str, int] | None:
    """Scheme, host and port of an http(s) URL (the pool's key); None for another scheme."""
    scheme = url.scheme
    if scheme not in ("http", "https"):
        return None
    return scheme, url.host, url.port or (443 if scheme == "https" else 80)


def _framing(
    method: str, status: int, version: bytes, headers: list[tuple[bytes, bytes]]
) -> tuple[str, int, bool]:
    """How the body is delimited, its length, and whether the connection stays open after it."""
    encodings = b""
    length: bytes | None = None
    connection = b""
    for name, value in headers:
        lower = name.lower()
        if lower == b"transfer-encoding":
            encodings += b"," + value.lower()
        elif lower == b"content-length":
            if length is not None and length != value:
                raise http.RemoteProtocolError("conflicting Content-Length headers")
            length = value
        elif lower == b"connection":
            connection += b"," + value.lower()
    tokens = {t.strip() for t in connection.split(b",")}
    keep = b"close" not in tokens if version == b"HTTP/1.1" else b"keep-alive" in tokens
    if method == "HEAD" or status in (204, 304):
        return "none", 0, keep
    if encodings:
        if encodings.rsplit(b",", 1)[-1].strip() != b"chunked":
            return "close", 0, False  # the body runs to the end of the connection
        # chunked wins over a Content-Length sent with it, but such a connection is not
        # trusted with another request (RFC 9112 §6.3)
        return "chunked", 0, keep and length is None
    if length is not None:
        if not length.isdigit():  # int() would take "+5" or "5_0"
            raise http.RemoteProtocolError(f"malformed Content-Length {length[:40]!r}")
        return "length", int(length), keep
    return "close", 0, False
