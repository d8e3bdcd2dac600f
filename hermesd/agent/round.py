"""One streamed model round: the request as middleware rewrites it, the streamed answer, its usage.

Owns, for one request: the ``llm_request`` and
``llm_execution`` middleware, ``pre_api_request``/``post_api_request`` and ``api_request_error``
(one per failed attempt), streaming text deltas to the listener with secrets redacted (a secret
split across two deltas is still caught), and the request's usage as a value
(`Round.usage`). It stores nothing: the turn commits the message the round produced with its
usage (``hermesd.agent.commit``); ``ctx.llm`` stores the usage alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hermesd import redact
from hermesd.agent.scope import TurnScope
from hermesd.context.compressor import IMAGE_TOKENS
from hermesd.model.client import Completion, ModelClient, RetryInfo
from hermesd.model.errors import ModelError, ModelRequestFailed, ModelResponseInvalid
from hermesd.model.response import as_chat_completion, completion_from_response
from hermesd.model.stream import canonical_usage
from hermesd.runtime.hooks import first_classification
from hermesd.runtime.hooks_surfaces import StreamObservers
from hermesd.runtime.middleware import MiddlewareBus, MiddlewareTimeout
from hermesd.store.usage import RequestUsage

log = logging.getLogger(__name__)


@dataclass
class Round:
    """What one request produced: the completion, its usage and the request's id."""

    completion: Completion
    usage: RequestUsage
    request_id: str
    buckets: dict[str, int] | None = None  # canonical usage buckets (None: none reported)
    seconds: float = 0.0  # from sending the request to the end of its stream


@dataclass
class RoundInput:
    """What one request sends and what its hooks are told about the turn around it."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    call_count: int  # this request's number in its turn (``api_call_count``)
    request_id: str
    extra: dict[str, Any] | None = None  # request options (``ctx.llm``'s max_tokens, ...)
    user_message: str = ""
    history: Sequence[dict[str, Any]] = ()  # the stored conversation (``pre_api_request``)
    # streamed text shown (redacted on the loop) up to this many characters; past it the
    # answer is cut when stored anyway (``sessions.max_message_bytes``)
    max_shown: int = 4 * 1024 * 1024


@dataclass
class _Attempt:
    """The state of one request while it streams: what it sent, its retries, its redactor."""

    request: dict[str, Any]
    base: dict[str, Any]
    trace: list[dict[str, Any]] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    retries: int = 0
    shown: redact.StreamRedactor = field(default_factory=redact.StreamRedactor)
    streamed: int = 0  # characters of text streamed so far
    observers: StreamObservers | None = None  # the stream hooks, when a plugin has one


def _observe(scope: TurnScope, sent: RoundInput, provider: str) -> StreamObservers:
    ids = {
        "session_id": scope.session_id,
        "turn_id": scope.turn_id,
        "iteration": sent.call_count,
        "surface": scope.platform,
        "model": scope.model,
        "provider": provider,
    }
    return StreamObservers(scope.hooks, ids)


async def stream_round(client: ModelClient, scope: TurnScope, sent: RoundInput) -> Round:
    """Send one request (through middleware and hooks), stream it, return what it produced.
    The caller checks the budgets first (`UsageMeter.check`)."""
    settings = client.settings
    request: dict[str, Any] = {"model": scope.model, "messages": sent.messages, "stream": True}
    if sent.tools:
        request["tools"] = sent.tools
    if sent.extra:
        request.update({k: v for k, v in sent.extra.items() if k not in request})
    base = {
        "api_request_id": sent.request_id,
        "api_call_count": sent.call_count,
        "provider": settings.provider,
        "base_url": settings.base_url,
    }
    attempt = _Attempt(request, base)
    middleware = scope.hooks.middleware
    wrapped = middleware.has("llm_request") or middleware.has("llm_execution")
    if wrapped:
        await _rewrite(middleware, scope, attempt)
    if scope.hooked("pre_api_request"):  # copying the request costs; skip it unhooked
        await _pre_api_request(scope, sent, attempt)
    if StreamObservers.wanted(scope.hooks) and not scope.auxiliary:  # issue 32: observers
        attempt.observers = _observe(scope, sent, settings.provider)
    started, started_at = time.monotonic(), time.time()
    try:
        if wrapped:
            completion = await _wrapped_send(client, middleware, scope, sent, attempt)
        else:
            completion = await client.stream_completion(
                sent.messages,
                sent.tools or None,
                model=scope.model,
                on_event=_deltas(scope, attempt, sent.max_shown),
                on_retry=_retries(client, scope, attempt),
                extra=sent.extra,
                on_error=_classifier(scope, sent, settings.provider),
            )
    except ModelError as exc:
        if attempt.observers is not None:
            attempt.observers.end()
        duration = time.monotonic() - started
        await _request_error(client, scope, attempt, exc, duration, retryable=False)
        raise
    except BaseException:  # cancelled: the observers still get their end
        if attempt.observers is not None:
            attempt.observers.end()
        raise
    rest = attempt.shown.flush()
    if rest:
        scope.emit("text.delta", text=rest)
    if attempt.observers is not None:
        if rest:
            attempt.observers.delta(rest)
        shown = completion.content if completion.tool_calls else ""
        attempt.observers.end(redact.redact(shown) if shown else "")
        scope.observers.append(attempt.observers.task)  # the turn waits for them to finish
    buckets = canonical_usage(completion.usage)
    used = RequestUsage.from_buckets(scope.model, buckets, completion.model)
    if scope.hooked("post_api_request"):
        await scope.hook(
            "post_api_request",
            **base,
            api_mode="chat_completions",
            api_duration=time.monotonic() - started,
            started_at=started_at,
            ended_at=time.time(),
            finish_reason=completion.finish_reason,
            response_model=completion.model or scope.model,
            response=completion.message,
            assistant_message=completion.message,
            assistant_content_chars=len(completion.content),
            assistant_tool_call_count=len(completion.tool_calls),
            message_count=len(sent.messages),
            usage=canonical_usage(completion.usage),  # a copy: a hook may change it
            middleware_trace=attempt.trace,
        )
    return Round(completion, used, sent.request_id, buckets, time.monotonic() - started)


async def _rewrite(middleware: MiddlewareBus, scope: TurnScope, attempt: _Attempt) -> None:
    """The ``llm_request`` middleware's rewrite of the request (and its trace)."""
    attempt.context = {
        "session_id": scope.session_id,
        "task_id": scope.session_id,
        "turn_id": scope.turn_id,
        "platform": scope.platform,
        "model": scope.model,
        **attempt.base,
        "base_url": attempt.base["base_url"] or "",
        "api_mode": "chat_completions",
    }
    rewritten = await middleware.apply_request(
        "llm_request", "request", attempt.request, attempt.context
    )
    attempt.request, attempt.trace = rewritten.payload, rewritten.trace
    attempt.context["original_request"] = rewritten.original


async def _pre_api_request(scope: TurnScope, sent: RoundInput, attempt: _Attempt) -> None:
    request = attempt.request
    messages = request.get("messages")
    messages = messages if isinstance(messages, list) else sent.messages
    chars, pictures = 0, 0
    for m in messages:
        if isinstance(m, dict):
            text, images = _sizes(m.get("content"))
            chars, pictures = chars + text, pictures + images
    base = attempt.base  # spelled out below: the hook-site test checks the names
    await scope.hook(
        "pre_api_request",
        api_request_id=base["api_request_id"],
        api_call_count=base["api_call_count"],
        provider=base["provider"],
        base_url=base["base_url"],
        api_mode="chat_completions",
        request_messages=list(messages),
        message_count=len(messages),
        tool_count=len(request.get("tools") or ()),
        approx_input_tokens=chars // 4 + pictures * IMAGE_TOKENS,
        request_char_count=chars,
        max_tokens=request.get("max_tokens"),
        user_message=sent.user_message,
        conversation_history=list(sent.history),
        started_at=time.time(),
        retry_count=0,
        request={**request, "messages": list(messages)},
        middleware_trace=attempt.trace,
    )


def _sizes(content: Any) -> tuple[int, int]:
    """A message's characters of text and its number of image parts."""
    if not isinstance(content, list):
        return len(str(content or "")), 0
    parts = [p for p in content if isinstance(p, dict)]
    images = sum(1 for p in parts if p.get("type") == "image_url")
    return sum(len(str(p.get("text") or "")) for p in parts), images


def _deltas(
    scope: TurnScope, attempt: _Attempt, max_shown: int
) -> Callable[[dict[str, Any]], None]:
    """The stream's listener: text deltas to the turn's listener, secrets redacted, up to
    ``max_shown`` characters (a huge answer is not scanned on the loop past what is kept)."""

    def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "text.delta":
            attempt.streamed += len(event["text"])
            if attempt.streamed > max_shown:
                return
            text = attempt.shown.feed(event["text"])
            if text:
                scope.emit("text.delta", text=text)
                if attempt.observers is not None:
                    attempt.observers.delta(text)

    return on_event


def _retries(
    client: ModelClient, scope: TurnScope, attempt: _Attempt
) -> Callable[[RetryInfo], Awaitable[None]]:
    """The client's retry callback: a ``model.retry`` event and ``api_request_error``."""

    async def on_retry(info: RetryInfo) -> None:
        attempt.retries = info.attempt
        attempt.shown = redact.StreamRedactor()  # what it held belonged to the failed attempt
        attempt.streamed = 0
        scope.emit(
            "model.retry",
            attempt=info.attempt,
            max_attempts=info.max_attempts,
            delay=info.delay,
            error=str(info.error),
            discard_partial=info.discarded_output,
        )
        await _request_error(
            client, scope, attempt, info.error, info.duration, retryable=True, count=info.attempt
        )

    return on_retry


async def _wrapped_send(
    client: ModelClient,
    middleware: MiddlewareBus,
    scope: TurnScope,
    sent: RoundInput,
    attempt: _Attempt,
) -> Completion:
    """The model request inside the ``llm_execution`` middleware (retries and streaming stay
    inside its ``next_call``); a refusal it returns becomes the completion."""
    answered: list[tuple[Completion, Any]] = []

    async def real_call(payload: Any) -> Any:
        if not isinstance(payload, dict):
            payload = attempt.request
        messages = payload.get("messages")
        completion = await client.stream_completion(
            messages if isinstance(messages, list) else sent.messages,
            payload.get("tools") or None,
            model=str(payload.get("model") or scope.model),
            on_event=_deltas(scope, attempt, sent.max_shown),
            on_retry=_retries(client, scope, attempt),
            extra=payload,
            on_error=_classifier(scope, sent, client.settings.provider),
        )
        response = as_chat_completion(completion, scope.model)
        answered.append((completion, response))
        return response

    try:
        value = await middleware.run_execution(
            "llm_execution",
            "request",
            attempt.request,
            real_call,
            {**attempt.context, "middleware_trace": list(attempt.trace)},
        )
    except MiddlewareTimeout as exc:
        raise ModelResponseInvalid(f"the request was refused: {exc}") from None
    for completion, response in answered:
        if value is response:
            return completion
    return completion_from_response(value)


def _classifier(
    scope: TurnScope, sent: RoundInput, provider: str
) -> Callable[[ModelError], Awaitable[None]] | None:
    """``transform_api_error_classification`` for each failed attempt, when a plugin has it:
    the first valid classification sets the error's ``reason``, and its ``retryable`` and
    ``message`` when it gives them; its ``should_compress`` and ``should_fallback`` go with
    the error to the turn (`hermesd.agent.recovery`); ``should_rotate_credential`` is logged
    (hermesd keeps one key per endpoint)."""
    if not scope.hooked("transform_api_error_classification"):
        return None
    chars = sum(_sizes(m.get("content"))[0] for m in sent.messages if isinstance(m, dict))

    async def classify(error: ModelError) -> None:
        failed = error if isinstance(error, ModelRequestFailed) else None
        body = failed.body if failed is not None else {}
        inner: dict[str, Any] = body["error"] if isinstance(body.get("error"), dict) else body
        verdict = first_classification(
            await scope.hook(
                "transform_api_error_classification",
                provider=provider,
                status_code=failed.status if failed is not None else None,
                error_type=type(error).__name__,
                error_code=str(inner.get("code") or inner.get("type") or ""),
                error_message=str(error),
                error_body=dict(body),
                error=error,
                approx_tokens=chars // 4,
                context_length=0,
                num_messages=len(sent.messages),
            )
        )
        if verdict is None:
            return
        error.reason = verdict["reason"]
        error.hints = {k: v for k, v in verdict.items() if k.startswith("should_")}
        if "retryable" in verdict:
            error.retryable = verdict["retryable"]
        if "message" in verdict:
            error.args = (verdict["message"],)
        log.info("model error classified by a plugin: %s", verdict)

    return classify


async def _request_error(
    client: ModelClient,
    scope: TurnScope,
    attempt: _Attempt,
    exc: ModelError,
    duration: float,
    *,
    retryable: bool,
    count: int | None = None,
) -> None:
    """``api_request_error`` for one failed attempt (``count``: the retry that failed)."""
    status = exc.status if isinstance(exc, ModelRequestFailed) else None
    retry_count = attempt.retries if count is None else count - 1
    base = attempt.base
    await scope.hook(
        "api_request_error",
        api_request_id=base["api_request_id"],
        api_call_count=base["api_call_count"],
        provider=base["provider"],
        base_url=base["base_url"],
        status_code=status,
        retry_count=retry_count,
        max_retries=client.settings.max_retries,
        retryable=retryable,
        error_type=type(exc).__name__,
        error_message=str(exc),
        reason=exc.reason or str(exc),
        api_mode="chat_completions",
        api_duration=duration,
        started_at=time.time() - duration,
        ended_at=time.time(),
        request=attempt.request,
        error={"type": type(exc).__name__, "message": str(exc), "status": status},
    )
