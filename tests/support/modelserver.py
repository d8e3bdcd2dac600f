"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, the model stand-in.

A real HTTP/1.1 server (keep-alive, chunked SSE streaming) on a background thread, so tests
and benchmarks drive it through the real ``openai`` client. Each request is answered by the
next ``Step`` of a queue, or by a rule (a callable from the request body to a ``Step``). Every
request body is recorded in ``requests``.

From another process (benchmarks, manual runs)::

    python -m tests.support.modelserver --port 0 --script rules [--latency 0.1] [--engine asyncio]

prints the base URL (``http://127.0.0.1:PORT/v1``) on one line, then serves until killed.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from hermesd.model import fastjson

Rule = Callable[[dict[str, Any]], "Step"]


@dataclass
class ToolCall:
    """One tool call the scripted model makes; a str ``arguments`` is sent verbatim."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass
class Step:
    """How the server answers one request."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None  # default: tool_calls when there are any, else stop
    usage: dict[str, int] | None = None  # default: a rough count
    send_usage: bool = True  # only sent when the request asks for it
    delay: float = 0.0  # seconds before the response starts
    chunk_delay: float = 0.0  # seconds between streamed chunks
    chunk_chars: int = 8  # text and argument pieces per streamed chunk
    repeat_ids: bool = False  # llama.cpp style: id, type, name in every chunk
    cut_after: int | None = None  # streaming: drop the connection after N chunks
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None  # sent verbatim, e.g. a non-JSON body
    content_type: str | None = None
    empty_choices: bool = False


def reply(text: str, **kw: Any) -> Step:
    """A plain text answer."""
    return Step(content=text, **kw)


def tool_call(
    name: str, arguments: dict[str, Any] | str | None = None, call_id: str | None = None
) -> ToolCall:
    """One tool call; pass a str to send arguments that are not valid JSON."""
    return ToolCall(name, {} if arguments is None else arguments, call_id)


def call_tools(*calls: ToolCall, content: str | None = None, **kw: Any) -> Step:
    """An assistant turn that calls one or more tools (several = parallel calls)."""
    return Step(content=content, tool_calls=list(calls), **kw)


def http_error(
    status: int,
    message: str = "scripted failure",
    *,
    retry_after: float | str | None = None,
    **kw: Any,
) -> Step:
    """An HTTP error with an OpenAI-style JSON error body."""
    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
    body = json.dumps(
        {"error": {"message": message, "type": "server_error", "code": str(status)}}
    ).encode()
    return Step(status=status, body=body, headers=headers, content_type="application/json", **kw)


def raw(
    body: bytes | str, *, status: int = 200, content_type: str = "text/html", **kw: Any
) -> Step:
    """A response body sent verbatim (non-JSON, wrong content type)."""
    data = body.encode() if isinstance(body, str) else body
    return Step(status=status, body=data, content_type=content_type, **kw)


def cut_stream(text: str = "This answer is cut off", after: int = 2, **kw: Any) -> Step:
    """A streamed answer whose connection drops after ``after`` chunks."""
    return Step(content=text, cut_after=after, chunk_chars=4, **kw)


def empty_choices(**kw: Any) -> Step:
    """A well-formed response with no choices at all."""
    return Step(empty_choices=True, **kw)


def model_config(url: str, **model: Any) -> str:
    """config.yaml text pointing hermesd at the model server at ``url``; ``model`` adds
    ``model.*`` settings (timeout, max_retries, ...)."""
    lines = ["model:", f"  base_url: {url}", "  default: scripted-model"]
    lines += [f"  {k}: {v}" for k, v in model.items()]
    return "\n".join(lines) + "\n"


class ScriptedModelServer:
    """OpenAI-compatible ``/v1/chat/completions`` answering from a script or a rule."""

    def __init__(
        self,
        steps: Iterable[Step] = (),
        *,
        rules: Rule | None = None,
        latency: float = 0.0,
        model: str = "scripted-model",
        reject_stream_options: bool = False,
        port: int = 0,
        model_info: dict[str, Any] | None = None,
        props: dict[str, Any] | None = None,
        ollama_show: dict[str, Any] | None = None,
    ) -> None:
        self.steps: deque[Step] = deque(steps)
        #: more fields of the model's /v1/models entry (e.g. vLLM's ``max_model_len``)
        self.model_info: dict[str, Any] = dict(model_info or {})
        self.listings = 0  # /v1/models requests answered
        #: llama.cpp's ``GET /props`` and Ollama's ``POST /api/show`` answers (None: 404)
        self.props, self.ollama_show = props, ollama_show
        self.probes: list[tuple[str, Any]] = []  # (path, body) of each /props or /api/show
        self.rules = rules
        self.latency = latency
        self.model = model
        self.reject_stream_options = reject_stream_options
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []  # lower-cased names, one per request
        self.request_paths: list[str] = []  # the path of each chat request, as sent
        self.hung_up = 0  # streams the client closed before their end
        self.request_times: list[float] = []  # time.monotonic() when each request arrived
        self.response_end_times: list[float] = []  # ... and when its answer was fully sent
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd = _Server(("127.0.0.1", port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._httpd.owner = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL for ``openai.AsyncOpenAI(base_url=...)``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """The base URL without a path (``/chat/completions`` is served there too)."""
        return f"http://127.0.0.1:{self.port}"

    def push(self, *steps: Step) -> None:
        """Append steps to the script."""
        with self._lock:
            self.steps.extend(steps)

    def clear_script(self) -> None:
        """Drop scripted steps that were not used (a test that failed midway left them)."""
        with self._lock:
            self.steps.clear()

    @property
    def last_request(self) -> dict[str, Any]:
        return self.requests[-1]

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="scripted-model",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_step(self, request: dict[str, Any]) -> Step | None:
        with self._lock:
            self.requests.append(request)
            self.request_times.append(time.monotonic())
            if self.steps:
                return self.steps.popleft()
        return self.rules(request) if self.rules else None


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default 5 drops SYNs when many sessions connect at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client hanging up is fine
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def owner(self) -> ScriptedModelServer:
        return self.server.owner  # type: ignore[attr-defined,no-any-return]

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self.owner.listings += 1
            self._json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self.owner.model,
                            "object": "model",
                            "created": 0,
                            "owned_by": "test",
                            **self.owner.model_info,
                        }
                    ],
                },
            )
        elif self.path.rstrip("/") in ("/props", "/v1/props"):
            self.owner.probes.append((self.path, None))
            self._answer(self.owner.props)
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def _answer(self, body: dict[str, Any] | None) -> None:
        if body is None:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        else:
            self._json(200, body)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        data = self.rfile.read(length)
        if self.path.rstrip("/") == "/api/show":
            self.owner.probes.append((self.path, json.loads(data or b"null")))
            self._answer(self.owner.ollama_show)
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            request = fastjson.loads(data)
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON", "type": "invalid_request"}})
            return
        owner = self.owner
        with owner._lock:
            owner.request_headers.append({k.lower(): v for k, v in self.headers.items()})
            owner.request_paths.append(self.path)
        if owner.reject_stream_options and "stream_options" in request:
            owner.requests.append(request)
            self._json(
                400,
                {
                    "error": {
                        "message": "Unrecognized request argument supplied: stream_options",
                        "type": "invalid_request_error",
                    }
                },
            )
            return
        step = owner._next_step(request)
        if step is None:
            self._json(
                500,
                {"error": {"message": "scripted model: script exhausted", "type": "server_error"}},
            )
            return
        if owner.latency or step.delay:
            time.sleep(owner.latency + step.delay)
        if step.body is not None or step.status != 200:
            self._send(
                step.status, step.body or b"", step.content_type or "application/json", step.headers
            )
        elif request.get("stream"):
            self._stream(request, step)
        else:
            self._json(200, _completion(request, step, next(owner._ids)), step.headers)
        with owner._lock:
            owner.response_end_times.append(time.monotonic())

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json", headers)

    def _stream(self, request: dict[str, Any], step: Step) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for key, value in step.headers.items():
            self.send_header(key, value)
        self.end_headers()
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        events = _chunks(request, step, next(self.owner._ids), include_usage)
        if step.cut_after is None and not step.chunk_delay:
            # unpaced: the whole body in one write, so the client reads the chunks together
            # (as it does from a busy daemon's socket) however the machine is loaded
            body = b"".join(_frame(b"data: " + e.encode() + b"\n\n") for e in events)
            self._write(body + b"0\r\n\r\n")
            return
        for count, event in enumerate(events):
            if step.cut_after is not None and count >= step.cut_after:
                self._drop()
                return
            if count and step.chunk_delay:
                time.sleep(step.chunk_delay)
            self._write(_frame(b"data: " + event.encode() + b"\n\n"))
        self.wfile.write(b"0\r\n\r\n")

    def _write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
        except ConnectionError:
            with self.owner._lock:
                self.owner.hung_up += 1
            raise

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _frame(payload: bytes) -> bytes:
    """One piece of a chunked HTTP/1.1 body."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _usage(request: dict[str, Any], step: Step) -> dict[str, int]:
    if step.usage is not None:
        return step.usage
    prompt = sum(len(str(m.get("content") or "")) for m in request.get("messages", [])) // 4
    completion = (
        len(step.content or "") // 4
        + sum(len(c.arguments_text()) // 4 + 1 for c in step.tool_calls)
        + 1
    )
    return {
        "prompt_tokens": prompt + 1,
        "completion_tokens": completion,
        "total_tokens": prompt + 1 + completion,
    }


def _finish(step: Step) -> str:
    return step.finish_reason or ("tool_calls" if step.tool_calls else "stop")


def _call_id(call: ToolCall, completion_id: int, index: int) -> str:
    return call.id or f"call_{completion_id}_{index}"


def _completion(request: dict[str, Any], step: Step, n: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or "scripted-model",
        "choices": [],
    }
    if not step.empty_choices:
        message: dict[str, Any] = {"role": "assistant", "content": step.content}
        if step.tool_calls:
            message["tool_calls"] = [
                {
                    "id": _call_id(c, n, i),
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_text()},
                }
                for i, c in enumerate(step.tool_calls)
            ]
        body["choices"] = [{"index": 0, "message": message, "finish_reason": _finish(step)}]
    if step.send_usage:
        body["usage"] = _usage(request, step)
    return body


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _chunks(request: dict[str, Any], step: Step, n: int, include_usage: bool) -> list[str]:
    base = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.get("model") or "scripted-model",
    }

    def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> str:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        return fastjson.dumps({**base, "choices": choices}).decode()

    out: list[str] = []
    if not step.empty_choices:
        out.append(chunk({"role": "assistant", "content": ""}))
        if step.content:
            out.extend(chunk({"content": p}) for p in _pieces(step.content, step.chunk_chars))
        for index, call in enumerate(step.tool_calls):
            head = {"index": index, "id": _call_id(call, n, index), "type": "function"}
            for j, piece in enumerate(_pieces(call.arguments_text(), step.chunk_chars)):
                if j == 0 or step.repeat_ids:
                    entry: dict[str, Any] = {
                        **head,
                        "function": {"name": call.name, "arguments": piece},
                    }
                else:
                    entry = {"index": index, "function": {"arguments": piece}}
                out.append(chunk({"tool_calls": [entry]}))
        out.append(chunk({}, _finish(step)))
    else:
        out.append(chunk(None))
    if include_usage and step.send_usage:
        usage = {**base, "choices": [], "usage": _usage(request, step)}
        out.append(fastjson.dumps(usage).decode())
    out.append("[DONE]")
    return out


# -- rules ----------------------------------------------------------------------------------

_NUMBER = r"(\d+(?:\.\d+)?)"
_DATA = re.compile(
    _NUMBER + r"\s*(TB|GB|MB|KB)(?![A-Za-z]).*?(?<![A-Za-z])(TB|GB|MB|KB|B)"
    r"(?![A-Za-z])"
)
_UNITS = re.compile(_NUMBER + r"\s*°?([A-Za-z]+)\s+(?:to|in|into)\s+°?([A-Za-z]+)", re.IGNORECASE)
_POWER = re.compile(_NUMBER + r"\s*(?:的|to the power of|\^|\*\*)\s*" + _NUMBER + r"\s*(?:次方)?")
_EXPR = re.compile(r"[-+*/().\d\s^]*\d\s*[-+*/^]\s*[-+*/().\d\s^]*\d[)\s]*")


def _convert(m: re.Match[str]) -> Step:
    """A ``unit_convert`` call from a match of (value, from unit, to unit)."""
    return call_tools(
        tool_call(
            "unit_convert",
            {"value": float(m.group(1)), "from_unit": m.group(2), "to_unit": m.group(3)},
        )
    )


def _user_step(text: str) -> Step:
    if m := _DATA.search(text):
        return _convert(m)
    if "华氏" in text or "fahrenheit" in text.lower():
        value = re.search(_NUMBER, text)
        return call_tools(
            tool_call(
                "unit_convert",
                {"value": float(value.group(1)) if value else 0, "from_unit": "F", "to_unit": "C"},
            )
        )
    if m := _UNITS.search(text):
        return _convert(m)
    if "平方根" in text or "square root" in text.lower():
        factor = re.search(_NUMBER, text)
        inner = "pi" if ("π" in text or "pi" in text.lower()) else "2"
        expr = f"{factor.group(1)} * sqrt({inner})" if factor else f"sqrt({inner})"
        return call_tools(tool_call("calculate", {"expression": expr}))
    if m := _POWER.search(text):
        return call_tools(tool_call("calculate", {"expression": f"{m.group(1)}**{m.group(2)}"}))
    if m := _EXPR.search(text):
        return call_tools(
            tool_call("calculate", {"expression": m.group(0).strip().replace("^", "**")})
        )
    return reply(f"You said: {text.strip()}")


def calculator_rules(request: dict[str, Any]) -> Step:
    """The guide's calculator prompts: a unit or maths question calls a tool; a tool result
    is answered with its content; anything else is echoed."""
    messages = request.get("messages") or [{}]
    last = messages[-1]
    if last.get("role") == "tool":
        return reply(f"The result is: {last.get('content')}")
    content = last.get("content")
    if isinstance(content, list):  # content parts
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return _user_step(str(content or ""))


SCRIPTS: dict[str, Rule] = {
    "rules": calculator_rules,
    "echo": lambda request: reply("ok"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", choices=sorted(SCRIPTS), default="rules")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per response")
    parser.add_argument(
        "--engine",
        choices=("threads", "asyncio"),
        default="threads",
        help="a thread per connection (as in the tests), or one asyncio loop "
        "(tests.support.modelserver_async: less CPU for many at once)",
    )
    args = parser.parse_args(argv)
    if args.engine == "asyncio":
        from tests.support.modelserver_async import serve

        return serve(SCRIPTS[args.script], args.latency, args.port)
    server = ScriptedModelServer(rules=SCRIPTS[args.script], latency=args.latency, port=args.port)
    print(server.url, flush=True)
    try:
        server._httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
