"""`head_timed`: uvicorn's HTTP/1.1 protocol with a deadline on each request head.

uvicorn bounds a connection that is idle between requests (``timeout_keep_alive``) and the size
of an incomplete head (``h11_max_incomplete_event_size``), but not the time a head may take:
a client that sends its request line and headers a byte at a time holds a connection, and a
place under ``http.max_connections``, for as long as it likes (slowloris). Here a timer starts
when a connection opens, and again with the first byte of each following request, and stops
when the head is complete; when it fires first the connection is closed (``http.header_timeout``;
0: no deadline). Bodies have their own bound (``http.body_timeout``, `hermesd.http.common`), so
do idle keep-alive connections.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


class HeadTimedProtocol(H11Protocol):
    """H11Protocol that closes a connection whose request head is late."""

    head_timeout: float = 20.0  # set per listener by `head_timed`

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        # the first byte of a request after a finished one: its head is now on the clock
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            self._arm()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is complete (or refused)
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        if self.head_timeout <= 0:  # http.header_timeout: 0, no deadline
            return
        self._head_timer = self.loop.call_later(self.head_timeout, self._late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        log.info(
            "HTTP client %s sent no complete request head within %gs (http.header_timeout); "
            "closing the connection",
            f"{self.client[0]}:{self.client[1]}" if self.client else "?",
            self.head_timeout,
        )
        self.transport.close()


def head_timed(seconds: float) -> type[HeadTimedProtocol]:
    """The protocol class for uvicorn's ``http=`` with a head deadline of ``seconds``."""
    return type("HeadTimedProtocol", (HeadTimedProtocol,), {"head_timeout": seconds})
