"""A `Completion` in the shape middleware expects of a provider response, and back.

``llm_execution`` middleware (`hermesd.runtime.middleware`) was written against the reference,
whose ``next_call`` returns the ``openai`` SDK's ``ChatCompletion``: plugins read
``response.choices[0].message.content`` and ``response.usage.prompt_tokens``. A middleware
that refuses returns a look-alike of its own (often a ``SimpleNamespace`` tree) or a dict.
`as_chat_completion` builds the first; `completion_from_response` reads any of them, by
attribute or by key, into a `Completion`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from hermesd.model.client import Completion
from hermesd.model.errors import ModelResponseInvalid
from hermesd.model.stream import token_count

_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def as_chat_completion(completion: Completion, model: str | None = None) -> Any:
    """``completion`` as an ``openai`` ``ChatCompletion`` (a namespace tree if that fails)."""
    data: dict[str, Any] = {
        "id": "hermesd-completion",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": completion.model or model or "",
        "choices": [
            {
                "index": 0,
                "finish_reason": completion.finish_reason or "stop",
                "message": {"role": "assistant", **completion.message},
            }
        ],
    }
    if completion.usage:
        data["usage"] = {k: int(completion.usage.get(k) or 0) for k in _USAGE_KEYS}
    try:
        from openai.types.chat import ChatCompletion

        return ChatCompletion.model_validate(data)
    except Exception:  # an odd finish_reason or message field: same data, no validation
        return _namespace(data)


def _namespace(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _namespace(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_namespace(v) for v in value]
    return value


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def completion_from_response(value: Any) -> Completion:
    """Read a chat-completion-shaped response (object or dict), or plain text, into a
    `Completion`; `ModelResponseInvalid` when it is neither."""
    if isinstance(value, Completion):
        return value
    if isinstance(value, str):
        return Completion({"role": "assistant", "content": value}, "stop", None)
    choices = _field(value, "choices")
    if not isinstance(choices, (list, tuple)) or not choices:
        raise ModelResponseInvalid(
            f"llm_execution middleware returned {type(value).__name__}, not a chat completion"
        )
    choice = choices[0]
    message = _field(choice, "message")
    content = _field(message, "content")
    out: dict[str, Any] = {
        "role": "assistant",
        "content": None if content is None else str(content),
    }
    calls = [_tool_call(c) for c in (_field(message, "tool_calls") or ())]
    if calls:
        out["tool_calls"] = calls
    usage = _field(value, "usage")
    counts = None
    if usage is not None:
        counts = {k: token_count(_field(usage, k)) for k in _USAGE_KEYS}
    model = _field(value, "model")
    return Completion(
        out,
        _field(choice, "finish_reason") or "stop",
        counts,
        model if isinstance(model, str) else None,
    )


def _tool_call(call: Any) -> dict[str, Any]:
    function = _field(call, "function")
    arguments = _field(function, "arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {})
    return {
        "id": str(_field(call, "id") or ""),
        "type": "function",
        "function": {"name": str(_field(function, "name") or ""), "arguments": arguments},
    }
