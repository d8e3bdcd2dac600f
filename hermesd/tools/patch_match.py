"""Finding the text a model means to edit: exact first, then forgiving line matches.

A model copies ``old_string`` from what it read, and often gets the whitespace wrong: tabs
for spaces, a different indentation depth, trailing blanks, collapsed runs of spaces, blank
lines around the snippet. `find_spans` tries strategies from strictest to loosest and stops
at the first that finds anything, so a loose strategy never wins over an exact match. A fuzzy
match always covers whole lines, and `replace_spans` re-indents the replacement by the
difference between the indentation the model wrote and the file's, so the edit lands at the
file's depth. Pure functions on ``str``; no I/O (the tool is `hermesd.tools.patch`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Match", "MatchError", "find_spans", "replace", "replace_spans"]

_SPACES = re.compile(r"\s+")


class MatchError(Exception):
    """``old_string`` was not found, or was found more than once where one was required."""


@dataclass(frozen=True)
class Match:
    """Where ``old_string`` is: character spans in the content, and the strategy that found it."""

    spans: list[tuple[int, int]]
    strategy: str


def _trimmed(line: str) -> str:
    return line.strip()


def _collapsed(line: str) -> str:
    return _SPACES.sub(" ", line).strip()


_LINE_STRATEGIES: list[tuple[str, Callable[[str], str]]] = [
    ("line_trimmed", _trimmed),  # indentation and trailing blanks may differ
    ("whitespace_normalized", _collapsed),  # any run of whitespace counts as one space
]


def _exact(content: str, pattern: str) -> list[tuple[int, int]]:
    spans, at = [], content.find(pattern)
    while at != -1:
        spans.append((at, at + len(pattern)))
        at = content.find(pattern, at + len(pattern))
    return spans


def _line_spans(content: str, pattern: str, norm: Callable[[str], str]) -> list[tuple[int, int]]:
    """Spans of whole-line windows whose normalized lines equal the pattern's."""
    wanted = pattern.split("\n")
    while wanted and not wanted[0].strip():  # blank lines around the snippet don't count
        wanted.pop(0)
    while wanted and not wanted[-1].strip():
        wanted.pop()
    if not wanted:
        return []
    keys = [norm(line) for line in wanted]
    lines = content.split("\n")
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += len(line) + 1
    spans: list[tuple[int, int]] = []
    i, n = 0, len(keys)
    while i + n <= len(lines):
        if norm(lines[i]) == keys[0] and all(norm(lines[i + k]) == keys[k] for k in range(1, n)):
            last = i + n - 1
            spans.append((starts[i], starts[last] + len(lines[last])))
            i += n  # matches do not overlap
        else:
            i += 1
    return spans


def _whole(content: str, span: tuple[int, int]) -> bool:
    start, end = span
    return (start == 0 or content[start - 1] == "\n") and (
        end == len(content) or content[end] == "\n"
    )


def find_spans(content: str, old: str, *, whole_lines: bool = False) -> Match:
    """Where ``old`` occurs in ``content`` by the strictest strategy that finds it at all;
    ``whole_lines``: an exact match must cover whole lines (a patch hunk's lines are lines)."""
    if not old:
        raise MatchError("'old_string' is empty; give the text to replace")
    spans = _exact(content, old)
    if whole_lines:
        spans = [span for span in spans if _whole(content, span)]
    if spans:
        return Match(spans, "exact")
    for name, norm in _LINE_STRATEGIES:
        spans = _line_spans(content, old, norm)
        if spans:
            return Match(spans, name)
    raise MatchError(
        "old_string not found (also tried ignoring indentation and whitespace); "
        "read the file again and copy the lines exactly"
    )


def _lead(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _indent_map(old: str, region: str) -> dict[str, str]:
    """The file's indentation for each indentation the model wrote, line by line."""
    wrote = [line for line in old.split("\n") if line.strip()]
    has = [line for line in region.split("\n") if line.strip()]
    mapping: dict[str, str] = {}
    for mine, theirs in zip(wrote, has, strict=False):
        mapping.setdefault(_lead(mine), _lead(theirs))
    return mapping


def _reindent(new: str, mapping: dict[str, str]) -> str:
    """``new`` with each indentation the model wrote swapped for the file's."""
    if all(k == v for k, v in mapping.items()):
        return new
    base = next(iter(mapping.items()), ("", ""))  # the snippet's first line
    out = []
    for line in new.split("\n"):
        lead = _lead(line)
        if not line.strip():
            out.append(line)
        elif lead in mapping:
            out.append(mapping[lead] + line[len(lead) :])
        elif lead.startswith(base[0]):  # deeper than a known line: keep the extra depth
            out.append(base[1] + line[len(base[0]) :])
        else:
            out.append(line)
    return "\n".join(out)


def replace_spans(content: str, match: Match, old: str, new: str) -> str:
    """``content`` with every span of ``match`` replaced by ``new`` (re-indented when fuzzy)."""
    parts, last = [], 0
    for start, end in match.spans:
        text = new
        if match.strategy != "exact":
            text = _reindent(new, _indent_map(old, content[start:end]))
        parts.append(content[last:start])
        parts.append(text)
        last = end
    parts.append(content[last:])
    return "".join(parts)


def replace(content: str, old: str, new: str, replace_all: bool = False) -> tuple[str, Match]:
    """Replace ``old`` with ``new``; one match is required unless ``replace_all``."""
    match = find_spans(content, old)
    if len(match.spans) > 1 and not replace_all:
        raise MatchError(
            f"old_string matches {len(match.spans)} places; add surrounding lines to make it "
            "unique, or set replace_all to change every one"
        )
    return replace_spans(content, match, old, new), match
