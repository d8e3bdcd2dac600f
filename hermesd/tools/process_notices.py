"""What a background process tells its session by itself: ``notify_on_complete`` and
``watch_patterns`` (`hermesd.tools.processes` decides when; this module says what, and how
often).

A watch pattern is a plain substring looked for in each new line of output (escape sequences
removed, as the reference matches lines, not regular expressions). One process sends at most
one match notice every `WATCH_INTERVAL` seconds; matches inside that time are dropped and
counted, and after `STRIKE_LIMIT` such windows in a row its watch ends and it falls back to
one notice when it exits (the reference's rule). Across the daemon at most `GLOBAL_MAX`
match notices go out in `GLOBAL_WINDOW` seconds; past that, matches are dropped for
`GLOBAL_PAUSE` seconds and counted on their process. A notice names the process, its
command and what happened; the output inside it is the process's, marked untrusted
(`hermesd.untrusted`) and redacted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hermesd.redact import redact
from hermesd.untrusted import mark

WATCH_INTERVAL = 15.0  # seconds between two match notices of one process
STRIKE_LIMIT = 3  # windows in a row with dropped matches before the watch ends
GLOBAL_MAX = 15  # match notices in GLOBAL_WINDOW seconds across the daemon
GLOBAL_WINDOW = 10.0
GLOBAL_PAUSE = 30.0
MAX_PATTERNS = 16
MAX_PATTERN_CHARS = 500
MATCH_LINES = 20  # matched lines in one notice
MATCH_CHARS = 2000
TAIL_CHARS = 2000  # characters of output in a completion notice
_PENDING_CHARS = 4096  # an unfinished line kept to be matched whole

_ESCAPES = re.compile(
    r"\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]|\][\s\S]*?(?:\x07|\x1b\\)"
    r"|[PX^_][\s\S]*?\x1b\\|[\x20-\x2f]+[\x30-\x7e]|[\x30-\x7e])|[\x80-\x9f]"
)


def plain(text: str) -> str:
    """``text`` without terminal escape sequences (colours, cursor moves, titles)."""
    return _ESCAPES.sub("", text) if "\x1b" in text or re.search("[\x80-\x9f]", text) else text


def watch_patterns(value: object) -> list[str]:
    """The ``watch_patterns`` argument checked; raises ValueError with a sentence."""
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ValueError("'watch_patterns' must be a list of strings")
    patterns = [p for p in value if p]
    if len(patterns) != len(value):
        raise ValueError("'watch_patterns' must not contain an empty string")
    if len(patterns) > MAX_PATTERNS:
        raise ValueError(f"'watch_patterns' takes at most {MAX_PATTERNS} patterns")
    if any(len(p) > MAX_PATTERN_CHARS for p in patterns):
        raise ValueError(f"a watch pattern is at most {MAX_PATTERN_CHARS} characters")
    return patterns


@dataclass
class Match:
    """A match to tell the session about."""

    pattern: str
    lines: list[str]
    suppressed: int  # matches dropped since the last notice


@dataclass
class Watch:
    """One process's watch patterns and their rate limit."""

    patterns: list[str]
    hits: int = 0
    suppressed: int = 0
    disabled: bool = False
    _cooldown_until: float = 0.0
    _strike_window: bool = False  # a match was dropped in the current window
    _strikes: int = 0
    _pending: str = ""  # the unfinished last line
    _pending_matched: bool = False  # it was already matched (and told) unfinished

    def scan(self, chunk: str) -> list[tuple[str, str]]:
        """The (pattern, line) matches in a new piece of output, each line once."""
        text = self._pending + plain(chunk).replace("\r", "")
        *complete, self._pending = text.split("\n")
        found = []
        for i, line in enumerate(complete):
            if i == 0 and self._pending_matched:
                continue
            found += self._match(line)
        was_matched = self._pending_matched and not complete
        self._pending_matched = was_matched
        if self._pending and not was_matched and (hit := self._match(self._pending)):
            found += hit
            self._pending_matched = True
        self._pending = self._pending[-_PENDING_CHARS:]
        return found

    def _match(self, line: str) -> list[tuple[str, str]]:
        for pattern in self.patterns:
            if pattern in line:
                return [(pattern, line.rstrip())]
        return []

    def admit(self, found: list[tuple[str, str]], now: float) -> Match | None:
        """The notice these matches earn under the rate limit, or None (dropped, counted;
        `disabled` is set when this drop ends the watch)."""
        if now < self._cooldown_until:
            self.suppressed += len(found)
            if not self._strike_window:
                self._strike_window = True
                self._strikes += 1
                self.disabled = self._strikes >= STRIKE_LIMIT
            return None
        if self._cooldown_until and not self._strike_window:
            self._strikes = 0  # a quiet window: the count starts again
        self._strike_window = False
        self._cooldown_until = now + WATCH_INTERVAL
        self.hits += 1
        suppressed, self.suppressed = self.suppressed, 0
        return Match(found[0][0], [line for _, line in found[:MATCH_LINES]], suppressed)


@dataclass
class Breaker:
    """The daemon-wide bound on match notices."""

    _window_start: float = 0.0
    _count: int = 0
    _paused_until: float = 0.0
    dropped: int = field(default=0)

    def admit(self, now: float) -> bool:
        """Whether one more match notice may go out now."""
        if now < self._paused_until:
            self.dropped += 1
            return False
        if now - self._window_start >= GLOBAL_WINDOW:
            self._window_start, self._count = now, 0
        if self._count >= GLOBAL_MAX:
            self._paused_until = now + GLOBAL_PAUSE
            self.dropped += 1
            return False
        self._count += 1
        return True


def _output(process_id: str, text: str) -> str:
    return mark(redact(text), f"process:{process_id}")


def completion_notice(
    process_id: str,
    command: str,
    exit_code: int | None,
    reason: str | None,
    source: str | None,
    output: str,
) -> str:
    """The message a session gets when its ``notify_on_complete`` process ends."""
    if reason == "killed":
        how = f"was killed by {source or 'hermesd'}"
    elif exit_code == 0:
        how = "finished normally"
    else:
        how = "exited" if exit_code is not None else "ended"
    signal = " (SIGTERM)" if exit_code in (-15, 143) else ""
    text = plain(output).replace("\r\n", "\n")
    if len(text) > TAIL_CHARS:
        tail = text[-TAIL_CHARS:]
        tail = tail[tail.find("\n") + 1 :] if "\n" in tail else tail
        text = f"[output cut: its last {len(tail)} characters]\n{tail}"
    return (
        f"[Notice from background process {process_id}, not from the user: it {how}, "
        f"exit code {exit_code}{signal}.]\nCommand: {redact(command)}\n"
        f"Output:\n{_output(process_id, text)}"
    )


def match_notice(process_id: str, command: str, match: Match) -> str:
    """The message a session gets when a watch pattern matches."""
    lines = "\n".join(match.lines)
    if len(lines) > MATCH_CHARS:
        lines = lines[:MATCH_CHARS] + "\n[cut]"
    note = (
        f"\n({match.suppressed} earlier matches were dropped by the rate limit)"
        if match.suppressed
        else ""
    )
    return (
        f"[Notice from background process {process_id}, not from the user: its output "
        f'matched the watch pattern "{redact(match.pattern)}"; it is still running.]\n'
        f"Command: {redact(command)}\nMatching lines:\n{_output(process_id, lines)}{note}"
    )


def disabled_notice(process_id: str, command: str, suppressed: int) -> str:
    """The message a session gets when a process's watch ends for matching too often."""
    return (
        f"[Notice from background process {process_id}, not from the user: its watch "
        f"patterns matched too often ({STRIKE_LIMIT} windows of {int(WATCH_INTERVAL)} s in a "
        f"row had matches dropped, {suppressed} in all), so they are switched off. You will "
        f"get one notice when it exits instead.]\nCommand: {redact(command)}"
    )
