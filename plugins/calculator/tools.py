"""Tool handlers: turn the model's arguments into a JSON string, success or error, never raising.

Owns argument checking and the JSON result shapes of `calculate` and `unit_convert` (the guide's
shapes). Must not evaluate or convert by itself; evaluator.py and units.py do that.
"""

from __future__ import annotations

import json
import math
from typing import Any

from . import evaluator, units
from .bounds import MAX_EXPRESSION_CHARS

_MAX_VALUE_CHARS = 64  # a numeric string longer than this is not a measurement


def calculate(args: dict[str, Any], **kwargs: Any) -> str:
    """Evaluate `args["expression"]`; return `{"expression", "result"}` or an error as JSON."""
    expression = args.get("expression", "") if isinstance(args, dict) else None
    if not isinstance(expression, str):
        return _dumps({"error": "Invalid: expression must be a string"})
    expression = expression.strip()
    if not expression:
        return _dumps({"error": "No expression provided"})
    shown = expression
    if len(shown) > MAX_EXPRESSION_CHARS:
        shown = shown[:MAX_EXPRESSION_CHARS] + "…"
    try:
        result = evaluator.evaluate(expression)
    except ZeroDivisionError:
        return _dumps({"expression": shown, "error": "Division by zero"})
    except OverflowError:
        return _dumps({"expression": shown, "error": "Invalid: number too large"})
    except Exception as exc:
        return _dumps({"expression": shown, "error": f"Invalid: {_reason(exc)}"})
    return _dumps({"expression": shown, "result": result})


def unit_convert(args: dict[str, Any], **kwargs: Any) -> str:
    """Convert `value` from `from_unit` to `to_unit`; return `{"input", "result", "output"}`."""
    if not isinstance(args, dict):
        return _dumps({"error": "Need value, from_unit, and to_unit"})
    value, from_unit, to_unit = args.get("value"), args.get("from_unit"), args.get("to_unit")
    if (
        value is None
        or not isinstance(from_unit, str)
        or not isinstance(to_unit, str)
        or not from_unit.strip()
        or not to_unit.strip()
    ):
        return _dumps({"error": "Need value, from_unit, and to_unit"})
    try:
        number = _as_number(value)
        result, src, dst = units.convert(number, from_unit.strip(), to_unit.strip())
    except units.UnitError as exc:
        return _dumps({"error": str(exc)})
    except Exception as exc:
        return _dumps({"error": f"Conversion failed: {_reason(exc)}"})
    shown = value.strip() if isinstance(value, str) else value
    return _dumps({"input": f"{shown} {src}", "result": result, "output": f"{result} {dst}"})


def _as_number(value: object) -> float:
    # bool is an int subclass, but true/false is never a measurement.
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise units.UnitError(f"Value must be a number, got {_kind(value)}")
    if isinstance(value, str) and len(value) > _MAX_VALUE_CHARS:
        raise units.UnitError("Value must be a number, got a long string")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise units.UnitError(f"Value must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise units.UnitError("Value must be a finite number")
    return number


def _kind(value: object) -> str:
    return "a boolean" if isinstance(value, bool) else f"a {type(value).__name__}"


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _dumps(payload: dict[str, Any]) -> str:
    try:
        return json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError):  # e.g. NaN/inf, which json would emit as invalid JSON
        return json.dumps({"error": "Invalid: result cannot be represented as JSON"})
