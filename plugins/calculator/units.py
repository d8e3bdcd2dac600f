"""Unit tables and conversion for unit_convert: length, weight, temperature, data, time.

Owns the supported units (one declaration, which the schema's enums also read) and the arithmetic
of converting between them. Must not know about JSON or tool arguments; that is tools.py.
"""

from __future__ import annotations

import math

# Size of one unit in its family's base unit (m, kg, B, s). Temperature is affine, not a ratio.
RATIOS: dict[str, dict[str, float]] = {
    "length": {"m": 1.0, "km": 1000.0, "mi": 1609.344, "ft": 0.3048, "in": 0.0254, "cm": 0.01},
    "weight": {"kg": 1.0, "g": 0.001, "lb": 0.45359237, "oz": 0.028349523125},
    "data": {"B": 1.0, "KB": 1024.0, "MB": 1024.0**2, "GB": 1024.0**3, "TB": 1024.0**4},
    "time": {"s": 1.0, "ms": 0.001, "min": 60.0, "hr": 3600.0, "day": 86400.0},
}
TEMPERATURE_UNITS = ("C", "F", "K")
FAMILIES: dict[str, tuple[str, ...]] = {
    "length": tuple(RATIOS["length"]),
    "weight": tuple(RATIOS["weight"]),
    "temperature": TEMPERATURE_UNITS,
    "data": tuple(RATIOS["data"]),
    "time": tuple(RATIOS["time"]),
}
UNIT_NAMES: list[str] = [unit for units in FAMILIES.values() for unit in units]

TEMPERATURE_DIGITS = 4
RATIO_DIGITS = 6

# Units are matched case-insensitively, as the guide does; every unit is unique once lowered.
_BY_LOWER: dict[str, tuple[str, str]] = {
    unit.lower(): (family, unit) for family, units in FAMILIES.items() for unit in units
}


class UnitError(ValueError):
    """A conversion that cannot be done; the message is shown to the model as is."""


def supported_units() -> str:
    """Describe every supported unit, family by family, for error messages."""
    return ", ".join(f"{family} ({', '.join(units)})" for family, units in FAMILIES.items())


def convert(value: float, from_unit: str, to_unit: str) -> tuple[float, str, str]:
    """Convert `value`; return the rounded result and the canonical spelling of both units."""
    source = _BY_LOWER.get(from_unit.lower())
    target = _BY_LOWER.get(to_unit.lower())
    if source is None or target is None or source[0] != target[0]:
        raise UnitError(
            f"Cannot convert {from_unit} → {to_unit}. Supported units: {supported_units()}."
        )
    family, src = source
    dst = target[1]
    if family == "temperature":
        result = round(_convert_temperature(value, src, dst), TEMPERATURE_DIGITS)
    else:
        result = round(value * RATIOS[family][src] / RATIOS[family][dst], RATIO_DIGITS)
    if not math.isfinite(result):
        raise UnitError("Result is out of range")
    return result, src, dst


def _convert_temperature(value: float, src: str, dst: str) -> float:
    kelvin = {"C": value + 273.15, "F": (value - 32) * 5 / 9 + 273.15, "K": value}[src]
    if kelvin < -1e-9:  # tolerance for the rounding of -459.67 F
        shown = int(value) if value.is_integer() else value
        raise UnitError(f"{shown} {src} is below absolute zero")
    return {"C": kelvin - 273.15, "F": (kelvin - 273.15) * 9 / 5 + 32, "K": kelvin}[dst]
