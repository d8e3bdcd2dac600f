"""The model client: one streamed chat completion against an OpenAI-compatible endpoint.

Owns the ``openai.AsyncOpenAI`` clients (imported lazily: daemon start-up does not pay for them;
one shared client on ``hermesd.model.http11``'s transport, or one per completion on the SDK's own;
the request body is encoded here; the event stream is read and folded into one assistant
message by ``hermesd.model.stream``), and our own retry policy (429, 5xx, timeouts, dropped
connections; exponential backoff with jitter, ``retry-after`` honoured up to a cap; the SDK's
retries are off; which errors qualify is ``hermesd.model.errors``). It knows nothing of
sessions, hooks or tools beyond their OpenAI shapes.

An attempt (``ModelClient.attempt``: one request, its stream read and folded) runs on the event
loop, or in the model client process (``hermesd.model.modelproc``, which runs this same method) as
``model.process`` says: ``auto`` hands attempts over while ``OFFLOAD_AFTER`` or more are in
flight on the loop.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import itertools
import logging
import os
import random
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hermesd.model import fastjson
from hermesd.model.errors import (
    ModelError,
    ModelNotConfigured,
    ModelRequestFailed,
    ModelResponseInvalid,
    classify,
    parse_retry_after,
)
from hermesd.model.stream import OnEvent, StreamAccumulator, StreamEvent, read_chunks

if TYPE_CHECKING:
    from hermesd.model.http11 import Http11Transport
    from hermesd.model.modelproc import ModelProcess

log = logging.getLogger(__name__)

# with the names of hermesd.model.errors and hermesd.model.stream that callers know from here
__all__ = [
    "Completion",
    "ConfigLike",
    "ModelClient",
    "ModelError",
    "ModelNotConfigured",
    "ModelRequestFailed",
    "ModelResponseInvalid",
    "ModelSettings",
    "OnEvent",
    "OnRetry",
    "RetryInfo",
    "StreamAccumulator",
    "StreamEvent",
    "classify",
    "parse_retry_after",
]

OnRetry = Callable[["RetryInfo"], Awaitable[None]]

MAX_IDLE_CLIENTS = 256  # idle SDK clients kept (each with its one kept-alive connection)
# model.process: auto: with this many attempts in flight on the event loop, the next ones go
# to the model client process (bench/turn.py measured 4, 8 and 16; docs/benchmarks.md)
OFFLOAD_AFTER = 8
_CONFIG_HINT = (
    "set model.base_url and model.default in $HERMES_HOME/config.yaml "
    "(or OPENAI_BASE_URL in the environment or .env)"
)


class ConfigLike(Protocol):
    def get(self, dotted: str, default: Any = None) -> Any: ...


@dataclass(frozen=True)
class ModelSettings:
    """Where and how to reach the model; ``from_config`` reads config.yaml and the env."""

    base_url: str | None
    model: str | None
    api_key: str | None = None
    provider: str = "custom"
    timeout: float = 120.0
    max_retries: int = 3
    retry_max_wait: float = 30.0
    backoff_base: float = 0.5
    transport: str = "hermesd"
    process: str = "inline"  # "separate" (or "auto" with 2+ CPUs): sent by hermesd.model.modelproc
    process_idle_exit: float = 300.0  # seconds an auto-started model client process idles

    @classmethod
    def from_config(cls, config: ConfigLike, env: Mapping[str, str] | None = None) -> ModelSettings:
        """``model.*`` keys, falling back to OPENAI_BASE_URL / OPENAI_API_KEY."""
        env = os.environ if env is None else env
        return cls(
            base_url=config.get("model.base_url") or env.get("OPENAI_BASE_URL") or None,
            model=config.get("model.default") or None,
            api_key=config.get("model.api_key") or env.get("OPENAI_API_KEY") or None,
            provider=str(config.get("model.provider") or "custom"),
            timeout=float(config.get("model.timeout", 120.0)),
            max_retries=int(config.get("model.max_retries", 3)),
            retry_max_wait=float(config.get("model.retry_max_wait", 30.0)),
            transport=str(config.get("model.transport") or "hermesd"),
            process=str(config.get("model.process") or "auto"),
            process_idle_exit=float(config.get("model.process_idle_exit", 300.0)),
        )

    @property
    def offloads(self) -> bool:
        """Whether attempts may run in the model client process: always with ``separate``;
        with ``auto`` under load, when this process may run on more than one CPU (on one,
        the two processes would only take turns, and the hand-over costs CPU)."""
        if self.process == "auto":
            return len(os.sched_getaffinity(0)) > 1
        return self.process == "separate"

    def check(self) -> None:
        """Raise ``ModelNotConfigured`` with what to set when the endpoint is incomplete."""
        if not self.base_url:
            raise ModelNotConfigured(f"No model endpoint is configured: {_CONFIG_HINT}.")
        if not self.model:
            raise ModelNotConfigured(
                "No model name is configured: set model.default in $HERMES_HOME/config.yaml."
            )


@dataclass
class Completion:
    """One finished model response."""

    message: dict[str, Any]
    finish_reason: str | None
    usage: dict[str, int] | None
    model: str | None = None
    attempts: int = 1

    @property
    def content(self) -> str:
        return str(self.message.get("content") or "")

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return list(self.message.get("tool_calls") or [])


@dataclass
class RetryInfo:
    """A failed attempt that will be retried after ``delay`` seconds."""

    attempt: int
    max_attempts: int
    delay: float
    error: ModelError
    discarded_output: bool
    duration: float


def _proxied(base_url: str | None) -> bool:
    """Whether the environment routes ``base_url`` through a proxy (hermesd's transport does
    not speak to proxies; the SDK's default one does)."""
    import urllib.parse
    import urllib.request

    proxies = urllib.request.getproxies_environment()
    if not proxies or not base_url:
        return False
    parts = urllib.parse.urlsplit(base_url)
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(parts.hostname or "")


# unique per request: a random prefix for this process, then a counter
_KEY_PREFIX = f"hermesd-{secrets.token_hex(8)}-"
_key_numbers = itertools.count(1)


class ModelClient:
    """Streams chat completions with retries; one per daemon (it pools connections)."""

    def __init__(
        self, settings: ModelSettings, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    ) -> None:
        self._settings = settings
        self._sleep = sleep
        # With hermesd's transport (hermesd.model.http11) one SDK client serves every completion.
        # With the SDK's httpx transport (model.transport: httpx, or a proxy in the
        # environment) clients are checked out for one completion and back in after it, so
        # each holds at most one connection: httpcore walks its whole pool (a getpeername and
        # a poll syscall per connection) on every request and response, which with one shared
        # pool and 100 turns at once cost more than the request itself.
        self._idle: list[Any] = []
        self._shared: Any = None  # the one client when hermesd's transport pools connections
        self._pool: Http11Transport | None = None  # that transport
        self._retired: list[Any] = []  # clients of an older endpoint, closed by aclose()
        self._closing: set[asyncio.Task[None]] = set()
        self._generation = 0
        self._prepare_lock = threading.Lock()
        self._make: Callable[[], Any] | None = None
        self._raw_response: Any = None
        self._usage_option = True
        self._body_param = "content"
        self._request_options: dict[str, Any] = {}
        self._completions_url = ""
        self._tools: tuple[Any, bytes] = (None, b"")  # a copy of the last tools and their JSON
        self._process: ModelProcess | None = None  # the model client process, once needed
        self._offloads = settings.offloads
        self._inline = 0  # attempts in flight on this event loop

    @property
    def settings(self) -> ModelSettings:
        return self._settings

    @settings.setter
    def settings(self, new: ModelSettings) -> None:
        """New settings (config reload); a changed endpoint, key or timeout gets new clients."""
        old, self._settings = self._settings, new
        self._offloads = new.offloads
        if self._process is not None:
            if new.offloads:
                self._process.settings = new
            else:  # model.process: inline now (or one CPU): attempts in flight are retried
                self._retire_process(f"model.process is now {new.process}")
        if (old.base_url, old.api_key, old.timeout) != (new.base_url, new.api_key, new.timeout):
            # requests in flight finish on their clients, which are retired when returned
            self._generation += 1
            self._retired.extend(self._idle)
            if self._shared is not None:
                self._retired.append(self._shared)
            self._idle, self._shared, self._pool = [], None, None
            self._make = None
            self._usage_option = True

    def _prepare(self) -> Callable[[], Any]:
        """Import the SDK and build the client factory (blocking: ~0.5 s the first time)."""
        with self._prepare_lock:
            make = self._make
            if make is None:
                settings = self.settings
                settings.check()
                import openai  # deferred: ~0.5 s of imports the daemon only pays when chatting

                from hermesd.model.http11 import Http11Transport, http  # the SDK's HTTP library
                from hermesd.model.httpclient import LeanAsyncClient

                create_ssl = getattr(http, "create_ssl_context", None)  # http: httpx (a fork)
                http_log = logging.getLogger(http.__name__)
                if http_log.level == logging.NOTSET and not log.isEnabledFor(logging.DEBUG):
                    # its INFO line for every request is journal noise (and ~50 µs a request)
                    http_log.setLevel(logging.WARNING)
                # One TLS context for all clients: building one reads the CA bundle (~20 ms).
                verify: Any = create_ssl() if create_ssl is not None else True
                lean = settings.transport == "hermesd" and not _proxied(settings.base_url)
                omit = openai.Omit()
                self._request_options = {
                    "headers": {"x-stainless-retry-count": omit, "x-stainless-read-timeout": omit}
                }

                def make(pool: Http11Transport | None = None) -> Any:
                    if pool is not None:
                        http_client = LeanAsyncClient(transport=pool)
                    else:
                        http_client = openai.DefaultAsyncHttpxClient(verify=verify)
                    client = openai.AsyncOpenAI(
                        base_url=settings.base_url,
                        api_key=settings.api_key or "not-needed",
                        timeout=settings.timeout,
                        max_retries=0,
                        http_client=http_client,
                    )
                    # Without the SDK's X-Stainless-* headers (OS, architecture, runtime and
                    # package versions, retry count, read timeout): the endpoint does not need
                    # to know the host, and merging them cost ~50 µs a request.
                    client = client.with_options(
                        default_headers={
                            name: omit
                            for name in client.default_headers
                            if name.lower().startswith("x-stainless")
                        }
                    )
                    # absolute: the SDK then does not merge it with its base URL (a parse less)
                    self._completions_url = str(client.base_url) + "chat/completions"
                    return client

                if lean:  # one client: the transport's pool costs nothing per connection
                    self._pool = Http11Transport(verify if verify is not True else None)
                    self._shared = make(self._pool)  # after the pool: attempt() checks this
                self._raw_response = http.Response
                # JSON bytes go as ``content`` (openai ≥ 3) or as ``body`` (1.99 to 2.x)
                self._body_param = (
                    "content"
                    if "content" in inspect.signature(openai.AsyncOpenAI.post).parameters
                    else "body"
                )
                self._make = make
            return make

    async def _checkout(self) -> tuple[Any, int]:
        """An SDK client for one completion and the endpoint generation it belongs to: the
        shared one (hermesd's transport), else an idle one (or a new one)."""
        if self._shared is not None:
            return self._shared, self._generation
        if self._idle:
            return self._idle.pop(), self._generation
        make = self._make
        if make is None:  # never block the loop on the SDK import or on warm_up's lock
            make = await asyncio.to_thread(self._prepare)
            if self._shared is not None:
                return self._shared, self._generation
        return make(), self._generation

    def _checkin(self, client: Any, generation: int) -> None:
        if client is self._shared:
            return
        if generation == self._generation and len(self._idle) < MAX_IDLE_CLIENTS:
            self._idle.append(client)
        elif generation == self._generation:  # a burst above the cap: close the spare
            task = asyncio.get_running_loop().create_task(client.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        else:
            self._retired.append(client)

    async def warm_up(self) -> None:
        """Import the SDK and build the client factory off the event loop (after start-up),
        or start the model client process, which does the same in its own time."""
        try:
            self.settings.check()
        except ModelNotConfigured:
            return
        if self.settings.process == "separate":
            await self._separate().start()
            return
        await asyncio.to_thread(self._prepare)

    async def aclose(self) -> None:
        """Close pooled connections (and stop the model client process)."""
        if self._process is not None:
            process, self._process = self._process, None
            await process.aclose()
        if self._closing:  # retired processes, spare clients
            await asyncio.wait(set(self._closing))
        clients = self._idle + self._retired + ([self._shared] if self._shared else [])
        self._idle, self._retired, self._shared, self._make = [], [], None, None
        for client in clients:
            await client.close()

    def _encode(self, payload: dict[str, Any]) -> bytes:
        """The request body: one encoding (``hermesd.model.fastjson``) for everything but the tools
        list. That list (equal every round of every turn until plugins change) is encoded
        once: it is compared with a copy of the list last encoded, so a list changed in place
        (a hook may edit the request it is shown) is encoded again."""
        tools = payload.get("tools")
        body = fastjson.dumps(
            {k: v for k, v in payload.items() if k != "tools"} if tools is not None else payload
        )
        if tools is None:
            return body
        snapshot, encoded = self._tools
        if tools != snapshot:
            encoded = fastjson.dumps(tools)
            self._tools = (copy.deepcopy(tools), encoded)
        return body[:-1] + b',"tools":' + encoded + b"}"

    def _delay(self, attempt: int, error: ModelError) -> float:
        cap = self.settings.retry_max_wait
        after: float | None = getattr(error, "retry_after", None)
        if after is not None:
            return min(after, cap)
        backoff: float = min(cap, self.settings.backoff_base * 2 ** (attempt - 1))
        return backoff * (0.5 + random.random() / 2)

    async def stream_completion(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        model: str | None = None,
        on_event: OnEvent | None = None,
        on_retry: OnRetry | None = None,
    ) -> Completion:
        """Stream one completion, retrying transient failures; return the final message.

        ``on_event`` gets ``text.delta`` and ``tool_call.started`` events as they arrive;
        ``on_retry`` is awaited before each retry (output already emitted is then stale).
        """
        self.settings.check()
        payload: dict[str, Any] = {
            "model": model or self.settings.model,
            "messages": messages,
            "stream": True,
        }
        if tools:
            payload["tools"] = tools
        attempts = max(1, self.settings.max_retries + 1)
        attempt, fell_back = 0, False
        while True:
            attempt += 1
            emitted = False

            def emit(event: StreamEvent) -> None:
                nonlocal emitted
                emitted = True
                if on_event is not None:
                    on_event(event)

            started = time.monotonic()
            try:
                if self._usage_option:
                    payload["stream_options"] = {"include_usage": True}
                else:
                    payload.pop("stream_options", None)
                completion = await self._send(self._encode(payload), emit)
                completion.attempts = attempt
                return completion
            except ModelError as error:
                if isinstance(error, ModelRequestFailed) and error.status in (400, 422):
                    if not fell_back and "stream_options" in payload:
                        fell_back, attempt = True, attempt - 1
                        log.info("endpoint rejected stream_options (%s); retrying without", error)
                        self._usage_option = False
                        continue
                    self._usage_option = True  # the rejection was not about stream_options
                if not error.retryable or attempt >= attempts:
                    if attempt > 1:
                        error.args = (f"{error} (after {attempt} attempts)",)
                    raise
                delay = self._delay(attempt, error)
                log.warning(
                    "model request failed (%s); retry %d/%d in %.2fs",
                    error,
                    attempt,
                    attempts - 1,
                    delay,
                )
                if on_retry is not None:
                    await on_retry(
                        RetryInfo(
                            attempt, attempts, delay, error, emitted, time.monotonic() - started
                        )
                    )
                await self._sleep(delay)

    async def _send(self, body: bytes, on_event: OnEvent) -> Completion:
        """One attempt, here or in the model client process, by ``model.process``:
        ``inline`` here; ``separate`` there; ``auto`` here while fewer than ``OFFLOAD_AFTER``
        attempts are in flight here (the lowest latency), else there once it is ready (it is
        started the first time that happens, and again if it died)."""
        if self._offloads:
            if self.settings.process == "separate":
                return await self._separate().attempt(body, on_event)
            if self._inline >= OFFLOAD_AFTER:
                process = self._separate()
                if process.ready:
                    return await process.attempt(body, on_event)
                process.start_soon()
        self._inline += 1
        try:
            return await self.attempt(body, on_event)
        finally:
            self._inline -= 1

    def _retire_process(self, reason: str) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(process.aclose(reason))
        except RuntimeError:  # no loop: nothing has run on it yet
            return
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def process_status(self) -> dict[str, Any]:
        """``model.process`` and the model client process's pid (None while none runs) and
        readiness, for ``status``."""
        process = self._process
        return {
            "mode": self.settings.process,
            "pid": process.pid if process is not None else None,
            "ready": bool(process is not None and process.ready),
        }

    def _separate(self) -> ModelProcess:
        """The model client process (``hermesd.model.modelproc.ModelProcess``), created once."""
        if self._process is None:
            from hermesd.model.modelproc import ModelProcess

            self._process = ModelProcess(self.settings)
        return self._process

    async def attempt(self, body: bytes, on_event: OnEvent | None = None) -> Completion:
        """Send one encoded request and read its stream: no retries. Failures are raised as
        ``ModelError`` (anything else is a bug, raised as it is)."""
        client, generation = await self._checkout()
        try:
            pool = self._pool
            if pool is not None and client is self._shared:  # a connection, then the SDK's work
                await pool.connect_ahead(self._completions_url, self.settings.timeout)
            acc = StreamAccumulator(on_event)
            try:
                await self._post(client, body, acc)
            except (asyncio.CancelledError, ModelError):
                raise
            except Exception as exc:
                error = classify(exc, self.settings.base_url, self.settings.timeout)
                if error is None:
                    raise
                raise error from exc
            return Completion(acc.message(), acc.finish_reason, acc.usage, acc.model)
        finally:
            self._checkin(client, generation)

    async def _post(self, client: Any, body: bytes, acc: StreamAccumulator) -> None:
        # The SDK's generic ``post``: the body goes as JSON bytes (sent as they are; the SDK's
        # own encoding deep-copies and re-encodes the whole request every round),
        # and with the HTTP library's response class as ``cast_to`` it hands back the raw
        # streamed response, whose events ``sse`` reads as plain dicts (the SDK's own stream
        # costs more CPU than the rest of a round).
        # An idempotency key of ours: the SDK otherwise makes a uuid4 for every request (it
        # sends none to OpenAI-compatible endpoints, but would if a version sent one).
        key = f"{_KEY_PREFIX}{next(_key_numbers)}"
        options = {**self._request_options, "idempotency_key": key}
        response = await client.post(
            self._completions_url,
            cast_to=self._raw_response,
            stream=True,
            options=options,
            **{self._body_param: body},
        )
        try:
            await read_chunks(response, acc.add, acc.flush)
        finally:
            await response.aclose()
        if not acc.choices_seen:
            kind = response.headers.get("content-type", "?")
            raise ModelResponseInvalid(
                "the model endpoint returned no completion"
                + (
                    " (empty choices)"
                    if acc.chunks
                    else f" stream (content-type: {kind}); "
                    "is model.base_url an OpenAI-compatible /v1 endpoint?"
                )
            )
