"""What the built-in tools share: reading a call's arguments (a bad one is an error result the
model can read, never an exception), error results, and capping long text in the middle."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

#: ``transform_terminal_output`` hook point: kwargs command, output, returncode, task_id,
#: env_type; a str result replaces the output.
TransformOutput = Callable[..., Awaitable[str | None]]

OUTPUT_CAP = 50_000


def error(message: str) -> str:
    """A tool result the model reads as a failure: ``{"error": message}``."""
    return json.dumps({"error": message})


class BadArgs(Exception):
    """An argument the tool cannot use; its message goes back to the model."""


def str_arg(
    args: dict[str, Any], key: str, *, required: bool = False, default: str | None = None
) -> str | None:
    value = args.get(key, default)
    if value is None or value == "":
        if required:
            raise BadArgs(f"'{key}' is required")
        return default
    if not isinstance(value, str):
        raise BadArgs(f"'{key}' must be a string")
    return value


def int_arg(args: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = args.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise BadArgs(f"'{key}' must be an integer")
    if not low <= value <= high:
        raise BadArgs(f"'{key}' must be between {low} and {high}")
    return int(value)


def cap_middle(text: str, limit: int = OUTPUT_CAP) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    half = limit // 2
    return (text[:half] + f"\n… [{len(text) - limit} characters omitted] …\n" + text[-half:]), True
