"""Server-sent events of a streamed chat completion, read from the SDK's raw HTTP response and
folded into one assistant message (`StreamAccumulator`).

`hermesd.model.client` asks the ``openai`` SDK for the raw response of ``POST
/chat/completions`` (the SDK still builds, sends and authenticates the request and turns error
statuses into its exceptions) and reads the event stream here: a plain byte splitter and one
JSON decode per event, instead of the SDK's decoder, per-event objects and post-``[DONE]``
clean-up, which together cost more CPU than the rest of a model round. Behaviour matches the
SDK's stream: ``[DONE]`` ends it, an event whose data carries ``error`` raises
``openai.APIError``, read timeouts and transport errors become ``APITimeoutError`` /
``APIConnectionError``, and after ``[DONE]`` the rest of an HTTP/1.1 body is read (briefly) so
the connection can be reused.

An event may be up to ``MAX_EVENT_BYTES`` long: a stream that goes on longer without the blank
line that ends an event is not an event stream, and fails as ``ModelResponseInvalid`` instead of
growing the daemon's memory without bound.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from hermesd.model import fastjson
from hermesd.model.errors import ModelResponseInvalid

DRAIN_SECONDS = 0.1  # how long to wait for the end of the body after [DONE]
# The longest event (or unfinished run of lines) held while waiting for its end. A chunk
# carries a few tokens, or at most one whole tool call: far less than this.
MAX_EVENT_BYTES = 8 << 20

StreamEvent = dict[str, Any]
OnEvent = Callable[[StreamEvent], None]


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
    return (
        message if isinstance(message, str) and message else ("An error occurred during streaming")
    )


async def read_chunks(
    response: Any, on_chunk: Callable[[Any], None], on_read: Callable[[], None] | None = None
) -> None:
    """Feed every JSON chunk of ``response``'s event stream to ``on_chunk`` until ``[DONE]``;
    ``on_read`` is called after the chunks of each read from the connection."""
    import openai

    http = http_library()
    chunks: AsyncIterator[bytes] = response.aiter_bytes()
    # An event begun in earlier reads whose end has not come yet: appended to while no end
    # arrives (each byte copied once, however long it grows), joined with the read that ends it.
    pending = bytearray()
    held = b""  # a CR that ended the last read: the next may start with its LF
    done = False
    try:
        async for data in chunks:
            if held or b"\r" in data:  # CRLF or CR line ends
                data = held + data
                held = b"\r" if data.endswith(b"\r") else b""
                data = data[:-1] if held else data
                data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if not pending:
                buffer = data
            elif b"\n\n" in data or (pending[-1:] == b"\n" and data[:1] == b"\n"):
                buffer = b"".join((pending, data))
                pending.clear()
            else:
                pending += data
                if len(pending) > MAX_EVENT_BYTES:
                    raise _too_long()
                continue
            start = 0
            while not done:
                end = buffer.find(b"\n\n", start)
                if end < 0:
                    break
                block, start = buffer[start:end], end + 2
                if block[:6] == b"data: " and b"\n" not in block:  # one data line: most events
                    payload = block[6:]
                else:
                    data_lines = _event_data(block)
                    if data_lines is None:
                        continue
                    payload = data_lines
                if payload[:6] == b"[DONE]":
                    done = True
                    break
                obj = fastjson.loads(payload)  # ValueError: the caller reports a bad stream
                if type(obj) is dict and obj.get("error"):
                    raise openai.APIError(
                        _stream_error(obj) or "", response.request, body=obj["error"]
                    )
                on_chunk(obj)
            if not done and start < len(buffer):
                pending += buffer[start:] if start else buffer
                if len(pending) > MAX_EVENT_BYTES:
                    raise _too_long()
            if on_read is not None:
                on_read()
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


def _too_long() -> ModelResponseInvalid:
    return ModelResponseInvalid(
        f"the model endpoint sent more than {MAX_EVENT_BYTES >> 20} MiB without ending an "
        "event (a blank line); is model.base_url an OpenAI-compatible endpoint?"
    )


def http_library() -> ModuleType:
    """The HTTP library the ``openai`` SDK is built on (``httpx2`` in openai 3): a raw post
    returns its ``Response``, and reading one raises its exceptions."""
    import openai

    # the SDK's default client is that library's AsyncClient with the SDK's defaults
    return sys.modules[openai.DefaultAsyncHttpxClient.__bases__[0].__module__.partition(".")[0]]


# The most tokens one response may report: far above any real request, and far enough below
# SQLite's 64-bit integers that summing a lifetime of them cannot overflow.
MAX_TOKENS = 1 << 40


def token_count(value: Any) -> int:
    """A reported token count as an int in 0..MAX_TOKENS: anything that is not a finite
    non-negative number (a string, a bool, null, a negative or infinite value) counts 0, so
    an endpoint's garbage can neither break a turn nor corrupt the stored totals."""
    if type(value) is int:
        return value if 0 <= value <= MAX_TOKENS else (MAX_TOKENS if value > 0 else 0)
    if type(value) is float and 0 <= value < MAX_TOKENS:  # NaN fails both comparisons
        return int(value)
    return MAX_TOKENS if type(value) is float and value >= MAX_TOKENS else 0


_int = token_count


def usage_details(usage: dict[str, Any]) -> dict[str, int]:
    """Cache and reasoning counts from a usage block, where the providers put them (OpenAI's
    ``*_details``, or the top-level fields some proxies and DeepSeek use); zeros are left out."""

    def detail(block: str, key: str) -> int:
        inner = usage.get(block)
        return _int(inner.get(key)) if type(inner) is dict else 0

    found = {
        "cache_read_tokens": detail("prompt_tokens_details", "cached_tokens")
        or _int(usage.get("cache_read_input_tokens"))
        or _int(usage.get("prompt_cache_hit_tokens")),
        "cache_write_tokens": detail("prompt_tokens_details", "cache_write_tokens")
        or _int(usage.get("cache_creation_input_tokens")),
        "reasoning_tokens": detail("completion_tokens_details", "reasoning_tokens")
        or detail("output_tokens_details", "reasoning_tokens"),
    }
    return {k: v for k, v in found.items() if v}


def canonical_usage(usage: dict[str, int] | None) -> dict[str, int] | None:
    """A completion's counts in the reference's buckets, as ``post_api_request`` gets them:
    ``input_tokens`` excludes cached reads and writes; ``prompt_tokens`` and ``total_tokens``
    are recomputed from the buckets. None when the response carried no usage."""
    if not usage:
        return None
    read, write = usage.get("cache_read_tokens", 0), usage.get("cache_write_tokens", 0)
    inputs = max(0, usage.get("prompt_tokens", 0) - read - write)
    outputs = usage.get("completion_tokens", 0)
    return {
        "input_tokens": inputs,
        "output_tokens": outputs,
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "reasoning_tokens": usage.get("reasoning_tokens", 0),
        "request_count": 1,
        "prompt_tokens": inputs + read + write,
        "total_tokens": inputs + read + write + outputs,
    }


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    announced: bool = False


class StreamAccumulator:
    """Folds chat-completion chunks (SDK objects or dicts) into one assistant message.

    Tool calls are keyed by ``index``; an id or name repeated in every chunk (llama.cpp) is
    kept once, arguments are concatenated. A chunk without an index continues the last call
    unless it carries a new id.

    Text is announced by `flush` (``read_chunks`` calls it after each read): the text of
    every chunk that came in one read goes out as one ``text.delta``. A model streaming at
    its own pace sends a read per token, so nothing changes for the reader; when the daemon
    is busy and chunks queue up in the socket, each costs the rest of the way (redaction,
    encoding, one event per attached client) once, not once per chunk. Any other event sends
    the text before it first, so the order is kept.
    """

    def __init__(self, on_event: OnEvent | None = None) -> None:
        self.on_event = on_event
        self.text: list[str] = []
        self._unsent: list[str] = []  # text not yet announced
        self.calls: dict[int, _Call] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, int] | None = None
        self.model: str | None = None
        self.chunks = 0
        self.choices_seen = False
        self.emitted = False

    def _emit(self, event: StreamEvent) -> None:
        if self._unsent:
            self.flush()
        self.emitted = True
        if self.on_event is not None:
            self.on_event(event)

    def flush(self) -> None:
        """Announce the text folded in since the last call as one ``text.delta``."""
        if not self._unsent:
            return
        text = self._unsent[0] if len(self._unsent) == 1 else "".join(self._unsent)
        self._unsent.clear()
        self.emitted = True
        if self.on_event is not None:
            self.on_event({"type": "text.delta", "text": text})

    def add(self, chunk: Any) -> None:
        """Fold one chunk in, emitting text deltas and tool-call starts. Fields of the wrong
        type are ignored (the stream then ends without an answer, reported by the caller)."""
        self.chunks += 1
        if type(chunk) is not dict:
            dump = getattr(chunk, "model_dump", None)  # an SDK object
            chunk = dump() if callable(dump) else {}
        if not self.model and type(chunk.get("model")) is str:
            self.model = chunk["model"]
        usage = chunk.get("usage")
        if usage and type(usage) is dict:
            self.usage = {
                k: _int(usage.get(k))
                for k in ("prompt_tokens", "completion_tokens", "total_tokens")
            }
            self.usage.update(usage_details(usage))
        choices = chunk.get("choices")
        if type(choices) is not list:
            return
        for choice in choices:
            if type(choice) is not dict or (choice.get("index") or 0) != 0:
                continue
            self.choices_seen = True
            delta = choice.get("delta")
            if type(delta) is dict:
                text = delta.get("content")
                if text and type(text) is str:
                    self.text.append(text)
                    self._unsent.append(text)
                parts = delta.get("tool_calls")
                if type(parts) is list:
                    for part in parts:
                        if type(part) is dict:
                            self._add_call(part)
            finish = choice.get("finish_reason")
            if finish and type(finish) is str:
                self.finish_reason = finish

    def _add_call(self, part: dict[str, Any]) -> None:
        index, call_id = part.get("index"), part.get("id")
        call_id = call_id if type(call_id) is str else None
        if type(index) is not int:
            last = max(self.calls, default=-1)
            new = last < 0 or bool(call_id and call_id != self.calls[last].id)
            index = last + 1 if new else last
        call = self.calls.setdefault(index, _Call())
        if call_id and not call.id:
            call.id = call_id
        function = part.get("function")
        if type(function) is dict:
            name = function.get("name")
            if name and type(name) is str and name != call.name:
                call.name = name if not call.name else call.name + name
            args = function.get("arguments")
            if args and type(args) is str:
                call.arguments.append(args)
        if call.name and not call.announced:
            call.announced = True
            self._emit(
                {"type": "tool_call.started", "index": index, "id": call.id, "name": call.name}
            )

    def message(self) -> dict[str, Any]:
        """The assistant message in OpenAI form (text not yet announced is announced)."""
        self.flush()
        text = "".join(self.text)
        msg: dict[str, Any] = {"role": "assistant", "content": text or None}
        if self.calls:
            msg["tool_calls"] = [
                {
                    "id": c.id or f"call_{secrets.token_hex(6)}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": "".join(c.arguments).strip() or "{}"},
                }
                for _, c in sorted(self.calls.items())
            ]
        elif not text:
            msg["content"] = ""
        return msg
