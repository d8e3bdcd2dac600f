"""Making one model request fit a small window, when compaction could not.

Owns `fit_request`: given what a turn would send (the system prompt, a summary, older turns,
the running turn) and a token budget, the request-only copy the model is sent instead, with
less kept, in this order until it fits: long tool results and messages of older turns
truncated, older turns left out oldest first (a turn whole, so a tool call always travels with
its result), the compaction summary truncated then left out, the running turn's long tool
results and messages truncated (the newest user message last), the system prompt truncated;
the running turn is cut only when that makes the request fit (a tool list bigger than the
window cannot be helped by it). Every truncated text says so, and by how much. Stored messages
are never changed: this is a view of one request. Estimates are
`hermesd.context.compressor.estimate_tokens`; when to call it is ``hermesd.context.host``'s
business.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from hermesd.context.compaction import SOURCES, TOOLS_TOO_BIG, WINDOW_TOO_SMALL
from hermesd.context.compressor import estimate_tokens, is_summary, message_tokens, request_budget
from hermesd.context.engines import SessionContext

log = logging.getLogger(__name__)

OLDER_CHARS = 600  # a long message of an older turn is cut to this
CURRENT_CHARS = 1_200  # ... one of the running turn (its results matter now)
LEAST_CHARS = 160  # no text is cut shorter than this
TRUNCATED = (
    "[… truncated by hermesd to fit the model's {window:,}-token window: {cut:,} of {total:,} "
    "characters left out …]"
)


@dataclass
class Fitted:
    """What `fit_request` did: the messages to send and what it left out or cut."""

    messages: list[dict[str, Any]]
    tokens: int  # the estimate of the request (messages and tools)
    dropped: int = 0  # older messages left out
    truncated: int = 0  # messages whose text was cut
    fits: bool = True  # False: even the least it can send is over the budget
    tool_tokens: int = 0  # the estimate of the tool list alone

    @property
    def changed(self) -> bool:
        """Whether the request differs from what the turn would have sent."""
        return bool(self.dropped or self.truncated)

    def facts(self) -> dict[str, Any]:
        """The figures of a ``context.warning`` about it."""
        return {
            "kind": "window_too_small",
            "request_tokens": self.tokens,
            "dropped": self.dropped,
            "truncated": self.truncated,
            "fits": self.fits,
        }


def truncate_text(text: str, keep: int, window: int) -> str:
    """``text`` cut to about ``keep`` characters (its start and its end), marked as cut."""
    keep = max(keep, LEAST_CHARS)
    if len(text) <= keep:
        return text
    head, tail = keep * 2 // 3, keep // 3
    marker = TRUNCATED.format(window=window, cut=len(text) - head - tail, total=len(text))
    return f"{text[:head]}\n{marker}\n{text[len(text) - tail :]}"


def _cut(msg: dict[str, Any], keep: int, window: int) -> dict[str, Any] | None:
    """A copy of ``msg`` with its text cut to ``keep`` characters; None when it is short."""
    content = msg.get("content")
    if not isinstance(content, str) or len(content) <= max(keep, LEAST_CHARS):
        return None
    return {**msg, "content": truncate_text(content, keep, window)}


def _turns(messages: list[dict[str, Any]]) -> list[list[int]]:
    """Indexes of ``messages`` grouped by turn: a user message and what followed it."""
    groups: list[list[int]] = []
    for i, msg in enumerate(messages):
        if msg.get("role") == "user" or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


class _Fitter:
    """One fitting: the kept messages by index, their running estimate, the budget."""

    def __init__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, budget: int
    ) -> None:
        self.kept: dict[int, dict[str, Any]] = dict(enumerate(messages))
        self.fixed = estimate_tokens([], tools) if tools else 0
        self.tokens = self.fixed + estimate_tokens(messages)
        self.budget = budget
        self.dropped = 0
        self.truncated: set[int] = set()

    def snapshot(self) -> tuple[dict[int, dict[str, Any]], int, int, set[int]]:
        return dict(self.kept), self.tokens, self.dropped, set(self.truncated)

    def restore(self, state: tuple[dict[int, dict[str, Any]], int, int, set[int]]) -> None:
        self.kept, self.tokens, self.dropped, self.truncated = state

    def fits(self) -> bool:
        return self.tokens <= self.budget

    def drop(self, indexes: list[int]) -> None:
        for i in indexes:
            msg = self.kept.pop(i, None)
            if msg is not None:
                self.tokens -= message_tokens(msg)
                self.dropped += 1
                self.truncated.discard(i)

    def cut(self, i: int, keep: int, window: int) -> None:
        msg = self.kept.get(i)
        shorter = _cut(msg, keep, window) if msg is not None else None
        if msg is None or shorter is None:
            return
        self.tokens += message_tokens(shorter) - message_tokens(msg)
        self.kept[i] = shorter
        self.truncated.add(i)


def fit_request(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, window: int
) -> Fitted:
    """The request-only messages that fit ``window`` (see the module docstring); the messages
    as they are when they already fit."""
    f = _Fitter(messages, tools, request_budget(window))
    if f.fits():
        return Fitted(list(messages), f.tokens, tool_tokens=f.fixed)
    first = 1 if messages and messages[0].get("role") == "system" else 0
    system = list(range(first))
    last_user = max(
        (i for i, m in enumerate(messages) if m.get("role") == "user" and not is_summary(m)),
        default=len(messages),
    )
    summaries = [i for i in range(first, last_user) if is_summary(messages[i])]
    older = [
        [i + first for i in g]
        for g in _turns(messages[first:last_user])
        if not any(i + first in summaries for i in g)
    ]
    current = list(range(last_user, len(messages)))
    tool_results = [i for g in older for i in g if messages[i].get("role") == "tool"]
    for i in [*tool_results, *(i for g in older for i in g)]:
        if f.fits():
            break
        f.cut(i, OLDER_CHARS, window)
    for group in older:  # fewer turns kept, the oldest left out first
        if f.fits():
            break
        f.drop(group)
    for i in summaries:
        if not f.fits():
            f.cut(i, CURRENT_CHARS, window)
    if not f.fits():
        f.drop(summaries)
    before = f.snapshot()
    for keep in (CURRENT_CHARS, LEAST_CHARS):
        for i in [*current[1:], *current[:1], *system]:  # the user's words last, then system
            if f.fits():
                break
            f.cut(i, max(keep, CURRENT_CHARS) if i in system else keep, window)
    for i in system:
        if not f.fits():
            f.cut(i, LEAST_CHARS * 4, window)
    if not f.fits():  # too big whatever is cut (the tool list): the running turn goes whole
        f.restore(before)
    sent = [f.kept[i] for i in sorted(f.kept)]
    return Fitted(
        sent,
        f.tokens,
        dropped=f.dropped,
        truncated=len(f.truncated),
        fits=f.fits(),
        tool_tokens=f.fixed,
    )


def shorten(
    ctx: SessionContext, sent: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> Fitted | None:
    """`fit_request` for a session's window (logged); None when the request fits as it is.
    One that cannot fit is returned too (the person is told)."""
    if ctx.context_length <= 0:
        return None
    fitted = fit_request(sent, tools, ctx.context_length)
    if fitted.fits and not fitted.changed:
        return None
    log.info(
        "session %s: request shortened to fit the %d-token window (%d older messages left "
        "out, %d truncated; about %d tokens%s)",
        ctx.session_id,
        ctx.context_length,
        fitted.dropped,
        fitted.truncated,
        fitted.tokens,
        "" if fitted.fits else ", still over",
    )
    return fitted


def too_small(ctx: SessionContext, fitted: Fitted) -> str:
    """What the person is told the first time a session's requests had to be shortened."""
    message = WINDOW_TOO_SMALL.format(
        window=ctx.context_length, source=SOURCES.get(ctx.length_source, ctx.length_source)
    )
    if not fitted.fits:
        message += TOOLS_TOO_BIG.format(tools=fitted.tool_tokens)
    return message
