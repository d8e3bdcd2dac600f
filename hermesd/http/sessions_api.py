"""The session API: sessions, turns, one SSE stream of a session's events, approvals, the
model's clarify questions, cancel.

Each route is one or two RPC calls through `hermesd.http.door` as the token's identity, so a
member sees only its sessions and answers approvals only where ``approvals.approvers`` lets it,
exactly as on the socket. The event stream is a ``session.attach`` on a link of its own: the
same events with the same ``seq`` a socket client gets, ``seq`` as the SSE ``id``, so a client
reconnecting with ``Last-Event-ID`` is replayed what it missed (``session.attach``'s
``after_seq``); an ``approval.request`` or ``clarify.request`` the link is sent arrives as an
event of that name, answered with its own route (``…/approvals/{id}``, ``…/clarify/{id}``).
``POST /v1/rpc/{method}`` calls any declared method the same way (`hermesd.http.openapi`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from hermesd.http.common import BodyBounds, HttpError, identity, read_json, sse
from hermesd.http.door import Door, Link

KEEPALIVE = 15.0  # seconds between SSE comments on a quiet stream (proxies close idle ones)


class SessionRoutes:
    """The ``/v1/sessions`` endpoints and the generic ``/v1/rpc/{method}``."""

    def __init__(self, door: Door, bounds: BodyBounds, uploads: BodyBounds) -> None:
        self.door = door
        self.bounds = bounds
        self.uploads = uploads  # a message with its images (http.max_upload_mb)
        self.streams = 0  # event streams open now

    async def _call(self, request: Request, method: str, params: dict[str, Any]) -> Response:
        return JSONResponse(await self.door.call(identity(request), method, params))

    async def list(self, request: Request) -> Response:
        params: dict[str, Any] = {}
        if "limit" in request.query_params:
            params["limit"] = _int(request.query_params["limit"], "limit")
        if "before" in request.query_params:
            params["before"] = request.query_params["before"]
        return await self._call(request, "session.list", params)

    async def create(self, request: Request) -> Response:
        body = await read_json(request, self.bounds)
        return await self._call(request, "session.create", {**body, "attach": False})

    async def get(self, request: Request) -> Response:
        return await self._call(request, "session.get", _sid(request))

    async def history(self, request: Request) -> Response:
        params = _sid(request)
        for key in ("limit", "after_seq"):
            if key in request.query_params:
                params[key] = _int(request.query_params[key], key)
        return await self._call(request, "session.history", params)

    async def send(self, request: Request) -> Response:
        body = await read_json(request, self.uploads)
        return await self._call(request, "session.send", {**body, **_sid(request)})

    async def cancel(self, request: Request) -> Response:
        return await self._call(request, "session.cancel", _sid(request))

    async def approvals(self, request: Request) -> Response:
        return await self._call(request, "approvals.pending", _sid(request))

    async def respond(self, request: Request) -> Response:
        body = await read_json(request, self.bounds)
        who = identity(request)
        link = self.door.open(who)
        try:  # the approval must be one of this session's (and visible to the caller)
            pending = await link.call("approvals.pending", _sid(request))
            aid = request.path_params["approval_id"]
            if not any(p["id"] == aid for p in pending["pending"]):
                raise HttpError(404, f"no pending approval '{aid}' in this session", "not_found")
            params = {"id": aid, "choice": body.get("choice"), **_reason(body)}
            return JSONResponse(await link.call("approvals.respond", params))
        finally:
            link.close()

    async def questions(self, request: Request) -> Response:
        return await self._call(request, "clarify.pending", _sid(request))

    async def answer(self, request: Request) -> Response:
        body = await read_json(request, self.bounds)
        params = {**body, **_sid(request), "id": request.path_params["question_id"]}
        return await self._call(request, "clarify.respond", params)

    async def rpc(self, request: Request) -> Response:
        body = await read_json(request, self.bounds)
        return await self._call(request, request.path_params["method"], body)

    async def events(self, request: Request) -> Response:
        """``GET /v1/sessions/{id}/events``: the session's events as SSE, from ``Last-Event-ID``."""
        after = request.headers.get("last-event-id") or request.query_params.get("after_seq")
        params = _sid(request)
        if after:
            params["after_seq"] = _int(after, "Last-Event-ID")
        link = self.door.open(identity(request), "http:events")
        try:
            attached = await link.call("session.attach", params)
        except BaseException:
            link.close()
            raise
        return StreamingResponse(
            self._stream(link, attached),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _stream(self, link: Link, attached: dict[str, Any]) -> AsyncIterator[str]:
        self.streams += 1
        try:
            yield sse({k: v for k, v in attached.items() if k != "missed"}, event="attached")
            if attached.get("missed_complete") is False:
                yield sse(
                    {"message": "some events were not kept; read the history"},
                    event="replay.incomplete",
                )
            for event in attached.get("missed") or []:
                yield sse(event, event=event.get("type"), event_id=event.get("seq"))
            while True:
                try:
                    kind, method, params = await asyncio.wait_for(link.inbox.get(), KEEPALIVE)
                except TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                if kind == "closed":
                    return
                payload: dict[str, Any] = params[0] if params else {}
                if kind == "request" or method != "session.event":
                    yield sse(payload, event=method)
                    continue
                yield sse(payload, event=payload.get("type"), event_id=payload.get("seq"))
                if payload.get("type") == "session.deleted":
                    return
        finally:
            self.streams -= 1
            link.close()


def _sid(request: Request) -> dict[str, Any]:
    return {"session_id": request.path_params["session_id"]}


def _reason(body: dict[str, Any]) -> dict[str, Any]:
    return {"reason": body["reason"]} if body.get("reason") is not None else {}


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise HttpError(400, f"{name} must be an integer", "invalid_params") from None
