"""The model stand-in on one asyncio event loop, for benchmarks that run many turns at once.

`tests.support.modelserver` answers each connection on a thread of its own, parsing requests
with ``http.server``; with 100 turns at once that costs the machine ~0.6 ms of CPU per model
round, which on a 2-CPU machine is taken from the daemon being measured (a real model runs
elsewhere). This engine serves the same rules and sends the same events, from one loop:
HTTP/1.1 keep-alive, requests with a ``Content-Length`` body, answers as chunked SSE streams
(one write per event, as the threaded server does) or JSON, each after the configured latency.
Both engines read requests and write events with ``hermesd.model.fastjson`` (compact JSON, as the
chunks of OpenAI's and vLLM's servers are): with 100 turns at once on 2 CPUs, the stand-in's
JSON work with the standard library (0.45–0.5 ms of CPU per round in all, against 0.29–0.39 ms now)
took CPU the daemon was being measured on.

    python -m tests.support.modelserver --engine asyncio --port 0 --script rules --latency 0.1
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json

from hermesd.model import fastjson
from tests.support.modelserver import Rule, _chunks, _completion

_MAX_HEAD = 64 * 1024


class _Connection(asyncio.Protocol):
    def __init__(self, server: AsyncModelServer) -> None:
        self.server = server
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False  # answering a request: the next one waits in the buffer
        self.answering: asyncio.Future[None] | None = None  # kept: a task needs a reference

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._next()

    def _next(self) -> None:
        if self.busy or self.transport is None:
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > _MAX_HEAD:
                self.transport.close()
            return
        head = self.buffer[:end].decode("latin-1").split("\r\n")
        fields = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        length = int(fields.get("content-length") or 0)
        if len(self.buffer) < end + 4 + length:
            return
        body = self.buffer[end + 4 : end + 4 + length]
        self.buffer = self.buffer[end + 4 + length :]
        self.busy = True
        self.answering = asyncio.ensure_future(self._answer(head[0].split(" ")[1], body))

    async def _answer(self, path: str, body: bytes) -> None:
        transport = self.transport
        assert transport is not None
        try:
            request = fastjson.loads(body)
        except ValueError:
            request = None
        if path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions") or not isinstance(
            request, dict
        ):
            self._send(
                transport,
                "400 Bad Request",
                "application/json",
                b'{"error": {"message": "not a chat completion request"}}',
            )
            return
        step = self.server.rule(request)
        n = next(self.server.ids)
        await asyncio.sleep(self.server.latency + step.delay)
        if transport.is_closing():
            return
        if request.get("stream"):
            include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
            transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            for event in _chunks(request, step, n, include_usage):
                payload = b"data: " + event.encode() + b"\n\n"
                transport.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            transport.write(b"0\r\n\r\n")
            self.busy = False
            self._next()
        else:
            self._send(
                transport,
                "200 OK",
                "application/json",
                json.dumps(_completion(request, step, n)).encode(),
            )

    def _send(self, transport: asyncio.Transport, status: str, kind: str, body: bytes) -> None:
        transport.write(
            f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\n"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        self.busy = False
        self._next()


class AsyncModelServer:
    """Serves ``rule`` on 127.0.0.1 with ``latency`` seconds before each answer."""

    def __init__(self, rule: Rule, latency: float = 0.0) -> None:
        self.rule = rule
        self.latency = latency
        self.ids = itertools.count(1)

    async def serve(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Connection(self), "127.0.0.1", port)
        bound = server.sockets[0].getsockname()[1]
        print(f"http://127.0.0.1:{bound}/v1", flush=True)
        async with server:
            await server.serve_forever()


def serve(rule: Rule, latency: float, port: int) -> int:
    """Serve until interrupted (``python -m tests.support.modelserver --engine asyncio``)."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(AsyncModelServer(rule, latency).serve(port))
    return 0
