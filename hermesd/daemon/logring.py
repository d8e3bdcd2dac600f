"""The daemon's recent log records in memory, for ``hermesctl logs [-f] [-n N]``.

`LogRing` is one more handler on the root logger, beside stderr or journald (installed by
``hermesd.daemon.logs``): it keeps the last ``capacity`` records, already redacted by the same
filter the other handler uses, as plain dicts with a sequence number. `LogService` serves them
as ``logs.tail`` and, when asked to follow, sends each new record to that connection as a
``log.record`` notification until it closes. Records may be emitted on any thread; followers
are told on the event loop's.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from hermesd.redact import RedactingFilter
from hermesd.rpc.connection import Call, Connection, Router
from hermesd.rpc.service import RpcService

CAPACITY = 2000  # records
MESSAGE_MAX = 16 * 1024  # characters of one record kept: 2000 records stay a few MiB at most

Entry = dict[str, Any]


class LogRing(logging.Handler):
    """The last ``capacity`` log records, redacted, and who wants to hear of new ones."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        super().__init__()
        self.addFilter(RedactingFilter())
        self.entries: deque[Entry] = deque(maxlen=capacity)
        self.seq = 0
        self._guard = threading.Lock()
        self._listeners: list[Callable[[Entry], None]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        if record.exc_text:
            message += "\n" + record.exc_text
        if len(message) > MESSAGE_MAX:
            message = f"{message[:MESSAGE_MAX]}… [{len(message) - MESSAGE_MAX} more characters]"
        with self._guard:
            self.seq += 1
            entry = {
                "seq": self.seq,
                "time": record.created,
                "level": record.levelname,
                "logger": record.name,
                "message": message,
            }
            self.entries.append(entry)
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(entry)
            except RuntimeError:  # the loop closed while stopping: nobody left to tell
                self.forget(listener)

    def tail(self, lines: int) -> list[Entry]:
        """The last ``lines`` records, oldest first."""
        with self._guard:
            return list(self.entries)[-lines:] if lines > 0 else []

    def listen(self, listener: Callable[[Entry], None]) -> None:
        with self._guard:
            self._listeners.append(listener)

    def forget(self, listener: Callable[[Entry], None]) -> None:
        with self._guard:
            if listener in self._listeners:
                self._listeners.remove(listener)


RING = LogRing()


class LogService(RpcService):
    """``logs.tail``: recent records, and new ones as notifications to followers."""

    def __init__(self, ring: LogRing = RING) -> None:
        self.ring = ring
        self._followers: dict[Connection, Callable[[Entry], None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, router: Router) -> None:
        router.bind("logs.tail", self.rpc_tail)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        for listener in self._followers.values():
            self.ring.forget(listener)
        self._followers.clear()

    def connection_closed(self, conn: Connection) -> None:
        listener = self._followers.pop(conn, None)
        if listener is not None:
            self.ring.forget(listener)

    def rpc_tail(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        lines = p.get("lines")
        lines = 100 if lines is None else max(0, min(int(lines), self.ring.entries.maxlen or 0))
        records = self.ring.tail(lines)
        if p.get("follow") and call.conn not in self._followers:
            loop, conn = self._loop, call.conn
            assert loop is not None, "service not started"

            def tell(entry: Entry) -> None:
                loop.call_soon_threadsafe(conn.notify, "log.record", [entry])

            self._followers[conn] = tell
            self.ring.listen(tell)
        return {"records": records, "capacity": self.ring.entries.maxlen}
