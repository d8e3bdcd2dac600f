"""Long answers in pieces a platform accepts, as the reference splits them.

A piece breaks at a newline (in its second half), else at a space, else where it must; a code
fence open at a break is closed there and reopened (same language) in the next piece; pieces
of a split answer end with `` (i/n)``. Telegram counts UTF-16 code units (`utf16_len`).
"""

from __future__ import annotations

from collections.abc import Callable

#: the largest message of each platform (the reference's values)
MAX_LENGTH = {"telegram": 4096, "matrix": 4000, "discord": 2000, "slack": 39000}
_INDICATOR = 10  # room for " (12/34)"
_CLOSE = "\n```"


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units (what Telegram counts)."""
    return len(text.encode("utf-16-le")) // 2


def _fits(text: str, budget: int, measure: Callable[[str], int]) -> int:
    """How many code points of ``text`` fit in ``budget`` units (at least one)."""
    if measure is len:
        return max(1, min(len(text), budget))
    used = 0
    for i, ch in enumerate(text):
        used += measure(ch)
        if used > budget:
            return max(1, i)
    return len(text)


def _break_at(region: str, limit: int) -> int:
    at = region.rfind("\n")
    if at < limit // 2:
        at = region.rfind(" ")
    if at < 1:
        return max(1, limit)
    # not inside an inline `code` span: break before its opening backtick instead
    if (region[:at].count("`") - region[:at].count("\\`")) % 2:
        tick = region.rfind("`", 0, at)
        safe = max(region.rfind(" ", 0, tick), region.rfind("\n", 0, tick))
        if safe > limit // 4:
            return safe
    return at


def _open_fence(body: str, carried: str | None) -> str | None:
    """The language of the fence ``body`` leaves open (None: none open)."""
    lang = carried
    for line in body.split("\n"):
        stripped = line.strip()
        if stripped.startswith("```"):
            lang = None if lang is not None else (stripped[3:].split() or [""])[0]
    return lang


def split_message(
    text: str, max_length: int = 4096, measure: Callable[[str], int] = len
) -> list[str]:
    """``text`` in pieces of at most ``max_length`` units (``measure``), fences kept whole."""
    if measure(text) <= max_length:
        return [text]
    pieces: list[str] = []
    rest = text
    carried: str | None = None
    while rest:
        prefix = f"```{carried}\n" if carried is not None else ""
        if measure(prefix) + measure(rest) <= max_length - _INDICATOR:
            pieces.append(prefix + rest)
            break
        room = max_length - _INDICATOR - measure(prefix) - measure(_CLOSE)
        if room < 1:
            room = max(1, max_length // 2)
        limit = _fits(rest, room, measure)
        at = _break_at(rest[:limit], limit)
        body, rest = rest[:at], rest[at:].lstrip()
        carried = _open_fence(body, carried)
        pieces.append(prefix + body + (_CLOSE if carried is not None else ""))
    if len(pieces) > 1:
        pieces = [f"{p} ({i}/{len(pieces)})" for i, p in enumerate(pieces, 1)]
    return pieces
