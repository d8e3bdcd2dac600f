"""`SessionFeed`: changes to the list of sessions, as server-sent events (the web page's list).

The session registry hands its observers every turn event and a note when a session is
created, renamed or deleted; the feed keeps only what changes the list (`CHANGES`) and passes
each to every open ``GET /v1/web/sessions/events`` stream as an event of that type. The
owner is told which session (``{"session_id": ...}``); a member only that something changed
(``{}``), since it may not see every session: the page reads ``/v1/sessions`` again either way.
A stream that does not keep up loses events past `QUEUE` and is sent ``resync`` instead.
Everything runs on the daemon's event loop; `observe` only puts into queues.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from hermesd.caller import OWNER
from hermesd.http.common import identity, sse

CHANGES = frozenset(
    {"session.created", "session.renamed", "session.deleted", "turn.started", "turn.finished"}
)
QUEUE = 256  # events held for one slow stream
KEEPALIVE = 15.0  # seconds between comments on a quiet stream
_CLOSED = {"type": "closed"}


class SessionFeed:
    """The open list streams and what the registry tells them."""

    def __init__(self) -> None:
        self.streams: set[asyncio.Queue[dict[str, Any]]] = set()

    def observe(self, event: dict[str, Any]) -> None:
        """A registry observer: pass a list change on to every stream."""
        kind = event.get("type")
        if kind not in CHANGES:
            return
        change = {"type": kind, "session_id": event.get("session_id")}
        for queue in self.streams:
            with contextlib.suppress(asyncio.QueueFull):  # it is sent a resync instead
                queue.put_nowait(change)

    def close(self) -> None:
        """End every stream (the door stops)."""
        for queue in self.streams:
            while True:
                try:
                    queue.put_nowait(_CLOSED)
                    break
                except asyncio.QueueFull:
                    queue.get_nowait()

    async def events(self, request: Request) -> Response:
        """``GET /v1/web/sessions/events``: the list's changes as SSE."""
        owner = identity(request).trust == OWNER
        return StreamingResponse(
            self._stream(owner),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _stream(self, owner: bool) -> AsyncIterator[str]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE)
        self.streams.add(queue)
        try:
            yield sse({}, event="ready")
            while True:
                try:
                    change = await asyncio.wait_for(queue.get(), KEEPALIVE)
                except TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                if change is _CLOSED:
                    return
                if queue.full():  # some were dropped: the page reads the whole list again
                    dropped = [queue.get_nowait() for _ in range(queue.qsize())]
                    if _CLOSED in dropped:
                        return
                    yield sse({}, event="resync")
                    continue
                shown = {"session_id": change["session_id"]} if owner else {}
                yield sse(shown, event=change["type"])
        finally:
            self.streams.discard(queue)
