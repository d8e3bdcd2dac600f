"""What a tool call gives back: arguments parsed, the handler's value made a result string,
secrets redacted and the result cut to its budget. Pure functions used by the registry's
pipeline (`hermesd.tools.registry`); every failure is a ``{"error": ...}`` JSON string."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from hermesd.model.fastjson import valid_text

log = logging.getLogger(__name__)

PRECLIP_MARGIN = 65_536  # characters kept past the budget before redacting a huge result

Redactor = Callable[[str], str]


def error_result(message: str) -> str:
    """The JSON string every pipeline failure is reported as."""
    return json.dumps({"error": valid_text(message)}, ensure_ascii=False)


def parse_args(raw: Mapping[str, Any] | str | None) -> tuple[dict[str, Any], str | None]:
    """Arguments as a dict (a JSON string is accepted), and what is wrong with them if
    anything."""
    if raw is None:
        return {}, None
    if isinstance(raw, str):
        if not raw.strip():
            return {}, None
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            return {}, f"arguments are not valid JSON ({exc})"
    if not isinstance(raw, Mapping):
        return {}, f"arguments must be a JSON object, not {type(raw).__name__}"
    return dict(raw), None


def as_result(name: str, value: Any) -> tuple[str, str, str | None, str | None]:
    """A handler's return value as ``(result, status, error_type, error_message)``: dicts and
    lists become JSON, anything else that is not a string is a contract error, and a JSON
    result carrying ``error`` counts as a failed call."""
    if isinstance(value, (dict, list)):
        try:
            value = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            message = (
                f"Tool '{name}' returned a {type(value).__name__} that is not "
                f"JSON-serializable: {exc}"
            )
            return error_result(message), "error", "tool_result_contract", message
    if not isinstance(value, str):
        message = f"Tool '{name}' returned {type(value).__name__}, not a JSON string"
        log.warning(message)
        return error_result(message), "error", "tool_result_contract", message
    value = valid_text(value)  # half a surrogate pair could be neither stored nor sent
    tool_error = reported_error(value)
    if tool_error is not None:
        return value, "error", "tool_error", tool_error
    return value, "ok", None, None


def reported_error(result: str) -> str | None:
    """The ``error`` a tool reported in its own JSON result, if it did."""
    if not result.startswith("{") or '"error"' not in result:
        return None
    try:
        parsed = json.loads(result)
    except ValueError:
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return str(error) if error else None


def redact(result: str, redactor: Redactor | None) -> str:
    """``result`` through ``redactor``; withheld if the redactor fails."""
    if redactor is None:
        return result
    try:
        return redactor(result)
    except Exception:
        log.exception("Redactor failed; withholding the tool result")
        return error_result("Tool result withheld: redaction failed")


def redact_and_clip(result: str, redactor: Redactor | None, budget: int) -> str:
    """Redact, then cut to ``budget``; a huge result is cut *before* redaction too.

    Redacting 50 MB on the loop would stall the daemon for seconds, so only a head of
    ``2 × budget + margin`` characters is redacted; a secret cut in half at the end of that
    head is at least ``margin`` characters past the budget, so it never reaches the model.
    If redaction shrank the head too much for that to hold, the whole text is redacted.
    """
    limit = 2 * budget + PRECLIP_MARGIN
    if len(result) <= limit:
        return clip(redact(result, redactor), budget)
    head = redact(result[:limit], redactor)
    if len(head) >= budget + PRECLIP_MARGIN:
        return clip(head, budget, dropped=len(result) - limit)
    return clip(redact(result, redactor), budget)


def clip(result: str, budget: int, dropped: int = 0) -> str:
    """``result`` cut to ``budget`` characters, saying how much more there was."""
    if len(result) <= budget:
        return result
    cut = len(result) - budget + dropped
    return (
        f"{result[:budget]}\n\n[truncated: {cut} more characters; tool results are "
        f"limited to {budget} characters]"
    )
