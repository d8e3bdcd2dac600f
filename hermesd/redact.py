"""Secret redaction: values of secrets become ``[REDACTED]`` before text leaves the daemon.

A `Redactor` knows the secret *values* (the ``$HERMES_HOME/.env`` values that are secrets — see
`dotenv_secret` — and the value of any environment variable named ``*_KEY``, ``*_TOKEN``,
``*_SECRET`` or ``*PASSWORD*``) and the
common key *formats* (``sk-…``, ``ghp_…``, ``xoxb-…``, ``AKIA…``, private-key blocks,
``NAME_TOKEN=value`` assignments). The daemon applies the current one to tool results (the
registry's redactor), to ``session.event`` notifications and approval requests, and to log
records (`RedactingFilter`, installed by ``hermesd.daemon.logs``). `StreamRedactor` does the
same for text that arrives in pieces (a model's streamed deltas), catching a secret split
between two pieces. Standard library only.
"""

from __future__ import annotations

import json
import logging
import re
import string
from collections.abc import Iterable, Mapping
from typing import Any

_log = logging.getLogger(__name__)

REDACTED = "[REDACTED]"

_SECRET_NAME = re.compile(
    r"(?:_KEY|_TOKEN|_SECRET)$|PASSWORD|PASSWD|^(?:API_KEY|TOKEN|SECRET)$", re.IGNORECASE
)
_MIN_NAMED = 4  # a secret-named variable's value shorter than this is not worth hiding
# .env holds settings too (WEATHER_UNITS=metric): a value of one is hidden only when it is a
# secret, or it would hide "metric" inside "geometric". Key-shaped: one run of the characters
# keys are made of, long, with letters and digits, not a path or a URL (see is_key_shaped).
_KEY_SHAPED = re.compile(r"(?=[^/.])(?!.*://)(?=.*[0-9])(?=.*[A-Za-z])[A-Za-z0-9_\-+/=.~:]{16,}")
_KEY_MIN_DISTINCT = 8  # characters: "aaaaaaaaaaaaaaaa1" is not a key
_SEPARATORS = re.compile(r"[-_.:/~+=]")

# One alternation, so a result is scanned once (each extra pattern is another full pass); the
# lookbehind is a word boundary that does not defeat the engine's fast scanning like \b does.
_KEY_FORMATS = (
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----",
    r"sk-[A-Za-z0-9_-]{16,}",
    r"gh[pousr]_[A-Za-z0-9]{20,}",
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",
    r"(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"AIza[0-9A-Za-z_-]{35}\b",
    r"glpat-[A-Za-z0-9_-]{20,}",
    r"hf_[A-Za-z0-9]{30,}",
)
_FORMATS = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(_KEY_FORMATS) + ")", re.DOTALL)
# NAME=value / NAME: value where NAME looks like a secret; the name stays readable. Matching
# starts at the tell-tale suffix, not at every word character (much faster on long output).
_ASSIGNMENT = re.compile(
    r"((?:_KEY|_TOKEN|_SECRET|PASSWORD|PASSWD)[A-Za-z0-9_]*\s*[=:]\s*[\"']?)"
    r"([^\s\"'\\,;]{4,})",
    re.IGNORECASE,
)
_SHORTEST_PATTERN = 9  # the shortest text a pattern matches: "_KEY=abcd"
_BEARER = re.compile(r"(\bBearer\s+)([A-Za-z0-9._~+/-]{16,}=*)")


# Characters secrets of every known format are made of: text streamed in pieces is held back
# from the start of its last run of them (see StreamRedactor).
_TOKEN_CHARS = string.ascii_letters + string.digits + "_-+/=.~:"
_TOKEN_RUN = re.compile(r"[A-Za-z0-9_\-+/=.~:]+")
# The start of a secret that continues past a space: NAME = value, Bearer token.
_OPEN_ASSIGNMENT = re.compile(
    r"[A-Za-z0-9_]*(?:_KEY|_TOKEN|_SECRET|PASSWORD|PASSWD)[A-Za-z0-9_]*\s*(?:[=:]\s*[\"']?)?"
    r"[^\s\"'\\,;]*\Z",
    re.IGNORECASE,
)
_OPEN_HINT = re.compile(r"_KEY|_TOKEN|_SECRET|PASSWORD|PASSWD|Bearer", re.IGNORECASE)
_PEM_END = re.compile(r"-----END [A-Z ]*PRIVATE KEY-----")
_OPEN_BEARER = re.compile(r"\bBearer\s*[A-Za-z0-9._~+/-]*=*\Z")
_TAIL_SCAN = 256  # how far back those two are looked for
STREAM_HOLD_MAX = 64 * 1024  # text held back longer than this is let go (redacted as it is)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret."""
    return bool(_SECRET_NAME.search(name))


def is_key_shaped(value: str) -> bool:
    """Whether a value looks like a key or token: a known key format, or a long run of key
    characters mixing letters and digits that is not a path or a URL."""
    if _FORMATS.fullmatch(value):
        return True
    if not _KEY_SHAPED.fullmatch(value) or len(set(value)) < _KEY_MIN_DISTINCT:
        return False
    # random keys mix cases and digits, or are a quarter digits (hex, base32), or carry such
    # a part between separators (name-9f8e7d6c); words, dates and versions do not
    return _random_looking(value) or any(
        len(part) >= 8 and _random_looking(part) for part in _SEPARATORS.split(value)
    )


def _random_looking(text: str) -> bool:
    digits = sum(c.isdigit() for c in text)
    letters = sum(c.isalpha() for c in text)
    mixed_case = any(c.isupper() for c in text) and any(c.islower() for c in text)
    mostly_digits = digits >= 3 and digits * 4 >= len(text)
    return letters > 0 and ((mixed_case and digits > 0) or mostly_digits)


def dotenv_secret(name: str, value: str, secret_names: Iterable[str] = ()) -> bool:
    """Whether a ``.env`` value is a secret: its variable is marked ``secret`` in a plugin's
    ``requires_env`` (``secret_names``), its name says so, or the value is key-shaped."""
    if not value:
        return False
    if name in secret_names or is_secret_name(name):
        return len(value) >= _MIN_NAMED
    return is_key_shaped(value)


class Redactor:
    """Replaces known secret values and key-shaped strings by ``[REDACTED]``."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        spellings: set[str] = set()
        for value in values:
            spellings.add(value)
            spellings.add(json.dumps(value)[1:-1])  # as it appears inside a JSON result
        ordered = sorted((s for s in spellings if s), key=len, reverse=True)
        self.count = len({v for v in values if v})
        # values a stream can split where no other rule holds text back (they hold spaces &c)
        self.spaced = [v for v in ordered if _TOKEN_RUN.fullmatch(v) is None]
        self.longest = len(ordered[0]) if ordered else 0
        self._values = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        # Shorter text cannot hold a secret: most event fields (ids, types, short deltas) skip
        # the four regex passes.
        self._shortest = min([_SHORTEST_PATTERN, *map(len, ordered)])

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        dotenv: Mapping[str, str],
        secret_names: Iterable[str] = (),
    ) -> Redactor:
        """The secrets of ``.env`` (`dotenv_secret`; ``secret_names``: variables plugins mark
        ``secret``) and the values of secret-named environment variables."""
        marked = frozenset(secret_names)
        values = [v for k, v in dotenv.items() if dotenv_secret(k, v, marked)]
        values += [
            v
            for k, v in environ.items()
            if (is_secret_name(k) or k in marked) and len(v) >= _MIN_NAMED
        ]
        return cls(values)

    def __call__(self, text: str) -> str:
        """``text`` with every secret replaced."""
        if len(text) < self._shortest or type(text) is Redacted:
            return text
        if self._values is not None:
            text = self._values.sub(REDACTED, text)
        text = _FORMATS.sub(REDACTED, text)
        text = _ASSIGNMENT.sub(_keep_name, text)
        text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
        extra = _plugin_combined[0]
        return text if extra is None else extra.sub(REDACTED, text)

    def values_only(self, text: str) -> str:
        """``text`` with the known secret values replaced, and nothing else: what an approval
        prompt shows, where hiding secret-*shaped* text (``X_TOKEN=$(curl …)``) would hide
        what runs."""
        return self._values.sub(REDACTED, text) if self._values is not None else text

    def match_start_before(self, text: str, cut: int) -> int:
        """``cut``, or the start of the earliest secret in ``text`` that ``cut`` would split."""
        patterns = [
            p
            for p in (self._values, _FORMATS, _ASSIGNMENT, _BEARER, _plugin_combined[0])
            if p is not None
        ]
        while True:
            moved = cut
            scan_from = max(0, cut - max(_TAIL_SCAN, self.longest))
            for pattern in patterns:
                for match in pattern.finditer(text, scan_from):
                    if match.start() >= moved:
                        break
                    if match.end() > moved:
                        moved = match.start()
                        break
            if moved == cut:
                return cut
            cut = moved

    def redact_obj(self, obj: Any) -> Any:
        """Strings inside maps and lists redacted (a copy; other values unchanged)."""
        kind = type(obj)
        if kind is str or isinstance(obj, str):
            return self(obj)
        if kind is dict or isinstance(obj, dict):
            # most values of an event are short strings, numbers or None: no recursion for them
            return {
                k: (self(v) if type(v) is str else v if type(v) in _SCALARS else self.redact_obj(v))
                for k, v in obj.items()
            }
        if isinstance(obj, list):
            return [self.redact_obj(v) for v in obj]
        return obj

    def redact_event(self, event: dict[str, Any]) -> dict[str, Any]:
        """A session event (a copy) with every string redacted but its envelope's."""
        return {
            k: (
                v
                if k in _ENVELOPE or type(v) in _SCALARS
                else self(v)
                if type(v) is str
                else self.redact_obj(v)
            )
            for k, v in event.items()
        }


_SCALARS = frozenset({int, float, bool, type(None)})
# An event's envelope: its kind, and ids hermesd made (a session id is also checked against
# [A-Za-z0-9_-]{1,64} when a client picks it). Nothing a plugin, the model or the
# environment wrote: passed as they are, not through four regex passes each.
_ENVELOPE = frozenset({"type", "session_id", "turn_id"})


class StreamRedactor:
    """Redacts text that arrives in pieces, such as a model's streamed deltas, so that a secret
    split across two pieces is caught as well.

    ``feed`` returns what can be shown now, redacted; text that may still turn out to be part
    of a secret is held back until the next piece shows it is not: the piece's last word (the
    run of characters keys are made of), an unfinished ``NAME = value`` or ``Bearer`` token, an
    unfinished private-key block, the start of a known secret value that holds spaces. Prose
    therefore lags by at most a word. ``flush`` returns the rest at the end of the stream.
    """

    def __init__(self, redactor: Redactor | None = None) -> None:
        self._redactor = redactor if redactor is not None else _current[0]
        self._held = ""

    def feed(self, text: str) -> str:
        raw = self._held + text
        cut = self._safe_end(raw)
        self._held = raw[cut:]
        return self._redactor(raw[:cut]) if cut else ""

    def flush(self) -> str:
        raw, self._held = self._held, ""
        return self._redactor(raw) if raw else ""

    def _safe_end(self, raw: str) -> int:
        """Where the text that cannot be the start of an unfinished secret ends."""
        end = len(raw)
        cut = max(len(raw.rstrip(_TOKEN_CHARS)), end - STREAM_HOLD_MAX)
        tail_from = max(0, cut - _TAIL_SCAN)
        # a name and its value are short: look back that far, if a name is there at all
        if end - cut <= _TAIL_SCAN and _OPEN_HINT.search(raw, tail_from) is not None:
            for pattern in (_OPEN_ASSIGNMENT, _OPEN_BEARER):
                found = pattern.search(raw, tail_from)
                if found is not None:
                    cut = min(cut, found.start())
        begin = raw.rfind("-----BEGIN", max(0, end - STREAM_HOLD_MAX))
        if begin >= 0 and _PEM_END.search(raw, begin) is None:
            cut = min(cut, begin)
        for value in self._redactor.spaced:  # the longest start of the value at the end
            pos = raw.find(value[0], max(0, end - len(value) + 1))
            while pos >= 0:
                if value.startswith(raw[pos:]):
                    cut = min(cut, pos)
                    break
                pos = raw.find(value[0], pos + 1)
        if cut == end:  # nothing held back: no secret can continue past the end
            return cut
        return self._redactor.match_start_before(raw, cut)  # never split a whole secret


def _keep_name(match: re.Match[str]) -> str:
    return match.group(1) + (match.group(2) if match.group(2) == REDACTED else REDACTED)


#: Patterns plugins added (``ctx.register_redaction_patterns``) by source, and all of them as
#: one regex (None: none): they add to the built-in rules, never replace one.
_plugin_patterns: dict[str, list[str]] = {}
_plugin_combined: list[re.Pattern[str] | None] = [None]
_LITERAL_START = re.compile(r"(?:[A-Za-z0-9_\-=:/]|\\[^A-Za-z0-9]){2}")


def add_patterns(patterns: Iterable[Any], source: str) -> int:
    """Add secret-shaped regexes from ``source`` (a plugin) to every redactor; how many were
    taken. One that does not compile or does not start with two literal characters (it would
    match almost anything) is skipped with a warning."""
    if isinstance(patterns, str):
        patterns = [patterns]
    taken: list[str] = []
    for pattern in patterns:
        text = getattr(pattern, "pattern", pattern)
        if not isinstance(text, str) or _LITERAL_START.match(text) is None:
            _log.warning(
                "%s: redaction pattern %r skipped: it must start with two literal characters",
                source,
                text,
            )
            continue
        try:
            re.compile(text)
        except re.error as exc:
            _log.warning("%s: redaction pattern %r skipped: %s", source, text, exc)
            continue
        taken.append(text)
    if taken:
        _plugin_patterns[source] = [*_plugin_patterns.get(source, []), *taken]
        _recombine()
    return len(taken)


def drop_patterns(source: str) -> None:
    """Forget the patterns ``source`` added (its plugin was unloaded)."""
    if _plugin_patterns.pop(source, None) is not None:
        _recombine()


def _recombine() -> None:
    every = [p for patterns in _plugin_patterns.values() for p in patterns]
    _plugin_combined[0] = re.compile("|".join(f"(?:{p})" for p in every)) if every else None


_current: list[Redactor] = [Redactor()]
_marked_secret: list[frozenset[str]] = [frozenset()]


def configure(
    environ: Mapping[str, str],
    dotenv: Mapping[str, str],
    secret_names: Iterable[str] | None = None,
) -> Redactor:
    """Build the daemon-wide redactor (at start, on config reload and after plugins load) and
    return it. ``secret_names``: the variables plugins mark ``secret`` (None: those given last)."""
    if secret_names is not None:
        _marked_secret[0] = frozenset(secret_names)
    _current[0] = Redactor.from_env(environ, dotenv, _marked_secret[0])
    return _current[0]


def secret_count() -> int:
    """How many distinct secret values the daemon-wide redactor hides."""
    return _current[0].count


def redact(text: str) -> str:
    """``text`` through the daemon-wide redactor."""
    return _current[0](text)


class Redacted(str):
    """Text the redactor already went through (off the loop): it passes it as it is."""

    __slots__ = ()


#: Above this many characters a text is redacted on a worker thread: a regex pass over
#: megabytes holds the event loop for seconds.
OFF_LOOP_CHARS = 256 * 1024


async def redact_large(text: str) -> str:
    """``text`` redacted on a thread when it is large (marked `Redacted`, so an event carrying
    it is not scanned again on the loop); a short text is returned as it is."""
    if len(text) < OFF_LOOP_CHARS:
        return text
    import asyncio

    return Redacted(await asyncio.to_thread(redact, text))


def redact_values(text: str) -> str:
    """``text`` with the daemon-wide redactor's known secret values replaced (only those)."""
    return _current[0].values_only(text)


def redact_obj(obj: Any) -> Any:
    """``obj`` through the daemon-wide redactor."""
    return _current[0].redact_obj(obj)


def redact_event(event: dict[str, Any]) -> dict[str, Any]:
    """A session event through the daemon-wide redactor (`Redactor.redact_event`)."""
    return _current[0].redact_event(event)


VALUES_ONLY = "hermes_values_only"  # a log record's attribute: see RedactingFilter


class RedactingFilter(logging.Filter):
    """Redacts log records (message and traceback) before any handler writes them.

    A record carrying ``extra={VALUES_ONLY: True}`` has only known secret values replaced: the
    approval log line shows a command as the approver saw it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _DONE, False):  # a second handler (the log ring): already redacted
            return True
        try:
            message = record.getMessage()
        except Exception:  # msg % args failed: the handler would print both raw; show neither
            message = _unformatted(record)
        cleaned = redact_values(message) if getattr(record, VALUES_ONLY, False) else redact(message)
        # Always a plain str and no args: a handler formatting the record again must neither
        # call a non-str msg's __str__ a second time (it may say something else) nor fail.
        record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        setattr(record, _DONE, True)
        return True


_DONE = "hermes_redacted"


def _unformatted(record: logging.LogRecord) -> str:
    """A record whose ``msg % args`` raised: its template and arguments side by side, each
    made a str on its own (one that cannot be is named by its type), to be redacted next."""
    if not record.args:  # it was str(msg) that raised
        return _text(record.msg)
    args = record.args if isinstance(record.args, tuple) else (record.args,)
    shown = ", ".join(_text(arg) for arg in args)
    return f"{_text(record.msg)} [log arguments that did not format: {shown}]"


def _text(value: object) -> str:
    try:
        return value if isinstance(value, str) else repr(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
