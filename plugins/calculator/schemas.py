"""Tool schemas: what the model reads to decide when and how to call each tool.

Owns the names, descriptions and parameter specs of `calculate` and `unit_convert`. The unit enums
come from units.py so the schema and the converter can never disagree.
"""

from __future__ import annotations

from typing import Any

from .units import UNIT_NAMES, supported_units

CALCULATE: dict[str, Any] = {
    "name": "calculate",
    "description": (
        "Evaluate one arithmetic expression and return its numeric result as JSON "
        '({"expression", "result"} or {"expression", "error"}). Supports + - * / // % ** and '
        "parentheses; functions abs, round, min, max, pow, sqrt, cbrt, exp, log, log2, log10, "
        "sin, cos, tan, asin, acos, atan, atan2, sinh, cosh, tanh, degrees, radians, hypot, "
        "floor, ceil, trunc, factorial; constants pi, e, tau. Angles are in radians. Use it for "
        "any arithmetic instead of computing in your head. Not for variables, equations or units."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "description": (
                    "Python-style arithmetic expression, at most 500 characters, "
                    "e.g. '2**16', 'sqrt(144)', 'pi * 5**2'"
                ),
            },
        },
        "required": ["expression"],
    },
}

UNIT_CONVERT: dict[str, Any] = {
    "name": "unit_convert",
    "description": (
        "Convert a numeric value from one unit to another of the same kind and return JSON "
        '{"input", "result", "output"} (e.g. 100 F -> 37.7778 C), or {"error"} when the units '
        f"differ in kind. Supported: {supported_units()}. Data units are binary (1 KB = 1024 B)."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "value": {"type": "number", "description": "The quantity to convert, e.g. 100"},
            "from_unit": {
                "type": "string",
                "enum": UNIT_NAMES,
                "description": "Unit the value is given in",
            },
            "to_unit": {
                "type": "string",
                "enum": UNIT_NAMES,
                "description": "Unit to convert into; same kind as from_unit",
            },
        },
        "required": ["value", "from_unit", "to_unit"],
    },
}
