"""The model client: one streamed chat completion against an OpenAI-compatible endpoint.

Owns the daemon's one ``openai.AsyncOpenAI`` (imported lazily: daemon start-up does not pay
for it), on the SDK's own aiohttp client (``openai.DefaultAioHttpClient``; docs/sessions.md
says why that one). The request body is encoded here (``hermesd.model.fastjson``) and posted as
it is; the raw event stream is read and folded into one assistant message by
``hermesd.model.stream``. The retry policy is ours (429, 5xx, timeouts, dropped connections;
exponential backoff with jitter, ``retry-after`` honoured up to a cap; the SDK's retries are
off; which errors qualify is ``hermesd.model.errors``). A changed endpoint, key or timeout
(config reload) gets a new SDK client; the old one is closed once its requests are done. It
knows nothing of sessions, hooks or tools beyond their OpenAI shapes.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import os
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from hermesd.model import fastjson
from hermesd.model.errors import (
    ModelError,
    ModelNotConfigured,
    ModelRequestFailed,
    ModelResponseInvalid,
    classify,
    parse_retry_after,
)
from hermesd.model.fallback import EndpointSpec, OtherEndpoints, specs_from_config
from hermesd.model.stream import (
    OnEvent,
    StreamAccumulator,
    StreamEvent,
    http_library,
    read_chunks,
)

if TYPE_CHECKING:
    from openai import Omit, RequestOptions

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
OnError = Callable[[ModelError], Awaitable[None]]

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
    fallbacks: tuple[EndpointSpec, ...] = ()  # ``fallback_providers`` (hermesd.model.fallback)

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
            fallbacks=specs_from_config(config.get("fallback_providers"), env),
        )

    @property
    def endpoint(self) -> tuple[str | None, str | None, float]:
        """What an SDK client is built for: a change of any of it needs a new client."""
        return (self.base_url, self.api_key, self.timeout)

    def check(self) -> None:
        """Raise ``ModelNotConfigured`` with what to set when the endpoint is incomplete."""
        if not self.base_url:
            raise ModelNotConfigured(f"No model endpoint is configured: {_CONFIG_HINT}.")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            # permanent: a ModelNotConfigured is never retried
            raise ModelNotConfigured(
                f"The model endpoint {self.base_url!r} is not an absolute http(s) URL: "
                f"{_CONFIG_HINT}."
            )
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


#: Request fields middleware may not set through ``extra``: the stream is what we read.
_FIXED_FIELDS = frozenset({"model", "messages", "tools", "stream", "stream_options"})

# unique per request: a random prefix for this process, then a counter
_KEY_PREFIX = f"hermesd-{secrets.token_hex(8)}-"
_key_numbers = itertools.count(1)


class _Endpoint:
    """One SDK client, built for one ``ModelSettings.endpoint``, and its requests in flight."""

    def __init__(self, settings: ModelSettings) -> None:
        """Build the client (blocking: the SDK import takes ~0.5 s the first time, the TLS
        context ~20 ms; run it off the event loop)."""
        import openai  # deferred: ~0.5 s of imports the daemon only pays when chatting

        http = http_library()
        http_log = logging.getLogger(http.__name__)
        if http_log.level == logging.NOTSET and not log.isEnabledFor(logging.DEBUG):
            http_log.setLevel(logging.WARNING)  # its INFO line for every request is journal noise
        self.key = settings.endpoint
        self.raw_response: type = http.Response  # as ``cast_to``: the SDK returns it unread
        self.in_flight = 0
        self.retired = False
        omit = openai.Omit()
        # Without the SDK's X-Stainless-* headers (OS, architecture, runtime and package
        # versions, retry count, read timeout): the endpoint does not need to know the host.
        self.headers: dict[str, str | Omit] = {
            "x-stainless-retry-count": omit,
            "x-stainless-read-timeout": omit,
        }
        sdk = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key or "not-needed",
            timeout=settings.timeout,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(),
        )
        unsent: dict[str, Any] = {  # typed as str, but the SDK drops a header set to Omit
            name: omit for name in sdk.default_headers if name.lower().startswith("x-stainless")
        }
        self.sdk = sdk.with_options(default_headers=unsent)

    async def close(self) -> None:
        await self.sdk.close()


class ModelClient:
    """Streams chat completions with retries; one per daemon (its SDK client pools connections)."""

    def __init__(
        self, settings: ModelSettings, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    ) -> None:
        self._settings = settings
        self._sleep = sleep
        self._endpoint: _Endpoint | None = None
        self._building = asyncio.Lock()  # one endpoint built at a time, off the loop
        self._retired: set[_Endpoint] = set()  # older endpoints with requests still in flight
        self._closing: set[asyncio.Task[None]] = set()
        # base URLs whose endpoint refused stream_options (usage in the stream): not asked again
        self._without_usage: set[str | None] = set()
        self._tools: tuple[Any, bytes] = (None, b"")  # a copy of the last tools and their JSON
        self.others = OtherEndpoints()  # clients of other endpoints (fallbacks, delegation)

    @property
    def settings(self) -> ModelSettings:
        return self._settings

    @settings.setter
    def settings(self, new: ModelSettings) -> None:
        """New settings (config reload): a changed endpoint, key or timeout gets a new SDK
        client; requests in flight finish on the old one, which is closed after them."""
        old, self._settings = self._settings, new
        if old.endpoint != new.endpoint and self._endpoint is not None:
            self._retire(self._endpoint)
            self._endpoint = None

    async def _current(self) -> _Endpoint:
        """The SDK client for the current settings, built (off the loop) the first time."""
        endpoint = self._endpoint
        while endpoint is None or endpoint.key != self.settings.endpoint:
            async with self._building:
                if self._endpoint is None:
                    self._endpoint = await asyncio.to_thread(_Endpoint, self.settings)
                endpoint = self._endpoint
                if endpoint.key != self.settings.endpoint:  # reloaded while it was built
                    self._retire(endpoint)
                    self._endpoint = endpoint = None
        return endpoint

    def _retire(self, endpoint: _Endpoint) -> None:
        endpoint.retired = True
        if endpoint.in_flight:
            self._retired.add(endpoint)  # closed by the last request to finish (or aclose)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # settings changed outside the loop: aclose closes it
            self._retired.add(endpoint)
            return
        self._retired.discard(endpoint)
        task = loop.create_task(endpoint.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def warm_up(self) -> None:
        """Import the SDK and build its client off the event loop (after start-up), so the
        first turn does not wait for it."""
        try:
            self.settings.check()
        except ModelNotConfigured:
            return
        await self._current()

    async def aclose(self) -> None:
        """Close the SDK clients and their connections."""
        endpoints = [*self._retired, *([self._endpoint] if self._endpoint else [])]
        self._endpoint = None
        self._retired.clear()
        if self._closing:
            await asyncio.wait(set(self._closing))
        for endpoint in endpoints:
            await endpoint.close()
        await self.others.aclose()

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
        extra: Mapping[str, Any] | None = None,
        on_error: OnError | None = None,
    ) -> Completion:
        """Stream one completion, retrying transient failures; return the final message.

        ``extra`` adds request fields (``temperature``, ``max_tokens``, …: what middleware
        put in the request); it cannot turn streaming off.

        ``on_event`` gets ``text.delta`` and ``tool_call.started`` events as they arrive;
        ``on_retry`` is awaited before each retry (output already emitted is then stale);
        ``on_error`` with each failure, before the retry decision (it may reclassify it)."""
        self.settings.check()
        payload: dict[str, Any] = {
            "model": model or self.settings.model,
            "messages": messages,
            "stream": True,
        }
        if tools:
            payload["tools"] = tools
        if extra:
            payload.update({k: v for k, v in extra.items() if k not in _FIXED_FIELDS})
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
                base_url = self.settings.base_url
                if base_url not in self._without_usage:
                    payload["stream_options"] = {"include_usage": True}
                else:
                    payload.pop("stream_options", None)
                completion = await self.attempt(self._encode(payload), emit)
                completion.attempts = attempt
                return completion
            except ModelError as error:
                if isinstance(error, ModelRequestFailed) and error.status in (400, 422):
                    if not fell_back and "stream_options" in payload:
                        fell_back, attempt = True, attempt - 1
                        log.info("endpoint rejected stream_options (%s); retrying without", error)
                        self._without_usage.add(base_url)
                        continue
                    self._without_usage.discard(base_url)  # the rejection was not about it
                if on_error is not None:
                    await on_error(error)
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

    async def attempt(self, body: bytes, on_event: OnEvent | None = None) -> Completion:
        """Send one encoded request and read its stream: no retries. Failures are raised as
        ``ModelError`` (anything else is a bug, raised as it is)."""
        endpoint = await self._current()
        endpoint.in_flight += 1
        try:
            acc = StreamAccumulator(on_event)
            try:
                await self._post(endpoint, body, acc)
            except (asyncio.CancelledError, ModelError):
                raise
            except Exception as exc:
                error = classify(exc, self.settings.base_url, self.settings.timeout)
                if error is None:
                    raise
                raise error from exc
            return Completion(acc.message(), acc.finish_reason, acc.usage, acc.model)
        finally:
            endpoint.in_flight -= 1
            if endpoint.retired and not endpoint.in_flight:
                self._retire(endpoint)

    async def _post(self, endpoint: _Endpoint, body: bytes, acc: StreamAccumulator) -> None:
        # The SDK's generic ``post`` (documented, but its signature is openai 3's: pyproject pins
        # the major version): the body goes as JSON bytes, sent as they are (the SDK's own
        # encoding deep-copies and re-encodes the whole request every round), and with the HTTP
        # library's response class as ``cast_to`` it hands back the raw streamed response,
        # whose events ``hermesd.model.stream`` reads as plain dicts (the SDK's own stream
        # costs more CPU than the rest of a round). The path is relative: the SDK joins it to
        # the base URL, with or without a path or a trailing slash.
        # An idempotency key of ours: the SDK otherwise makes a uuid4 for every request (it
        # sends none to OpenAI-compatible endpoints, but would if a version sent one).
        options: RequestOptions = {
            "headers": endpoint.headers,
            "idempotency_key": f"{_KEY_PREFIX}{next(_key_numbers)}",
        }
        response: Any = await endpoint.sdk.post(
            "chat/completions",
            cast_to=endpoint.raw_response,
            stream=True,
            content=body,
            options=options,
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
