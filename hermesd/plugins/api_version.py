"""Which Hermes plugin API hermesd implements, and a manifest's ``requires_hermes`` gate.

hermesd implements the plugin API of hermes-agent `HERMES_PLUGIN_API_VERSION`
(docs/hermes-compat.md, "Compatibility level"). A ``plugin.yaml`` may say which Hermes it needs,
as in the reference: ``requires_hermes: ">=0.19"`` — comparator clauses (``>=``, ``>``, ``<=``,
``<``, ``==``, ``!=``) joined by commas, all of which must hold; a bare version means ``>=``.
Versions compare by their first three numeric parts (``0.19`` is ``0.19.0``; a suffix such as
``rc1`` is dropped). A plugin whose range excludes the implemented version, or whose range cannot
be read, is not loaded, and the reason names both.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

from hermesd import HERMES_PLUGIN_API_VERSION, PLUGIN_API

_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)?\s*v?(\d+(?:\.\d+){0,2})[A-Za-z0-9.+-]*\s*$")
_COMPARE: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}


def version_tuple(text: str) -> tuple[int, ...]:
    """``"0.19"`` -> ``(0, 19, 0)``: the first three numeric parts, missing ones 0."""
    parts = [int(p) for p in text.split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def satisfies(spec: str, version: str = HERMES_PLUGIN_API_VERSION) -> bool:
    """True when ``version`` meets every clause of ``spec``; ValueError for an unreadable one."""
    current = version_tuple(version)
    clauses = [c for c in spec.split(",") if c.strip()]
    if not clauses:
        raise ValueError("it is empty")
    for clause in clauses:
        match = _CLAUSE.match(clause)
        if match is None:
            raise ValueError(f"{clause.strip()!r} is not a comparator and a version")
        if not _COMPARE[match[1] or ">="](current, version_tuple(match[2])):
            return False
    return True


def refusal(spec: str | None) -> str | None:
    """Why a plugin declaring ``requires_hermes: spec`` may not load here; None when it may."""
    if not spec:
        return None
    try:
        fits = satisfies(spec)
    except ValueError as exc:
        return f"requires_hermes {spec!r} cannot be read ({exc}); hermesd implements {PLUGIN_API}"
    if fits:
        return None
    return f"requires hermes {spec}, but hermesd implements the plugin API of {PLUGIN_API}"
