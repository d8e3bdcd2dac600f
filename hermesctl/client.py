"""A small synchronous msgpack-RPC client for hermesd.

Blocking socket, one thread, no asyncio: requests may be pipelined (``send`` then ``wait``),
notifications that arrive meanwhile are queued for ``notifications()``, and requests the daemon
sends to us (approvals) are answered by ``on_request``. Reuses ``hermesd.rpc.wire`` and
``hermesd.rpc.protocol``, which import nothing heavy.

    with Client.connect() as c:
        print(c.call("status"))
"""

from __future__ import annotations

import _socket  # the C module: socket.py adds enum and selectors, milliseconds at start-up
import collections
import contextlib
import os
import time

from hermesd.rpc import paths, wire
from hermesd.rpc.protocol import PROTOCOL_VERSION, Codes, RpcError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and pathlib cost milliseconds at start-up
    import socket
    from collections.abc import Callable, Iterator
    from typing import Any

    RequestHandler = Callable[[str, list[Any]], Any]


class DaemonNotRunning(Exception):
    """Nothing listens on the socket."""

    def __init__(self, path: str, reason: str, tried: list[str] | None = None) -> None:
        also = [p for p in tried or [] if p != path]
        where = f" (also tried {', '.join(also)})" if also else ""
        super().__init__(
            f"hermesd is not running on {path} ({reason}){where}. Start it with "
            f"{start_hint()}, or point at another socket with --socket or HERMES_SOCKET."
        )
        self.path = path


SYSTEM_UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)
USER_UNIT_DIRS = (
    "/etc/systemd/user",
    "/usr/lib/systemd/user",
    "/usr/share/systemd/user",
    "/run/systemd/user",
)


def _user_unit_dirs() -> list[str]:
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    data = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return [
        os.path.join(config, "systemd", "user"),
        os.path.join(data, "systemd", "user"),
        *USER_UNIT_DIRS,
    ]


def start_hint() -> str:
    """How to start hermesd here: `hermesd`, plus the systemd units that are installed."""
    ways = ["`hermesd`"]
    for unit in ("hermesd.socket", "hermesd.service"):
        if any(os.path.exists(os.path.join(d, unit)) for d in SYSTEM_UNIT_DIRS):
            ways.append(f"`sudo systemctl start {unit.replace('.service', '')}`")
            break
    for unit in ("hermesd.socket", "hermesd.service"):
        if any(os.path.exists(os.path.join(d, unit)) for d in _user_unit_dirs()):
            ways.append(f"`systemctl --user start {unit.replace('.service', '')}`")
            break
    return ways[0] if len(ways) == 1 else f"{ways[0]} (or {' / '.join(ways[1:])})"


class ConnectionClosed(Exception):
    """The daemon closed the connection."""


class Client:
    """One connection to hermesd."""

    def __init__(
        self,
        sock: socket.socket | _socket.socket,
        path: str,
        max_message: int = wire.DEFAULT_MAX_MESSAGE,
    ) -> None:
        self.sock = sock
        self.path = path
        self._decoder = wire.Decoder(max_message)
        self._buf = bytearray(65536)
        self._view = memoryview(self._buf)
        self._next_id = 0
        self._responses: dict[int, wire.Response] = {}
        self._notes: collections.deque[wire.Notification] = collections.deque()
        self._last_error: RpcError | None = None
        self.on_request: RequestHandler | None = None
        self.server_info: dict[str, Any] = {}
        self._held: list[wire.Request] | None = None  # requests read by read_ready

    @classmethod
    def connect(
        cls,
        path: str | os.PathLike[str] | None = None,
        timeout: float | None = 10.0,
        hello: bool = False,
    ) -> Client:
        """Connect to the daemon's socket (found as the daemon finds it)."""
        candidates = paths.client_socket_candidates(os.fspath(path) if path else None)
        sock, sock_path = cls._open(candidates, timeout)
        client = cls(sock, sock_path)
        if hello:
            client.hello()
        return client

    @staticmethod
    def _open(candidates: list[str], timeout: float | None) -> tuple[_socket.socket, str]:
        """A socket connected to the first candidate that answers; DaemonNotRunning names
        the first candidate when none does (a stale file counts as none)."""
        reason = "no socket file"
        for i, sock_path in enumerate(candidates):
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(sock_path)
                return sock, sock_path
            except FileNotFoundError:
                sock.close()
                continue
            except ConnectionRefusedError:
                sock.close()
                if i == 0:
                    reason = "connection refused"
                continue
            except PermissionError:
                sock.close()
                raise RpcError(
                    Codes.PERMISSION_DENIED,
                    f"no permission to open {sock_path}; are you in the daemon's group?",
                ) from None
            except OSError as exc:
                sock.close()
                if i == 0:
                    reason = exc.strerror or str(exc)
                continue
        raise DaemonNotRunning(candidates[0], reason, [p for p in candidates if os.path.exists(p)])

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(OSError):
            self.sock.close()

    def hello(self, client_name: str = "hermesctl") -> dict[str, Any]:
        """Negotiate the protocol; raises RpcError(IncompatibleVersion) on a major mismatch."""
        self.server_info = self.call("hello", {"protocol": PROTOCOL_VERSION, "client": client_name})
        return self.server_info

    # --- requests ----------------------------------------------------------------------------

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        """Send a request without waiting; returns its id for ``wait``."""
        self._next_id = (self._next_id + 1) & wire.MAX_MSGID
        msgid = self._next_id
        self._write(wire.pack_request(msgid, method, [params] if params is not None else []))
        return msgid

    def wait(self, msgid: int, timeout: float | None = None) -> Any:
        """Wait for the response to ``msgid``; raise RpcError if it is an error."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while msgid not in self._responses:
            self._read_once(deadline)
        resp = self._responses.pop(msgid)
        if resp.error is not None:
            raise RpcError.from_wire(resp.error)
        return resp.result

    def call(
        self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Any:
        """Send a request and wait for its result."""
        return self.wait(self.send(method, params), timeout)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification."""
        self._write(wire.pack_notification(method, [params] if params is not None else []))

    def notifications(self, timeout: float | None = None) -> Iterator[wire.Notification]:
        """Yield notifications as they arrive; stops after ``timeout`` seconds of silence."""
        while True:
            if self._notes:
                yield self._notes.popleft()
                continue
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                self._read_once(deadline)
            except TimeoutError:
                return

    def next_notification(self, timeout: float | None = None) -> wire.Notification | None:
        """The next notification, or None after ``timeout`` seconds."""
        for note in self.notifications(timeout):
            return note
        return None

    def pump(self, timeout: float = 0.0) -> None:
        """Read and handle whatever has arrived, waiting at most ``timeout`` seconds for it."""
        with contextlib.suppress(TimeoutError):
            self._read_once(time.monotonic() + max(timeout, 0.001))

    def dispatch_buffered(self) -> None:
        """Handle messages already received but not yet handled (read along with one that
        is being handled now)."""
        for obj in self._decoder.feed(b""):
            self._dispatch(wire.classify(obj))

    def read_ready(self) -> list[wire.Request]:
        """Read what has arrived, without waiting and without answering the daemon's requests:
        they are returned, for `answer` once a person can be asked (notifications are queued
        as usual)."""
        self._held = []
        try:
            self.pump()
            self.dispatch_buffered()
        finally:
            held, self._held = self._held, None
        return held

    def answer(self, request: wire.Request) -> None:
        """Answer a request `read_ready` returned, with ``on_request``."""
        self._answer(request)

    def queued(self) -> list[wire.Notification]:
        """The notifications queued now (left queued)."""
        return list(self._notes)

    def take_notifications(
        self, which: Callable[[wire.Notification], bool] | None = None
    ) -> list[wire.Notification]:
        """Remove and return the queued notifications (those ``which`` accepts), leaving the
        others queued in order."""
        taken = [n for n in self._notes if which is None or which(n)]
        if which is None:
            self._notes.clear()
        else:
            self._notes = collections.deque(n for n in self._notes if not which(n))
        return taken

    def take_notification(
        self, method: str, match: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any] | None:
        """Remove and return the params of a queued ``method`` notification that ``match``
        accepts, leaving the others queued in order."""
        for note in self._notes:
            params = note.params[0] if note.params and isinstance(note.params[0], dict) else {}
            if note.method == method and match(params):
                self._notes.remove(note)
                return params
        return None

    # --- transport ---------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            raise self._closed_error() from None

    def _closed_error(self) -> Exception:
        if self._last_error is not None:
            return self._last_error
        return ConnectionClosed("hermesd closed the connection")

    def _read_once(self, deadline: float | None) -> None:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("timed out waiting for hermesd")
            self.sock.settimeout(remaining)
        else:
            self.sock.settimeout(None)
        try:  # into one reused buffer: a fresh 256 KiB bytes per read costs mmap/munmap
            n = self.sock.recv_into(self._buf)
        except TimeoutError:
            raise TimeoutError("timed out waiting for hermesd") from None
        except ConnectionResetError:
            n = 0
        if not n:
            raise self._closed_error()
        for obj in self._decoder.feed(self._view[:n]):
            self._dispatch(wire.classify(obj))

    def _dispatch(self, msg: wire.Message) -> None:
        if type(msg) is wire.Response:
            self._responses[msg.msgid] = msg
        elif type(msg) is wire.Notification:
            if msg.method == "hermes.error" and msg.params:
                self._last_error = RpcError.from_wire(msg.params[0])
            self._notes.append(msg)
        elif type(msg) is wire.Request:
            if self._held is not None:
                self._held.append(msg)
            else:
                self._answer(msg)

    def _answer(self, req: wire.Request) -> None:
        if self.on_request is None:
            refusal = RpcError(Codes.METHOD_NOT_FOUND, f"client does not handle '{req.method}'")
            self._write(wire.pack_response(req.msgid, refusal.to_wire(), None))
            return
        try:
            result = self.on_request(req.method, req.params)
        except RpcError as err:
            self._write(wire.pack_response(req.msgid, err.to_wire(), None))
        except Exception as exc:  # the handler is user code; report, don't die
            failure = RpcError(Codes.INTERNAL, f"client handler failed: {exc}")
            self._write(wire.pack_response(req.msgid, failure.to_wire(), None))
        else:
            self._write(wire.pack_response(req.msgid, None, result))
