"""The multi-file patch format (``*** Begin Patch`` … ``*** End Patch``), parsed into operations.

The format coding agents write (the reference calls it V4A)::

    *** Begin Patch
    *** Update File: src/app.py
    @@ def main
     context line
    -removed line
    +added line
    *** Add File: src/new.py
    +first line
    *** Delete File: src/old.py
    *** Move File: a.py -> b.py
    *** End Patch

An Update may carry ``*** Move to: new/path`` right after its header (a rename with edits).
A line in a hunk without a prefix counts as context, as models often drop the leading space.
Parsing only; applying is `hermesd.tools.patch`, which validates every operation before it
writes anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["FileOp", "Hunk", "PatchFormatError", "parse_patch"]

_HEADER = re.compile(r"^\*\*\*\s*(Add|Update|Delete) File:\s*(.+?)\s*$")
_MOVE = re.compile(r"^\*\*\*\s*Move File:\s*(.+?)\s*->\s*(.+?)\s*$")
_MOVE_TO = re.compile(r"^\*\*\*\s*Move to:\s*(.+?)\s*$")
_HINT = re.compile(r"^@@\s*(.*?)\s*(@@)?\s*$")


class PatchFormatError(Exception):
    """The patch text is not in the format; nothing was applied."""


@dataclass
class Hunk:
    """One edit in an Update: the lines before (context and removed) and after it."""

    hint: str | None = None
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        """Whether the hunk has no lines at all."""
        return not self.old and not self.new


@dataclass
class FileOp:
    """One file's operation: ``kind`` is add, update, delete or move."""

    kind: str
    path: str
    move_to: str | None = None
    hunks: list[Hunk] = field(default_factory=list)
    added: list[str] = field(default_factory=list)  # an Add's lines


def _hunk_line(op: FileOp, line: str) -> None:
    if op.kind == "add":
        op.added.append(line[1:] if line.startswith("+") else line)
        return
    if op.kind != "update":
        if line.strip():
            raise PatchFormatError(f"unexpected line after '*** {op.kind} File: {op.path}'")
        return
    if not op.hunks:
        op.hunks.append(Hunk())
    hunk = op.hunks[-1]
    if line.startswith("\\"):  # "\ No newline at end of file"
        return
    if line.startswith("+"):
        hunk.new.append(line[1:])
    elif line.startswith("-"):
        hunk.old.append(line[1:])
    else:
        text = line[1:] if line.startswith(" ") else line
        hunk.old.append(text)
        hunk.new.append(text)


def parse_patch(text: str) -> list[FileOp]:
    """The operations of a patch, in order; `PatchFormatError` when it cannot be read."""
    ops: list[FileOp] = []
    current: FileOp | None = None
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.rstrip("\r")
        stripped = line.strip()
        if re.fullmatch(r"\*\*\*\s*(Begin|End) Patch", stripped):
            current = None
            continue
        if (m := _HEADER.match(line)) is not None:
            current = FileOp(m.group(1).lower(), m.group(2))
            ops.append(current)
        elif (m := _MOVE.match(line)) is not None:
            ops.append(FileOp("move", m.group(1), move_to=m.group(2)))
            current = None
        elif (m := _MOVE_TO.match(line)) is not None:
            if current is None or current.kind != "update":
                raise PatchFormatError("'*** Move to:' must follow '*** Update File:'")
            current.move_to = m.group(1)
        elif current is None:
            if stripped:
                raise PatchFormatError(f"line outside any file section: {line[:80]!r}")
        elif line.startswith("@@") and current.kind == "update":
            m = _HINT.match(line)
            hint = m.group(1) if m is not None and m.group(1) else None
            if current.hunks and current.hunks[-1].empty():
                current.hunks[-1].hint = hint
            else:
                current.hunks.append(Hunk(hint=hint))
        elif line or current.kind == "add":
            _hunk_line(current, line)
    return _checked(ops)


def _checked(ops: list[FileOp]) -> list[FileOp]:
    if not ops:
        raise PatchFormatError("the patch names no file ('*** Update File: path' and the like)")
    for op in ops:
        if op.kind == "add" and op.added and op.added[-1] == "":
            op.added.pop()  # the blank line before the next header is not content
        op.hunks = [h for h in op.hunks if not h.empty()]
        if op.kind == "update" and not op.hunks and op.move_to is None:
            raise PatchFormatError(f"'*** Update File: {op.path}' has no changes")
    return ops
