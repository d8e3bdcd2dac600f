"""How a command is shown to the person asked to approve it: what will run, visibly.

`show` returns the command as it must be displayed: every control character escaped so that
a terminal cannot be made to draw something else (``\\r``, ``\\e``, other C0/C1 characters,
bidi overrides and invisible format characters as ``\\xNN``/``\\uXXXX``), only *known* secret
values hidden (``hermesd.redact``'s configured values, never text that merely looks like a
secret: ``FOO_TOKEN=$(curl …)`` stays readable), its length, and the notes the person must
read when the display differs from the bytes that run. The same `Shown` feeds
``approval.request``, ``approvals.pending``, the approval hooks and the log line.

`Shown.warnings` flag what makes a command look like another one: bidirectional controls
(drawing order differs from running order), zero-width and other invisible characters, words
whose letters come from more than one script or that are look-alikes of a Latin word
(``сurl`` with a Cyrillic ``с``), and padding: a run of more than `PAD_RUN` blanks is shown as
``␣×N`` (a newline run as ``⏎×N``) so a 3,000-space pad cannot push the tail of a command out
of sight. Each warning is ``{"kind", "message"}`` so every client can show it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field

from hermesd import untrusted

PAD_RUN = 16  # blanks in a row a command may hold without its display collapsing them
_BLANK = "[ \t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]"  # spaces, not \r or \v
_BLANKS = re.compile(rf"{_BLANK}{{{PAD_RUN + 1},}}")
_REPEATED = re.compile(rf"([^\n]|\n)\1{{{PAD_RUN},}}")
_NEWLINES = re.compile(r"\n{4,}")
_WORD = re.compile(r"[^\s/\\'\"`;|&<>()=,:]+")

_NAMED = {"\r": "\\r", "\t": "\\t", "\x1b": "\\e", "\x00": "\\0", "\b": "\\b", "\f": "\\f"}
_NAMED.update({"\v": "\\v", "\a": "\\a", "\x7f": "\\x7f"})


@dataclass(frozen=True)
class Shown:
    """A command as displayed, and what the person needs to know about the display."""

    text: str  # escaped, known secret values replaced
    length: int  # characters in the command that will run
    escaped: int  # control or invisible characters shown as escapes
    secrets_hidden: bool  # a known secret value was replaced in ``text``
    warnings: list[dict[str, str]] = field(default_factory=list)  # {"kind", "message"}

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
    collapsed, padding = collapse(hidden)
    text = escape(collapsed)[0]
    count = sum(1 for ch in hidden if ch != "\n" and _hidden(ch))  # collapsed runs count too
    return Shown(text, len(command), count, hidden != command, warnings(hidden) + padding)


def collapse(text: str) -> tuple[str, list[dict[str, str]]]:
    """``text`` with long blank and newline runs shown as ``␣×N`` / ``⏎×N``, and a warning
    for each kind collapsed."""
    runs: list[int] = []
    lines: list[int] = []
    hidden: list[int] = []

    def blank(m: re.Match[str]) -> str:
        runs.append(len(m.group()))
        return f"␣×{len(m.group())}"

    def newline(m: re.Match[str]) -> str:
        lines.append(len(m.group()))
        return f"\n⏎×{len(m.group())}\n"

    def repeated(m: re.Match[str]) -> str:
        if not _hidden(m.group(1)):
            return m.group()
        hidden.append(len(m.group()))  # 3,000 escapes would push the tail away as well
        return f"{escape(m.group(1))[0]}×{len(m.group())}"

    text = _NEWLINES.sub(newline, _BLANKS.sub(blank, text))
    text = _REPEATED.sub(repeated, text)
    out = []
    if runs:
        out.append(
            _warning(
                "padding",
                f"{len(runs)} run(s) of blank characters (longest {max(runs):,}) are shown as "
                "␣×N so the rest of the command stays in view; the command contains them.",
            )
        )
    if lines:
        out.append(
            _warning(
                "padding",
                f"{len(lines)} run(s) of empty lines (longest {max(lines):,}) are shown as ⏎×N.",
            )
        )
    if hidden:
        out.append(
            _warning(
                "padding",
                f"{len(hidden)} run(s) of one control or invisible character (longest "
                f"{max(hidden):,}) are shown once with ×N.",
            )
        )
    return text, out


def warnings(command: str) -> list[dict[str, str]]:
    """What makes ``command`` look like something else: bidi controls, invisible characters,
    look-alike and mixed-script words (padding is `collapse`'s)."""
    out = []
    bidi = sorted({ch for ch in command if untrusted.bidi_control(ch)})
    if bidi:
        out.append(
            _warning(
                "bidi",
                f"Bidirectional control character(s) {_codes(bidi)}: text may be drawn in "
                "another order than it runs. They are shown as \\uXXXX.",
            )
        )
    hidden = sorted({ch for ch in command if untrusted.invisible(ch)} - set(bidi))
    if hidden:
        out.append(
            _warning(
                "invisible",
                f"Invisible character(s) {_codes(hidden)} (zero-width or format characters) "
                "are in the command. They are shown as \\uXXXX.",
            )
        )
    looks = _look_alikes(command)
    if looks:
        out.append(
            _warning(
                "homoglyph",
                "Look-alike letters from another script: " + "; ".join(looks) + ".",
            )
        )
    return out


def _look_alikes(command: str) -> list[str]:
    found: list[str] = []
    for word in dict.fromkeys(_WORD.findall(command)):
        scripts = sorted({s for s in map(untrusted.script, word) if s is not None})
        folded = untrusted.fold(word)
        mixed = len(scripts) > 1
        imitates = folded != word and folded.isascii() and scripts != ["LATIN"]
        if not (mixed or imitates):
            continue
        odd = [ch for ch in word if untrusted.script(ch) not in (None, "LATIN")]
        letters = ", ".join(f"{unicodedata.name(ch, '?')} (U+{ord(ch):04X})" for ch in odd)
        shown = escape(word)[0]
        reads = f" reads like '{folded}' but" if folded.isascii() and folded != word else ""
        found.append(f"'{shown}'{reads} contains {letters}"[:300])
    return found[:8]


def _codes(chars: list[str]) -> str:
    return ", ".join(f"U+{ord(ch):04X}" for ch in chars)


def _warning(kind: str, message: str) -> dict[str, str]:
    return {"kind": kind, "message": message}
