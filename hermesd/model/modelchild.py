"""The model client process itself: ``python -m hermesd.model.modelchild FD``, started by
`hermesd.model.modelproc.ModelProcess` with its end of a socket pair as FD.

It runs `hermesd.model.client.ModelClient.attempt` for every REQUEST frame (settings from CONFIGURE; a
CANCEL cancels one; requests that arrive together start one per pass of the loop), sends the
stream's events and the folded message back, and its log records as LOG frames; READY once
the SDK is imported. It exits when the socket closes. The frames are
described in `hermesd.model.modelproc`, which owns them; nothing here touches sessions or the store.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import sys
import threading
from typing import Any

from hermesd.model.client import (
    ModelClient,
    ModelError,
    ModelNotConfigured,
    ModelRequestFailed,
    ModelResponseInvalid,
    ModelSettings,
)
from hermesd.model.modelproc import (
    CANCEL,
    CONFIGURE,
    DONE,
    ERROR,
    EVENT,
    LOG,
    MAX_REQUEST,
    READY,
    REQUEST,
    Link,
)
from hermesd.rpc.wire import StreamError

log = logging.getLogger(__name__)


class _Server:
    """Runs attempts for the daemon until the socket closes."""

    def __init__(self) -> None:
        self.client: ModelClient | None = None
        self.tasks: dict[int, asyncio.Task[None]] = {}
        # REQUEST frames not started yet, oldest first: one starts per pass of the loop
        self.waiting: dict[int, bytes] = {}
        self.starting = False  # start_next is scheduled
        self.closed = asyncio.get_running_loop().create_future()
        self.link = Link(self.on_frame, self.on_lost, MAX_REQUEST)
        self._warm: asyncio.Task[None] | None = None

    def on_lost(self, reason: str) -> None:
        if not self.closed.done():
            self.closed.set_result(reason)

    def on_frame(self, frame: list[Any]) -> None:
        kind = frame[0]
        if kind == REQUEST:
            self.waiting[frame[1]] = frame[2]
            if not self.starting:
                self.starting = True
                asyncio.get_running_loop().call_soon(self.start_next)
        elif kind == CANCEL:
            if self.waiting.pop(frame[1], None) is not None:
                return
            task = self.tasks.pop(frame[1], None)
            if task is not None:
                task.cancel()
        elif kind == CONFIGURE:
            fields, level = frame[1], frame[2]
            logging.getLogger().setLevel(int(level))
            settings = ModelSettings(**fields)
            if self.client is None:
                self.client = ModelClient(settings)
                self._warm = asyncio.get_running_loop().create_task(self.warm_up())
            else:
                self.client.settings = settings
        else:
            raise StreamError(f"unknown frame kind {kind!r}")

    def start_next(self) -> None:
        """Start the oldest waiting request, and the next one on the next pass of the loop.

        Requests that arrive together (a burst of turns) are started one per pass, first come
        first served: the first one's request goes out, on a connection opened for it if need
        be, while the others wait, instead of every request of the burst waiting until all of
        them have been built by the SDK. Measured in docs/benchmarks.md ("Turn path, sixth
        round").
        """
        if not self.waiting:  # cancelled while waiting
            self.starting = False
            return
        rid = next(iter(self.waiting))
        body = self.waiting.pop(rid)
        loop = asyncio.get_running_loop()
        self.tasks[rid] = loop.create_task(self.run(rid, body))
        if self.waiting:
            loop.call_soon(self.start_next)
        else:
            self.starting = False

    async def warm_up(self) -> None:
        assert self.client is not None
        try:
            await self.client.warm_up()
        except Exception:  # its attempts will report the problem
            log.exception("could not prepare the model client")
            return
        gc.freeze()  # the SDK's modules live as long as the process
        self.link.send([READY])

    async def run(self, rid: int, body: bytes) -> None:
        send = self.link.send
        try:
            if self.client is None:
                raise ModelNotConfigured("the model client process got no settings")
            completion = await self.client.attempt(body, lambda event: send([EVENT, rid, event]))
            send(
                [
                    DONE,
                    rid,
                    completion.message,
                    completion.finish_reason,
                    completion.usage,
                    completion.model,
                ]
            )
        except ModelRequestFailed as exc:
            send([ERROR, rid, "failed", exc.message, exc.status, exc.retryable, exc.retry_after])
        except ModelResponseInvalid as exc:
            send([ERROR, rid, "invalid", str(exc), None, False, None])
        except ModelError as exc:
            send([ERROR, rid, "config", str(exc), None, False, None])
        except Exception as exc:
            log.exception("model request %d failed", rid)
            send([ERROR, rid, "internal", f"{type(exc).__name__}: {exc}", None, False, None])
        finally:
            self.tasks.pop(rid, None)

    async def serve(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        await loop.create_unix_connection(lambda: self.link, sock=sock)
        await self.closed
        self.waiting.clear()  # nobody is left to answer
        for task in list(self.tasks.values()):
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks.values()))
        if self._warm is not None:
            await asyncio.wait([self._warm])
        if self.client is not None:
            await self.client.aclose()


class _ToDaemon(logging.Handler):
    """Log records of the child go to the daemon's log (journald) as LOG frames."""

    def __init__(self, server: _Server) -> None:
        super().__init__()
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            frame = [LOG, record.levelno, record.name, self.format(record)]
            if threading.current_thread() is threading.main_thread():
                self.server.link.send(frame)
            else:
                self.loop.call_soon_threadsafe(self.server.link.send, frame)
        except Exception:
            self.handleError(record)


async def _main(fd: int) -> None:
    server = _Server()
    root = logging.getLogger()
    root.handlers[:] = [_ToDaemon(server)]
    gc.set_threshold(10_000, 10, 10)  # as the daemon: few collections while streams run
    await server.serve(socket.socket(fileno=fd))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m hermesd.model.modelchild FD (started by hermesd)", file=sys.stderr)
        return 2
    asyncio.run(_main(int(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
