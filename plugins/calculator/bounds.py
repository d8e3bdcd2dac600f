"""Numeric limits of the calculator and the checks that enforce them before work is done.

Owns every bound an expression is held to (length, tree size, integer size, factorial, modulus,
rounding digits) and the arithmetic that needs a size estimate first (`**`, `*`). Must not parse
expressions or know function names; evaluator.py and functions.py do that.
"""

from __future__ import annotations

import math

Number = int | float

MAX_EXPRESSION_CHARS = 500
MAX_NODES = 300  # expression nodes in the parsed tree
MAX_DEPTH = 100  # nesting of expression nodes; keeps the recursive walk far from the stack limit
MAX_INT_BITS = 10_000  # about 3,000 decimal digits
MAX_FACTORIAL = 1_000  # factorial(1000) has about 8,530 bits
MAX_MODULUS_BITS = 1_024
MAX_MODPOW_COST = 2**26  # bits(exponent) * bits(modulus)**2, about what pow(b, e, m) costs
MAX_ROUND_DIGITS = 400  # round(int, -n) computes 10**n


class EvaluationError(ValueError):
    """An expression the calculator refuses; the message is the reason shown to the model."""


def check_number(value: object) -> Number:
    """Return `value` if it is a finite real number within the size bounds, else refuse it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EvaluationError("result is not a real number")
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise EvaluationError(f"integer result larger than {MAX_INT_BITS} bits")
    elif not math.isfinite(value):
        raise EvaluationError("number too large (floating-point overflow)")
    return value


def checked_mul(left: Number, right: Number) -> Number:
    """Multiply, refusing integer products that would exceed the size bound."""
    if (
        isinstance(left, int)
        and isinstance(right, int)
        and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1
    ):
        raise EvaluationError(f"integer result larger than {MAX_INT_BITS} bits")
    return check_number(left * right)


def checked_pow(base: Number, exponent: Number, modulus: Number | None = None) -> Number:
    """Raise to a power, estimating the result's size first so a bomb is refused, not computed."""
    if modulus is not None:
        return _modular_pow(base, exponent, modulus)
    if _int_pow_too_large(base, exponent):
        raise EvaluationError(f"integer result larger than {MAX_INT_BITS} bits")
    # Float powers run in constant time and raise OverflowError instead of growing.
    return check_number(base**exponent)


def _int_pow_too_large(base: Number, exponent: Number) -> bool:
    if not (isinstance(base, int) and isinstance(exponent, int)) or exponent <= 0 or abs(base) <= 1:
        return False
    # bits(base**exponent) ~ exponent * log2|base|; the first test keeps the product small.
    return exponent > MAX_INT_BITS or exponent * math.log2(abs(base)) > MAX_INT_BITS + 1


def _modular_pow(base: Number, exponent: Number, modulus: Number) -> Number:
    if not (isinstance(base, int) and isinstance(exponent, int) and isinstance(modulus, int)):
        raise EvaluationError("pow() with a modulus needs whole numbers")
    if modulus.bit_length() > MAX_MODULUS_BITS:
        raise EvaluationError(f"pow() modulus larger than {MAX_MODULUS_BITS} bits")
    if abs(exponent).bit_length() * modulus.bit_length() ** 2 > MAX_MODPOW_COST:
        raise EvaluationError("pow() exponent too large for this modulus")
    return pow(base, exponent, modulus)
