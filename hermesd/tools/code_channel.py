"""The daemon's end of `execute_code`'s tool channel: a pipe pair, framed JSON, served calls.

The script in the sandbox cannot reach the daemon's socket (the seccomp filter refuses
``socket(AF_UNIX)``), so the daemon hands it two pipe ends as inherited descriptors instead:
one it writes requests to, one it reads replies from (`hermesd.tools.code_runner` is the other
side). A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON, at most
`MAX_FRAME`. `ToolChannel.serve` answers requests one at a time: a request that is not JSON or
not ``{"id", "tool", "args"}`` gets an error reply and the channel goes on; a frame over the
limit (its length cannot be trusted, nor the stream after it) closes the channel, and the
script's next call fails. Which tools may be called and how is the dispatcher's business.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

HEADER = struct.Struct(">I")
MAX_FRAME = 8 * 1024 * 1024  # a write_file of a large file fits; a runaway length does not

#: ``(tool, args) -> result string``, or raises `Refused` with the reply's error text
Dispatch = Callable[[str, dict[str, Any]], Awaitable[str]]


class FrameError(Exception):
    """The script broke the protocol; the message says how."""


class Refused(Exception):
    """A call the dispatcher will not make; the message goes back to the script."""


def encode(message: dict[str, Any]) -> bytes:
    """One frame."""
    body = json.dumps(message, ensure_ascii=False).encode("utf-8")
    return HEADER.pack(len(body)) + body


async def read_request(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next request (None at the end of the stream); `FrameError` when it is malformed.
    A frame over `MAX_FRAME` raises before its body is read."""
    try:
        head = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError("the channel ended inside a frame header") from None
        return None
    (size,) = HEADER.unpack(head)
    if size > MAX_FRAME:
        raise FrameError(f"a frame of {size} bytes is over the {MAX_FRAME}-byte limit")
    try:
        body = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise FrameError("the channel ended inside a frame") from None
    return _request(body)


def _request(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return {"bad": f"the request is not UTF-8 JSON: {exc}"}
    if not isinstance(message, dict):
        return {"bad": "the request is not a JSON object"}
    if not isinstance(message.get("tool"), str) or not isinstance(message.get("args"), dict):
        return {"id": message.get("id"), "bad": "a request needs 'tool' (str) and 'args' (object)"}
    return message


@dataclass
class ToolChannel:
    """One script's channel: the daemon's ends of both pipes, and what was served."""

    requests: int  # the daemon reads requests here
    replies: int  # and writes replies here
    calls: int = 0  # calls the dispatcher ran (refused ones are not counted)
    broken: str | None = None  # why the channel was closed early, for the result
    opened: bool = False  # the descriptors belong to the transports (which close them)

    def close_unopened(self) -> None:
        """Close the descriptors when `serve` never ran (the run ended first)."""
        if not self.opened:
            self.opened = True
            for fd in (self.requests, self.replies):
                os.close(fd)

    async def serve(self, dispatch: Dispatch, first: dict[str, Any]) -> None:
        """Send ``first`` (the script and its module), then answer requests until the script
        closes its end or breaks the protocol."""
        loop = asyncio.get_running_loop()
        self.opened = True
        reader = asyncio.StreamReader(limit=MAX_FRAME + HEADER.size)
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(self.requests, "rb", 0)
        )
        write_transport, _ = await loop.connect_write_pipe(
            asyncio.Protocol, os.fdopen(self.replies, "wb", 0)
        )
        try:
            write_transport.write(encode(first))
            while True:
                try:
                    request = await read_request(reader)
                except FrameError as exc:
                    self.broken = str(exc)
                    return
                if request is None:
                    return
                reply = await self._answer(request, dispatch)
                if write_transport.is_closing():
                    return
                write_transport.write(encode(reply))
        finally:
            read_transport.close()
            write_transport.close()

    async def _answer(self, request: dict[str, Any], dispatch: Dispatch) -> dict[str, Any]:
        ident = request.get("id")
        if "bad" in request:
            return {"id": ident, "error": request["bad"]}
        try:
            result = await dispatch(request["tool"], request["args"])
        except Refused as exc:
            return {"id": ident, "error": str(exc)}
        self.calls += 1
        return {"id": ident, "result": result}
