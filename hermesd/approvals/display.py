"""How a command is shown to the person asked to approve it: what will run, visibly.

`show` returns the command as it must be displayed: every control character escaped so that
a terminal cannot be made to draw something else (``\\r``, ``\\e``, other C0/C1 characters,
bidi overrides and invisible format characters as ``\\xNN``/``\\uXXXX``), only *known* secret
values hidden (``hermesd.redact``'s configured values, never text that merely looks like a
secret: ``FOO_TOKEN=$(curl …)`` stays readable), its length, and the notes the person must
read when the display differs from the bytes that run. The same `Shown` feeds
``approval.request``, ``approvals.pending``, the approval hooks and the log line.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

_NAMED = {"\r": "\\r", "\t": "\\t", "\x1b": "\\e", "\x00": "\\0", "\b": "\\b", "\f": "\\f"}
_NAMED.update({"\v": "\\v", "\a": "\\a", "\x7f": "\\x7f"})


@dataclass(frozen=True)
class Shown:
    """A command as displayed, and what the person needs to know about the display."""

    text: str  # escaped, known secret values replaced
    length: int  # characters in the command that will run
    escaped: int  # control or invisible characters shown as escapes
    secrets_hidden: bool  # a known secret value was replaced in ``text``

    @property
    def notes(self) -> list[str]:
        """Sentences to show prominently beside the command."""
        out = []
        if self.secrets_hidden:
            out.append("Secret values were hidden from this display; the command runs with them.")
        if self.escaped:
            out.append(
                f"{self.escaped} control or invisible character(s) are shown as escapes "
                "(\\r, \\e, \\xNN, \\uXXXX); the command contains the characters themselves."
            )
        return out


def escape(text: str) -> tuple[str, int]:
    """``text`` with control and invisible characters escaped, and how many there were.

    Newlines stay (a multi-line command is shown on several lines); everything else that a
    terminal would act on or not draw becomes visible text.
    """
    out: list[str] = []
    count = 0
    for ch in text:
        if ch == "\n" or not _hidden(ch):
            out.append(ch)
            continue
        count += 1
        code = ord(ch)
        out.append(_NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"))
    return "".join(out), count


def _hidden(ch: str) -> bool:
    code = ord(ch)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return True
    if code < 0x7F:
        return False
    # Cf: bidi overrides and isolates, zero-width characters; Zl/Zp: line and paragraph
    # separators; Co/Cn: private-use and unassigned code points a font may draw as nothing
    return unicodedata.category(ch) in ("Cf", "Zl", "Zp", "Co", "Cn", "Cs")


def show(command: str, hide_values: Callable[[str], str]) -> Shown:
    """``command`` for display; ``hide_values`` replaces known secret values (only those)."""
    hidden = hide_values(command)
    text, count = escape(hidden)
    return Shown(text, len(command), count, hidden != command)
