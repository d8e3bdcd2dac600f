"""What every route of the HTTP door shares: the caller's identity, bounded bodies, SSE lines."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from hermesd.http.tokens import Identity


@dataclass(frozen=True, slots=True)
class BodyBounds:
    """How large a request body may be (``http.max_body``) and how long it may take to arrive
    (``http.body_timeout``: a client that stalls mid-body is answered 408 and let go)."""

    size: int
    seconds: float
    setting: str = "http.max_body"  # named in the 413 answer


class HttpError(Exception):
    """An error answered as ``status`` with ``message`` (and an error code)."""

    def __init__(self, status: int, message: str, code: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def identity(request: Request) -> Identity:
    """Who the request's bearer token stands for (set by the auth middleware)."""
    who: Identity = request.state.identity
    return who


async def read_json(request: Request, bounds: BodyBounds) -> dict[str, Any]:
    """The body as a JSON object, refused past ``bounds.size`` bytes before more is read and
    when it has not all arrived within ``bounds.seconds``."""
    raw = await read_raw(request, bounds)
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"the body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be a JSON object", "invalid_json")
    return body


async def read_raw(request: Request, bounds: BodyBounds) -> bytes:
    """The body's bytes, within ``bounds`` (413 past the size, 408 past the time)."""
    try:
        async with asyncio.timeout(bounds.seconds):
            return await _read(request, bounds.size, bounds.setting)
    except TimeoutError:
        raise HttpError(
            408, f"the body did not arrive within {bounds.seconds:g}s", "timeout"
        ) from None


async def _read(request: Request, limit: int, setting: str) -> bytes:
    too_large = HttpError(413, f"request body over {limit} bytes ({setting})", "body_too_large")
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HttpError(400, "Content-Length is not a number", "invalid_content_length")
        if int(declared) > limit:
            raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def dumps(value: Any) -> str:
    """JSON text of a value the daemon sent (bytes shown as text)."""
    return json.dumps(value, ensure_ascii=False, default=_plain, separators=(",", ":"))


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def sse(data: Any, event: str | None = None, event_id: int | None = None) -> str:
    """One server-sent event."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    head += f"event: {event}\n" if event else ""
    text = data if isinstance(data, str) else dumps(data)
    return head + "".join(f"data: {line}\n" for line in text.split("\n")) + "\n"
