"""What can go wrong with a model request, and how an ``openai`` SDK exception maps to it:
`ModelError` and its kinds, which of them are worth a retry, and how long a ``retry-after``
asks to wait. `hermesd.model.client` re-exports all of it."""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from typing import Any

_RETRY_STATUSES = frozenset({408, 409, 425, 429})
#: how endpoints word "the request is over the model's window" (OpenAI and vLLM, llama.cpp,
#: Ollama, Anthropic-compatible proxies), lower case
_OVERFLOW_WORDS = (
    "context length",
    "context_length_exceeded",
    "context window",
    "context size",
    "exceed_context_size",
    "maximum context",
    "too many tokens",
    "prompt is too long",
    "prompt too long",
)


class ModelError(Exception):
    """A model request did not produce a usable answer. ``reason``: a plugin's classification
    of it (``transform_api_error_classification``), None when no plugin gave one; ``hints``:
    that classification's ``should_compress``/``should_fallback``/… flags."""

    retryable = False
    reason: str | None = None
    hints: dict[str, bool] | None = None


class ModelNotConfigured(ModelError):
    """No endpoint or model name is configured."""


class ModelRequestFailed(ModelError):
    """The endpoint answered with an error status, or could not be reached (status None)."""

    def __init__(
        self,
        status: int | None,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after
        self.body = body or {}  # the endpoint's error object (the SDK's ``body``), if any


class ModelResponseInvalid(ModelError):
    """The endpoint answered 200 with something that is not a chat completion stream."""


def overflowed(error: ModelError) -> bool:
    """Whether ``error`` says the request was over the model's window (so a compaction may
    make it fit). A plugin's classification decides when there is one."""
    hinted = (error.hints or {}).get("should_compress")
    if hinted is not None:
        return bool(hinted)
    if error.reason is not None:
        return error.reason in ("context_overflow", "payload_too_large")
    if not isinstance(error, ModelRequestFailed) or error.status not in (400, 413, 422):
        return False
    text = f"{error} {error.body}".lower()
    return any(words in text for words in _OVERFLOW_WORDS)


_WINDOW_PATTERNS = (
    re.compile(r"maximum context length is (\d+)"),  # OpenAI, vLLM
    re.compile(r"context (?:size|window|length)[^0-9]{0,40}?\(?(\d{3,}) tokens"),
    re.compile(r"n_ctx[\"':= ]+(\d+)"),  # llama.cpp's error object
)


def window_from(error: ModelError) -> int | None:
    """The window an overflow error says the model has (``maximum context length is 8192``,
    llama.cpp's ``n_ctx``), or None when it does not say."""
    body = error.body if isinstance(error, ModelRequestFailed) else {}
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    if isinstance(inner, dict) and isinstance(inner.get("n_ctx"), int) and inner["n_ctx"] > 0:
        return int(inner["n_ctx"])
    text = str(error).lower()
    for pattern in _WINDOW_PATTERNS:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        if message:
            return str(message)
    return str(getattr(exc, "message", None) or exc)


def _timed_out(exc: BaseException) -> bool:
    """Whether a ``TimeoutError`` is behind ``exc``. The SDK's aiohttp adapter reports every
    lost or refused connection as a connect timeout, whose causes show what it was."""
    seen: set[int] = set()
    cause: BaseException | None = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, TimeoutError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def classify(exc: BaseException, base_url: str | None, timeout: float) -> ModelError | None:
    """The ``ModelError`` for an SDK or decoding exception; None when it is not one."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        return ModelRequestFailed(
            status,
            _error_message(exc),
            retryable=status in _RETRY_STATUSES or status >= 500,
            retry_after=parse_retry_after(exc.response.headers),
            body=exc.body if isinstance(exc.body, dict) else None,
        )
    if isinstance(exc, openai.APITimeoutError) and _timed_out(exc):
        return ModelRequestFailed(
            None, f"model request timed out after {timeout:g}s", retryable=True
        )
    if isinstance(exc, openai.APIConnectionError):  # an APITimeoutError that was no timeout too
        cause = exc.__cause__ or exc.__context__
        detail = f": {cause}" if cause else ""
        return ModelRequestFailed(
            None, f"connection to the model endpoint {base_url} failed{detail}", retryable=True
        )
    if isinstance(exc, openai.APIResponseValidationError | ValueError):
        return ModelResponseInvalid(f"the model endpoint sent a malformed response: {exc}")
    if isinstance(exc, openai.APIError):
        return ModelRequestFailed(
            None, f"the model endpoint reported an error: {_error_message(exc)}", retryable=True
        )
    return None
