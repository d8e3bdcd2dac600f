"""The built-in context engine (``context.engine: compressor``): the middle of a conversation
summarised into one message.

A ``ContextEngine`` like any plugin's: the first
``protect_first_n`` messages and a recent tail (a token budget, ``threshold × target_ratio``,
never fewer than a few messages and always the newest user message) stay as they are; what lies
between becomes one message starting with `SUMMARY_PREFIX`, written by the summary model
(``summarize``, given by the host). Tool calls are never separated from their results: a cut
moves off a tool result; when that head and tail alone would fill half the threshold (a small
window), only the newest user message onwards is kept, and the summary request itself is cut to
the window. When the summary cannot be had, the window is described by a deterministic summary
(the user's asks, tool calls, paths, errors) unless ``abort_on_summary_failure`` says to fail
closed with `SummaryFailed`; either way
``last_summary_error`` tells the host to warn. It touches no storage: the host keeps what it
returns as a view (hermesd.store.compactions).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hermesd.context.engine import ContextEngine
from hermesd.context.summary import LEGACY_SUMMARY_PREFIX, SUMMARY_PREFIX

__all__ = ["LEGACY_SUMMARY_PREFIX", "SUMMARY_PREFIX", "BuiltinCompressor", "CompressionSettings"]


SMALL_WINDOW = 512_000  # under it, the threshold is at least SMALL_WINDOW_THRESHOLD
SMALL_WINDOW_THRESHOLD = 0.75
MINIMUM_THRESHOLD_TOKENS = 64_000  # a threshold is never set lower, unless the window is
MINIMUM_WINDOW_TRIGGER = 0.85  # ... that small: then this share of it
IMAGE_TOKENS = 1_500
OUTPUT_SHARE = 0.10  # of a window kept free for the answer
OUTPUT_MOST = 8_192  # ... but never more than this
MIN_TAIL = 3
KEPT_SHARE = 0.5  # a head and tail over this share of the threshold are protected less
SERIALIZED_CHARS = 2_000  # of one message, in what the summary model reads
_PATH = re.compile(r"(?:~|\.{0,2})/[\w.@+-]+(?:/[\w.@+-]+)+")

SUMMARY_SYSTEM = "You write faithful, compact conversation summaries."

Summarize = Callable[[list[dict[str, Any]], int], str]


class SummaryFailed(Exception):
    """The summary could not be written and ``abort_on_summary_failure`` is set."""


def estimate_tokens(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> int:
    """A rough count: characters / 4 (rounded up) per message, 1,500 per image, plus the tool
    schemas' JSON."""
    total = 0
    for msg in messages:
        total += message_tokens(msg)
    if tools:
        total += (len(json.dumps(tools)) + 3) // 4
    return total


def message_tokens(msg: dict[str, Any]) -> int:
    """The rough count of one message (`estimate_tokens`)."""
    chars, images = 0, 0
    content = msg.get("content")
    if isinstance(content, str):
        chars += len(content)
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") in ("image_url", "input_image", "image"):
                images += 1
            else:
                chars += len(str(part.get("text") or ""))
    calls = msg.get("tool_calls")
    if calls:
        chars += len(json.dumps(calls))
    return (chars + 3) // 4 + images * IMAGE_TOKENS


@dataclass
class CompressionSettings:
    """``compression.*``."""

    enabled: bool = True
    threshold: float = 0.50
    target_ratio: float = 0.20
    protect_first_n: int = 3
    protect_last_n: int = 20
    abort_on_summary_failure: bool = False

    @classmethod
    def from_config(cls, config: Any) -> CompressionSettings:
        """Read the ``compression`` section (a `Config` or anything with ``get``)."""
        return cls(
            enabled=bool(config.get("compression.enabled", True)),
            threshold=float(config.get("compression.threshold", 0.50)),
            target_ratio=max(0.10, min(float(config.get("compression.target_ratio", 0.20)), 0.80)),
            protect_first_n=max(0, int(config.get("compression.protect_first_n", 3))),
            protect_last_n=max(1, int(config.get("compression.protect_last_n", 20))),
            abort_on_summary_failure=bool(
                config.get("compression.abort_on_summary_failure", False)
            ),
        )


def threshold_tokens(context_length: int, percent: float) -> tuple[float, int]:
    """The effective threshold share and token count for a window (the reference's rule)."""
    if context_length and context_length < SMALL_WINDOW:
        percent = max(percent, SMALL_WINDOW_THRESHOLD)
    floored = max(int(context_length * percent), MINIMUM_THRESHOLD_TOKENS)
    if context_length > 0 and floored >= context_length:
        return percent, max(
            1, min(int(context_length * MINIMUM_WINDOW_TRIGGER), context_length - 1)
        )
    return percent, floored


def summary_role(head: list[dict[str, Any]], tail: list[dict[str, Any]]) -> str:
    """The summary's role: unlike the head's last message, then unlike the tail's first when
    that does not clash with the head (chat templates that want roles to alternate). After a
    system prompt or nothing, that is the assistant's unless the tail starts with it."""
    last = head[-1].get("role") if head else "system"
    first = tail[0].get("role") if tail else None
    role = "user" if last in ("assistant", "tool") else "assistant"
    other = "assistant" if role == "user" else "user"
    return other if role == first and other != last else role


def is_summary(msg: dict[str, Any]) -> bool:
    """Whether a message is a compaction summary (this prefix or the older one)."""
    text = msg.get("content")
    return isinstance(text, str) and text.startswith((SUMMARY_PREFIX, LEGACY_SUMMARY_PREFIX))


class BuiltinCompressor(ContextEngine):
    """Summarises the middle of the conversation; one instance per session."""

    def __init__(
        self,
        settings: CompressionSettings,
        summarize: Summarize | None = None,
        *,
        summary_window: bool = True,
    ) -> None:
        self.settings = settings
        self.summarize = summarize
        self.summary_window = summary_window  # the summary model is this model: same window
        self.threshold_percent = settings.threshold
        self.protect_first_n = settings.protect_first_n
        self.protect_last_n = settings.protect_last_n
        self.tail_budget = 0
        self.ineffective = 0  # compressions in a row that saved under 10%
        self.last_summary = ""
        self.last_summary_error: str | None = None  # the host warns when set
        self.last_replaced = 0

    @property
    def name(self) -> str:
        return "compressor"

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        self.context_length = context_length
        self.threshold_percent, self.threshold_tokens = threshold_tokens(
            context_length, self.settings.threshold
        )
        self.tail_budget = int(self.threshold_tokens * self.settings.target_ratio)

    def update_from_response(self, usage: dict[str, Any]) -> None:
        self.last_prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self.last_completion_tokens = int(usage.get("completion_tokens") or 0)
        self.last_total_tokens = int(usage.get("total_tokens") or 0)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        if not self.settings.enabled:
            return False
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return tokens >= self.threshold_tokens > 0 and self.ineffective < 2

    def has_content_to_compress(self, messages: list[dict[str, Any]]) -> bool:
        start, end = self._cuts(messages)
        return any(not is_summary(m) for m in messages[start:end])

    # -- where to cut ---------------------------------------------------------------------

    def _cuts(self, messages: list[dict[str, Any]]) -> tuple[int, int]:
        """Where the summarised middle starts and ends. When the protected head and tail alone
        would fill over `KEPT_SHARE` of the threshold (a small window, long messages), a
        summary could not bring the session under it: then only the system prompt and the
        newest user message onwards are protected."""
        start = self._head_end(messages, self.protect_first_n)
        end = self._tail_start(messages, start, MIN_TAIL)
        kept = estimate_tokens(messages[:start]) + estimate_tokens(messages[end:])
        if self.threshold_tokens > 0 and kept > self.threshold_tokens * KEPT_SHARE:
            start = self._head_end(messages, 0)
            end = self._tail_start(messages, start, 1)
        return start, end

    def _head_end(self, messages: list[dict[str, Any]], protect: int) -> int:
        end, kept = 0, 0
        while end < len(messages) and messages[end].get("role") == "system":
            end += 1  # a system prompt is never summarised
        while end < len(messages) and kept < protect:
            if messages[end].get("role") != "system":
                kept += 1
            end += 1
        while end < len(messages) and messages[end].get("role") == "tool":
            end += 1  # the results of a call in the head stay with it
        return end

    def _tail_start(self, messages: list[dict[str, Any]], head_end: int, least: int) -> int:
        n = len(messages)
        available = n - head_end
        if available <= least + 1:
            return head_end  # a few messages after the head: all of them are the tail
        floor = min(max(least, min(self.protect_last_n, available - 2)), available)
        if least < MIN_TAIL:
            floor = least  # the small-window rule: the newest user message is enough
        ceiling = int(self.tail_budget * 1.5)
        used, cut = 0, n
        for i in range(n - 1, head_end - 1, -1):
            tokens = message_tokens(messages[i])
            if used + tokens > ceiling and n - i > floor:
                break
            used += tokens
            cut = i
        if cut <= head_end:
            cut = max(head_end + 1, n - floor)
        while cut > head_end and messages[cut].get("role") == "tool":
            cut -= 1  # never start the tail with results whose call was summarised
        last_user = max(
            (i for i in range(head_end, n) if messages[i].get("role") == "user"), default=None
        )
        if last_user is not None:
            cut = min(cut, last_user)
        return max(cut, head_end)

    # -- compress ---------------------------------------------------------------------------

    def compress(
        self,
        messages: list[dict[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[dict[str, Any]]:
        self.last_summary_error, self.last_replaced = None, 0
        start, end = self._cuts(messages)
        if end - start < 1:
            self.ineffective += 1
            return messages
        if all(is_summary(m) for m in messages[start:end]):
            return messages  # a summary alone: summarising it again says nothing new
        window = messages[start:end]
        try:
            if self.summarize is None:
                raise RuntimeError("no summary model")
            answer = max(256, min(4_000, self.tail_budget // 2 or 1_000))
            request = self._summary_request(window, focus_topic, memory_context, answer)
            body = self.summarize(request, answer).strip()
            if not body:
                raise RuntimeError("the summary model answered with no text")
        except Exception as exc:
            if self.settings.abort_on_summary_failure:
                self.last_summary_error = f"{type(exc).__name__}: {exc}"
                raise SummaryFailed(str(exc)) from exc
            self.last_summary_error = f"{type(exc).__name__}: {exc}"
            body = deterministic_summary(window)
        text = f"{SUMMARY_PREFIX}\n\n{body}"
        head, tail = messages[:start], messages[end:]
        compressed = [*head, {"role": summary_role(head, tail), "content": text}, *tail]
        before = current_tokens or estimate_tokens(messages)
        after = estimate_tokens(compressed)
        self.ineffective = self.ineffective + 1 if before and after > before * 0.9 else 0
        self.compression_count += 1
        self.last_prompt_tokens = -1  # awaiting the next response's real count
        self.last_summary, self.last_replaced = body, len(window)
        return compressed

    def _summary_request(
        self, window: list[dict[str, Any]], focus: str | None, memory_context: str, answer: int
    ) -> list[dict[str, Any]]:
        """The summary model's request; in a small window (the same model's, unless another is
        configured) cut to fit with room for an ``answer``: shorter lines, then the oldest
        lines left out, said so."""
        room = 0
        if self.summary_window and self.context_length:
            room = request_budget(self.context_length) - answer
        previous = [str(m.get("content")) for m in window if is_summary(m)]
        ask = (
            "Summarise the conversation excerpt below so that an assistant can continue the "
            "work without it. Keep: what the user asked for and decided, facts learned, files "
            "and paths touched, commands run and their outcomes, errors, and what is still "
            "open. Use short sections with these headings: '## Historical Task Snapshot', "
            "'## Historical In-Progress State', '## Historical Pending User Asks', "
            "'## Historical Remaining Work'. Write only the summary."
        )
        if focus:
            ask += f" Give most room to anything about: {focus}."
        head = [ask]
        if memory_context:
            head.append("Context from the memory provider, to keep:\n" + memory_context)

        def build(chars: int, lines: list[str], left_out: int) -> list[dict[str, Any]]:
            parts = list(head)
            if previous:
                parts.insert(1, "An earlier summary to fold in:\n" + previous[-1][: chars * 2])
            if left_out:
                lines = [f"[{left_out} older messages left out to fit the window]", *lines]
            parts.append("The excerpt:\n" + "\n".join(lines))
            return [
                {"role": "system", "content": SUMMARY_SYSTEM},
                {"role": "user", "content": "\n\n".join(parts)},
            ]

        def fits(request: list[dict[str, Any]]) -> bool:
            return room <= 0 or estimate_tokens(request) <= room

        for chars in (SERIALIZED_CHARS, SERIALIZED_CHARS // 4, SERIALIZED_CHARS // 10):
            lines = [serialize(m, chars) for m in window if not is_summary(m)]
            request = build(chars, lines, 0)
            if fits(request):
                return request
        left_out = 0  # the shortest lines are still too many: the oldest go
        while len(lines) > 1 and not fits(request):
            lines, left_out = lines[1:], left_out + 1
            request = build(chars, lines, left_out)
        return request


def request_budget(window: int) -> int:
    """How many prompt tokens a request may hold in a ``window``: the answer keeps a share."""
    return max(1, window - min(int(window * OUTPUT_SHARE), OUTPUT_MOST))


def serialize(msg: dict[str, Any], chars: int = SERIALIZED_CHARS) -> str:
    """One message as a line of the summary model's input, its text cut at ``chars``."""
    role = msg.get("role")
    text = _text_of(msg.get("content"))
    if role == "tool":
        return f"[tool result {msg.get('tool_call_id')}] {text[:chars]}"
    out = f"[{role}] {text[:chars]}"
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") or {}
        out += f"\n[{role} calls {fn.get('name')}] {str(fn.get('arguments'))[:500]}"
    return out


def _text_of(content: Any) -> str:
    """A message's text for the summary model; an image part is a marker, never its bytes."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return json.dumps(content) if content else ""
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            parts.append(str(part.get("text") or ""))
        elif isinstance(part, dict) and part.get("type") in ("image_url", "input_image", "image"):
            parts.append("[an image]")
    return "\n".join(parts)


def deterministic_summary(window: list[dict[str, Any]]) -> str:
    """What a window held, without a model: the user's asks, tool calls, paths, errors."""
    asks, calls, paths, errors = [], [], [], []
    for msg in window:
        text = _text_of(msg.get("content"))
        role = msg.get("role")
        if role == "user" and not is_summary(msg):
            asks.append(" ".join(text.split())[:300])
        for call in msg.get("tool_calls") or ():
            fn = call.get("function") or {}
            calls.append(f"{fn.get('name')}({str(fn.get('arguments') or '')[:160]})")
        paths.extend(_PATH.findall(text))
        for call in msg.get("tool_calls") or ():
            paths.extend(_PATH.findall(str((call.get("function") or {}).get("arguments"))))
        if role == "tool" and ('"error"' in text[:200] or text.lower().startswith("error")):
            errors.append(" ".join(text.split())[:300])
    sections = [
        "(The summary model could not be reached: this is a mechanical record of the "
        f"{len(window)} messages it replaces.)"
    ]
    for title, items in (
        ("## Historical Pending User Asks", asks),
        ("## Tool calls", calls),
        ("## Paths", list(dict.fromkeys(paths))),
        ("## Errors", errors),
    ):
        if items:
            sections.append(title + "\n" + "\n".join(f"- {i}" for i in items[-40:]))
    return "\n\n".join(sections)
