"""A raw HTTP/1.1 peer on 127.0.0.1 for tests that must send what a well-behaved server never
would: each request is answered with exact bytes from a script.

A thread accepts connections; each connection gets a thread that reads requests (head, then a
``Content-Length`` body), records their bytes, and answers each with the next ``Answer``. It
counts the connections it accepted and those the client closed, so tests can see keep-alive,
reconnects and pool clean-up from the outside.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Self


@dataclass
class Answer:
    """What the server does with one request: send ``data`` (after ``delay`` seconds), then
    (``close``) hang up, or keep the connection and wait for the next request. ``b""`` without
    ``close`` says nothing."""

    data: bytes = b""
    close: bool = False
    delay: float = 0.0


@dataclass
class Received:
    """One request as it arrived: which connection (0, 1, ...) and its exact bytes."""

    conn: int
    data: bytes

    @property
    def head(self) -> bytes:
        return self.data.split(b"\r\n\r\n", 1)[0]

    @property
    def body(self) -> bytes:
        return self.data.split(b"\r\n\r\n", 1)[1]

    def header(self, name: str) -> list[bytes]:
        """The values of every header line named ``name`` (any case)."""
        wanted = name.lower().encode()
        return [
            value.strip()
            for key, _, value in (line.partition(b":") for line in self.head.split(b"\r\n")[1:])
            if key.lower() == wanted
        ]


def response(
    status: str = "200 OK",
    body: bytes = b"",
    *headers: str,
    length: bool = True,
    version: str = "HTTP/1.1",
) -> bytes:
    """A response's bytes; ``length`` adds a Content-Length for ``body``."""
    lines = [f"{version} {status}", *headers]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    """A chunked body of ``chunks`` (then the last chunk and ``trailer`` lines)."""
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n" + trailer + b"\r\n"


class RawHTTPServer:
    """Answers requests with scripted bytes; records requests, accepts and client hang-ups."""

    def __init__(self, *answers: Answer, tls: ssl.SSLContext | None = None) -> None:
        self.answers: deque[Answer] = deque(answers)
        self.tls = tls  # a server context: connections are TLS (handshake in their thread)
        self.requests: list[Received] = []
        self.accepted = 0
        self.client_closed = 0  # connections the client ended (EOF while we waited)
        self.connection_bytes: list[bytearray] = []  # everything each connection sent us
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.05)
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def push(self, *answers: Answer) -> None:
        with self._lock:
            self.answers.extend(answers)

    def wait_for(self, what: str, value: int, timeout: float = 3.0) -> bool:
        """Wait until the counter ``what`` (e.g. ``client_closed``) reaches ``value``."""
        deadline = time.monotonic() + timeout
        while getattr(self, what) < value:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def start(self) -> Self:
        thread = threading.Thread(target=self._accept, name="raw-http", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=2)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                index = self.accepted
                self.accepted += 1
                self._conns.append(conn)
                self.connection_bytes.append(bytearray())
            thread = threading.Thread(target=self._serve, args=(conn, index), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket, index: int) -> None:
        pending = b""
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError):  # the client refused our certificate
                conn.close()
                with self._lock:
                    self.client_closed += 1
                return
        with conn:
            while not self._stop.is_set():
                request, pending = self._read_request(conn, index, pending)
                if request is None:
                    return
                with self._lock:
                    self.requests.append(Received(index, request))
                    answer = (
                        self.answers.popleft()
                        if self.answers
                        else Answer(response("500 Script Exhausted"))
                    )
                if answer.delay:
                    time.sleep(answer.delay)
                try:
                    conn.sendall(answer.data)
                except OSError:
                    return
                if answer.close:
                    return

    def _read_request(
        self, conn: socket.socket, index: int, pending: bytes
    ) -> tuple[bytes | None, bytes]:
        """One request's bytes and what followed them; None when the client hung up."""
        data = pending
        while True:
            head_end = data.find(b"\r\n\r\n")
            if head_end >= 0:
                length = 0
                for line in data[:head_end].split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                end = head_end + 4 + length
                if len(data) >= end:
                    return data[:end], data[end:]
            try:
                more = conn.recv(65536)
            except OSError:
                more = b""
            if not more:
                if not self._stop.is_set():
                    with self._lock:
                        self.client_closed += 1
                return None, b""
            self.connection_bytes[index] += more
            data += more
