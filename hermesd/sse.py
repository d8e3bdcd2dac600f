"""Server-sent events of a streamed chat completion, read from the SDK's raw HTTP response.

`hermesd.llm` asks the ``openai`` SDK for the raw response of ``POST /chat/completions`` (the
SDK still builds, sends and authenticates the request and turns error statuses into its
exceptions) and reads the event stream here: a plain byte splitter and one ``json.loads`` per
event, instead of the SDK's decoder, per-event objects and post-``[DONE]`` clean-up, which
together cost more CPU than the rest of a model round. Behaviour matches the SDK's stream:
``[DONE]`` ends it, an event whose data carries ``error`` raises ``openai.APIError``, read
timeouts and transport errors become ``APITimeoutError`` / ``APIConnectionError``, and after
``[DONE]`` the rest of an HTTP/1.1 body is read (briefly) so the connection can be reused.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

DRAIN_SECONDS = 0.1  # how long to wait for the end of the body after [DONE]


def _event_data(block: bytes) -> bytes | None:
    """The data of one event (its ``data:`` lines joined by newlines), or None if it has none."""
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line[:1] == b":":
            continue
        name, _, value = line.partition(b":")
        if name == b"data":
            data.append(value[1:] if value[:1] == b" " else value)
    return b"\n".join(data) if data else None


def _stream_error(obj: Any) -> str | None:
    """The message of an in-stream error object (as the SDK words it), or None."""
    if not isinstance(obj, dict) or not obj.get("error"):
        return None
    error = obj["error"]
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message else (
        "An error occurred during streaming")


async def read_chunks(response: Any, on_chunk: Callable[[Any], None]) -> None:
    """Feed every JSON chunk of ``response``'s event stream to ``on_chunk`` until ``[DONE]``."""
    import openai

    http = _http_module(response)
    chunks: AsyncIterator[bytes] = response.aiter_bytes()
    buffer = b""
    done = False
    try:
        async for data in chunks:
            buffer += data
            if b"\r" in buffer:  # CRLF or CR line ends; a trailing CR may start a CRLF
                held = buffer.endswith(b"\r")
                buffer = buffer[:-1] if held else buffer
                buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                buffer += b"\r" if held else b""
            while not done:
                end = buffer.find(b"\n\n")
                if end < 0:
                    break
                block, buffer = buffer[:end], buffer[end + 2:]
                payload = _event_data(block)
                if payload is None:
                    continue
                if payload.startswith(b"[DONE]"):
                    done = True
                    break
                obj = json.loads(payload)  # ValueError: the caller reports a malformed stream
                message = _stream_error(obj)
                if message is not None:
                    raise openai.APIError(message, response.request, body=obj["error"])
                on_chunk(obj)
            if done:
                break
        if done and response.http_version == "HTTP/1.1":
            try:  # the rest of the body (the chunked terminator): the connection stays usable
                async with asyncio.timeout(DRAIN_SECONDS):
                    async for _ in chunks:
                        pass
            except (TimeoutError, http.HTTPError):
                pass
    except http.TimeoutException as exc:
        raise openai.APITimeoutError(request=response.request) from exc
    except http.RequestError as exc:
        raise openai.APIConnectionError(request=response.request) from exc


def _http_module(response: Any) -> Any:
    """The HTTP library the SDK uses (``httpx``, or a fork of it), for its exception types."""
    return sys.modules[type(response).__module__.split(".")[0]]
