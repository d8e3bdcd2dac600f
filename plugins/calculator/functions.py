"""The names an expression may use: an allow-list of constants and functions, arguments bounded.

Owns which functions and constants `calculate` can reach and the argument checks that keep each
call cheap. Must not parse or walk expressions; that is evaluator.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .bounds import (
    MAX_FACTORIAL,
    MAX_ROUND_DIGITS,
    EvaluationError,
    Number,
    checked_pow,
)

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _factorial(n: Number) -> int:
    if isinstance(n, float):
        if not n.is_integer():
            raise EvaluationError("factorial() needs a whole number")
        n = int(n)
    if n < 0:
        raise EvaluationError("factorial() needs a non-negative number")
    if n > MAX_FACTORIAL:
        raise EvaluationError(f"factorial() argument above {MAX_FACTORIAL}")
    return math.factorial(n)


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int):
        raise EvaluationError("round() digits must be a whole number")
    if abs(ndigits) > MAX_ROUND_DIGITS:
        raise EvaluationError(f"round() digits outside ±{MAX_ROUND_DIGITS}")
    return round(x, ndigits)


def _min(*args: Number) -> Number:
    if not args:
        raise EvaluationError("min() needs at least one number")
    return min(args)


def _max(*args: Number) -> Number:
    if not args:
        raise EvaluationError("max() needs at least one number")
    return max(args)


FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs,
    "round": _round,
    "min": _min,
    "max": _max,
    "pow": checked_pow,
    "sqrt": math.sqrt,
    "cbrt": math.cbrt,
    "exp": math.exp,
    "log": math.log,
    "log2": math.log2,
    "log10": math.log10,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "atan2": math.atan2,
    "sinh": math.sinh,
    "cosh": math.cosh,
    "tanh": math.tanh,
    "degrees": math.degrees,
    "radians": math.radians,
    "hypot": math.hypot,
    "floor": math.floor,
    "ceil": math.ceil,
    "trunc": math.trunc,
    "factorial": _factorial,
}
