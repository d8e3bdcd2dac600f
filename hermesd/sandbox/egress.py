"""The egress proxy: the only way to the network for tool processes under
``sandbox.network: allowlist``.

A small HTTP proxy on the daemon's event loop, listening on ``127.0.0.1`` (an ephemeral port)
and on a Unix socket (bound into bubblewrap sandboxes, `hermesd.sandbox.bridge`). It speaks
``CONNECT host:port`` (tunnels, so TLS stays end to end) and plain ``http://`` requests in
absolute form; the daemon resolves the names, so a sandbox needs no DNS of its own.

Every call gets a `ProxyPass` (`EgressProxy.issue`): credentials ``call-<id>:<token>`` in the
proxy URL of its environment, tied to its session and to the context of the tool call (so an
approval is asked of that session's clients and remembered for its requester). Unknown
credentials get 407. A host on ``sandbox.allowed_domains`` (`hermesd.sandbox.allowlist`) is
let through; any other is asked about through the approval broker (``approve``: tool
``network``, rule key ``network:<host>``), once per host per call, and a refusal is a 403
whose body says why. Passes end with their call (`EgressProxy.revoke`), closing its tunnels.

Bad input (a garbage request line, a head over `HEAD_LIMIT`, a port outside 1..65535, a head
that takes longer than `HEAD_TIMEOUT` to arrive) is answered with a 4xx and a sentence, and
costs the other clients nothing.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import contextvars
import logging
import os
import re
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hermesd.sandbox.allowlist import DomainAllowList, canonical_host

log = logging.getLogger(__name__)

HEAD_LIMIT = 32 * 1024  # bytes of request line and headers
HEAD_TIMEOUT = 10.0  # seconds for the whole head to arrive (slow clients are cut off)
CONNECT_TIMEOUT = 15.0  # seconds to resolve and reach the host
LINGER = 2.0  # seconds a refused client's remaining bytes are read and dropped
MAX_HEADERS = 100
MAX_CLIENTS = 512  # connections open at once, all calls together
CHUNK = 65536
Approve = Callable[..., Awaitable[str | None]]

_TOKEN = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    407: "Proxy Authentication Required",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
_SHORT_FOLDER = "hermesd-egress-"
_HOP_BY_HOP = {b"proxy-authorization", b"proxy-connection", b"connection", b"keep-alive"}


class ProxyError(Exception):
    """A request the proxy answers with ``status`` and a sentence."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ProxyPass:
    """One call's credentials and where to reach the proxy."""

    user: str
    token: str
    port: int

    def url(self) -> str:
        """``http://user:token@127.0.0.1:port``."""
        return f"http://{self.user}:{self.token}@127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """The variables that point HTTP clients (curl, pip, git, Python) at the proxy."""
        url = self.url()
        names = ("http_proxy", "https_proxy", "all_proxy")
        out = {name: url for name in names} | {name.upper(): url for name in names}
        return out | {"no_proxy": "", "NO_PROXY": ""}


@dataclass(eq=False)
class _Grant:
    session_id: str
    token: str
    ask: bool  # False: the allow-list only (no session to ask, e.g. an MCP server)
    context: contextvars.Context  # the tool call's: who asked, which client waits
    decisions: dict[str, asyncio.Future[str | None]] = field(default_factory=dict)
    open: set[asyncio.StreamWriter] = field(default_factory=set)


@dataclass(frozen=True)
class _Request:
    method: str
    host: str  # canonical
    port: int
    head: bytes  # what to send upstream first (plain HTTP); empty for CONNECT
    user: str
    token: str


class EgressProxy:
    """The daemon's egress proxy: passes, the allow-list, asking, and the tunnels."""

    def __init__(self, socket_path: Path, approve: Approve | None = None) -> None:
        self.socket_path = socket_path
        self.approve = approve
        self.allow_list = DomainAllowList(())
        self.port = 0
        self._grants: dict[str, _Grant] = {}
        self._lock = threading.Lock()  # passes are issued and revoked on worker threads
        self._sockets: list[socket.socket] = []  # bound and listening, served or about to be
        self._servers: list[asyncio.Server] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients = 0

    @property
    def running(self) -> bool:
        """Whether it listens (connections wait in the backlog until `start` serves them)."""
        return bool(self._sockets)

    def configure(self, allowed_domains: Iterable[str]) -> None:
        """Take a new ``sandbox.allowed_domains`` (checked by the config already)."""
        self.allow_list = DomainAllowList(allowed_domains)

    def listen(self) -> None:
        """Bind 127.0.0.1 (the same port again after a stop) and the Unix socket at once, so
        a call prepared right after a reload finds the proxy; `start` serves them."""
        if self._sockets:
            return
        tcp = socket.create_server(("127.0.0.1", self.port))
        self.port = tcp.getsockname()[1]
        self.socket_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(str(self.socket_path))
        unix.listen(128)
        self._sockets = [tcp, unix]
        log.info("egress proxy on 127.0.0.1:%d and %s", self.port, self.socket_path)

    async def start(self) -> None:
        """Listen (`listen`) and serve (a no-op when serving already)."""
        self.listen()
        if self._servers:
            return
        self._loop = asyncio.get_running_loop()
        tcp, unix = self._sockets
        self._servers = [
            await asyncio.start_server(self._serve, sock=tcp, limit=HEAD_LIMIT),
            await asyncio.start_unix_server(self._serve, sock=unix, limit=HEAD_LIMIT),
        ]

    async def stop(self) -> None:
        """Stop listening and close every tunnel."""
        servers, self._servers = self._servers, []
        sockets, self._sockets = self._sockets, []
        for server in servers:
            server.close()
        for sock in sockets:
            sock.close()
        with self._lock:
            grants, self._grants = list(self._grants.values()), {}
        for grant in grants:
            _close_all(grant)
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        with contextlib.suppress(OSError):
            self.socket_path.unlink()
        if self.socket_path.parent.name.startswith(_SHORT_FOLDER):  # `socket_path_for` made it
            with contextlib.suppress(OSError):
                self.socket_path.parent.rmdir()

    def issue(self, session_id: str | None, ask: bool = True) -> ProxyPass:
        """New credentials for one call (any thread; the current context is the call's)."""
        user = f"call-{secrets.token_hex(6)}"
        grant = _Grant(session_id or "", secrets.token_hex(16), ask, contextvars.copy_context())
        with self._lock:
            self._grants[user] = grant
        return ProxyPass(user, grant.token, self.port)

    def revoke(self, user: str) -> None:
        """The call ended: its credentials stop working and its tunnels close (any thread)."""
        with self._lock:
            grant = self._grants.pop(user, None)
        if grant is not None and self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(_close_all, grant)

    async def admit(self, user: str, host: str, port: int) -> str | None:
        """Decide ``host`` for the pass ``user`` ahead of its request (None: let through, else
        the refusal's sentence). The daemon's own fetches (the web tools) ask first, so the
        time a person takes to answer does not count against their read timeout; the request
        that follows through the proxy finds the answer kept for the call."""
        with self._lock:
            grant = self._grants.get(user)
        if grant is None:
            return "the call's egress pass has ended"
        try:
            request = _Request("CONNECT", canonical_host(host), port, b"", user, grant.token)
        except ValueError as exc:
            return str(exc)
        return await self._decide(grant, request)

    # --- one client ------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients += 1
        grant: _Grant | None = None
        try:
            if self._clients > MAX_CLIENTS:
                raise ProxyError(503, "the proxy has too many open connections; try again")
            request = await _read_request(reader)
            grant = self._grant_of(request)
            grant.open.add(writer)
            refusal = await self._decide(grant, request)
            if refusal is not None:
                raise ProxyError(403, refusal)
            upstream = await _dial(request)
            await self._relay(request, reader, writer, *upstream)
        except ProxyError as exc:
            await _answer(writer, exc.status, str(exc))
            await _discard(reader)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:
            log.exception("egress proxy: a connection failed")
            await _answer(writer, 502, "the proxy failed on this request (see the daemon log)")
        finally:
            self._clients -= 1
            if grant is not None:
                grant.open.discard(writer)
            writer.close()

    def _grant_of(self, request: _Request) -> _Grant:
        with self._lock:
            grant = self._grants.get(request.user)
        if grant is None or not secrets.compare_digest(grant.token, request.token):
            raise ProxyError(
                407,
                "hermesd's egress proxy needs the credentials of a running tool call "
                "(they are in its http_proxy variables and end with the call)",
            )
        return grant

    async def _decide(self, grant: _Grant, request: _Request) -> str | None:
        """None to let the request through, else the 403's sentence; one answer per host
        per call (concurrent requests for a host share it)."""
        host = request.host
        if self.allow_list.allows(host):
            return None
        decision = grant.decisions.get(host)
        if decision is None:
            decision = asyncio.ensure_future(self._ask(grant, host, request.port))
            grant.decisions[host] = decision
        return await asyncio.shield(decision)

    async def _ask(self, grant: _Grant, host: str, port: int) -> str | None:
        if not grant.ask or self.approve is None:
            log.info("egress: %s refused (not in sandbox.allowed_domains)", host)
            return (
                f"{host} is not in sandbox.allowed_domains (this process is not a tool call, "
                "so no one is asked)"
            )
        asked = f"network access to {host} (port {port}), not in sandbox.allowed_domains"
        approving = self.approve(
            "network", {"host": host, "port": port}, grant.session_id, asked, f"network:{host}"
        )
        # in the call's own context: the broker learns who asked and which client waits
        answer = await asyncio.get_running_loop().create_task(
            _awaited(approving), context=grant.context.copy()
        )
        log.info("egress: %s for session %s %s", host, grant.session_id, answer or "approved")
        if answer is None:
            return None
        return f"network access to {host} was not approved: {answer}"

    async def _relay(
        self,
        request: _Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        try:
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(request.head)
            await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer, final=True))
        finally:
            up_writer.close()


async def _awaited(awaitable: Awaitable[str | None]) -> str | None:
    return await awaitable


def _close_all(grant: _Grant) -> None:
    for writer in list(grant.open):
        writer.close()
    for decision in grant.decisions.values():
        decision.cancel()


async def _copy(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, final: bool = False
) -> None:
    """Bytes from ``reader`` to ``writer`` until end of file, then half-close ``writer``;
    ``final``: the upstream's end, after which the whole exchange is over."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if final:
            writer.close()
        elif writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _dial(request: _Request) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        return await asyncio.wait_for(
            asyncio.open_connection(request.host, request.port, limit=HEAD_LIMIT),
            CONNECT_TIMEOUT,
        )
    except TimeoutError:
        raise ProxyError(504, f"{request.host}:{request.port} did not answer in time") from None
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ProxyError(502, f"cannot reach {request.host}:{request.port}: {why}") from None


async def _answer(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    body = f"hermesd egress proxy: {message}\n".encode()
    head = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if status == 407:
        head.append('Proxy-Authenticate: Basic realm="hermesd"')
    with contextlib.suppress(ConnectionError, OSError):
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await asyncio.wait_for(writer.drain(), 5)


async def _discard(reader: asyncio.StreamReader) -> None:
    """Read what the client still sends, for a moment, before closing: closing with unread
    bytes resets the connection, and the client may then never see the answer."""
    with contextlib.suppress(TimeoutError, ConnectionError, OSError):
        async with asyncio.timeout(LINGER):
            while await reader.read(CHUNK):
                pass


# --- parsing -------------------------------------------------------------------------------


async def _read_request(reader: asyncio.StreamReader) -> _Request:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
    except TimeoutError:
        raise ProxyError(408, f"the request head did not arrive within {HEAD_TIMEOUT:g}s") from None
    except asyncio.LimitOverrunError:
        raise ProxyError(431, f"the request head is larger than {HEAD_LIMIT} bytes") from None
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProxyError(400, "the request head ended before its blank line") from None
        raise
    return parse_head(head)


def parse_head(head: bytes) -> _Request:
    """A request head (up to and with its blank line) → what to do; `ProxyError` if bad."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        shown = lines[0][:80].decode("ascii", "replace")
        raise ProxyError(400, f"not an HTTP/1.x request line: {shown!r}")
    if len(lines) - 1 > MAX_HEADERS:
        raise ProxyError(431, f"more than {MAX_HEADERS} header fields")
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.match(name):
            raise ProxyError(
                400, f"a malformed header line: {line[:80].decode('ascii', 'replace')!r}"
            )
        headers.append((name, value.strip()))
    method, target = parts[0].decode(), parts[1].decode("ascii", "replace")
    user, token = _credentials(headers)
    if method == "CONNECT":
        host, port = _authority(target, None)
        return _Request(method, host, port, b"", user, token)
    if not target.lower().startswith("http://"):
        raise ProxyError(
            400,
            "only absolute http:// requests are proxied as such; use CONNECT for https "
            f"(got {target[:80]!r})",
        )
    rest = target[len("http://") :]
    cut = min((rest.find(c) for c in "/?#" if c in rest), default=len(rest))
    host, port = _authority(rest[:cut], 80)
    path = rest[cut:] or "/"
    if path.startswith("?"):
        path = "/" + path
    path = path.split("#", 1)[0]
    kept = [(n, v) for n, v in headers if n.lower() not in _HOP_BY_HOP]
    if not any(n.lower() == b"host" for n, _ in kept):
        kept.insert(0, (b"Host", rest[:cut].encode()))
    upstream = [f"{method} {path} {parts[2].decode()}".encode()]
    upstream += [n + b": " + v for n, v in kept] + [b"Connection: close", b"", b""]
    return _Request(method, host, port, b"\r\n".join(upstream), user, token)


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    """``host[:port]`` (``[v6]:port``) → (canonical host, port); `ProxyError` if bad."""
    if "@" in text:
        raise ProxyError(400, "credentials in the target are not accepted")
    if text.startswith("["):
        end = text.find("]")
        host, rest = text[: end + 1], text[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ("" if not rest else None)
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            host, port_text = text, ""
    if port_text is None:
        raise ProxyError(400, f"a malformed host and port: {text[:80]!r}")
    if not port_text:
        if default_port is None:
            raise ProxyError(400, f"CONNECT needs host:port, got {text[:80]!r}")
        port = default_port
    elif not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ProxyError(400, f"the port must be a number from 1 to 65535, not {port_text[:20]!r}")
    else:
        port = int(port_text)
    try:
        return canonical_host(host), port
    except ValueError as exc:
        raise ProxyError(400, str(exc)) from None


def _credentials(headers: list[tuple[bytes, bytes]]) -> tuple[str, str]:
    for name, value in headers:
        if name.lower() != b"proxy-authorization":
            continue
        scheme, _, encoded = value.partition(b" ")
        if scheme.lower() != b"basic":
            break
        try:
            user, _, token = base64.b64decode(encoded.strip(), validate=True).partition(b":")
        except (binascii.Error, ValueError):
            break
        return user.decode("utf-8", "replace"), token.decode("utf-8", "replace")
    return "", ""


def socket_path_for(scratch: Path) -> Path:
    """Where the proxy's Unix socket goes: the daemon's hidden scratch folder, or a private
    folder under the system tmp when that path is too long for a Unix socket."""
    path = scratch / "egress.sock"
    if len(os.fsencode(path)) < 100:
        return path
    import tempfile

    return Path(tempfile.mkdtemp(prefix=_SHORT_FOLDER)) / "egress.sock"
