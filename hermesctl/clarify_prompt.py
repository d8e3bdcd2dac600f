"""The question prompt a person sees when the model asks one (a ``clarify.request``).

`ask` shows the question with its choices numbered, plus one more number for an answer of
one's own, and returns the reply the daemon expects: ``{"choice": n}`` (1-based) or
``{"response": text}``. An open question (no choices) takes a line of text. Without a terminal
it replies ``{"unattended": true}`` at once, and the daemon tells the model to decide for
itself. ``read_answer`` may instead return the question's ``clarify.resolved`` params (someone
answered elsewhere): the prompt then closes saying so. Standard library only.
"""

from __future__ import annotations

import sys

from hermesctl.approval_prompt import visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TextIO

_PAD = "      "
_HOW = {
    "answered": "answered elsewhere",
    "unattended": "no one could answer: the model decides",
    "timeout": "timed out: the model decides",
    "stopped": "hermesd stopped: the model decides",
    "cancelled": "the turn was stopped",
}


def question_lines(params: dict[str, Any]) -> list[str]:
    """The question and its numbered choices, as drawn (control characters shown escaped)."""
    lines = [f"\n  ❓ {visible(params.get('question') or '')}"]
    choices = [str(c) for c in params.get("choices") or []]
    for n, choice in enumerate(choices, 1):
        lines.append(f"{_PAD}{n}. {visible(choice)}")
    if choices:
        lines.append(f"{_PAD}{len(choices) + 1}. Other (type your answer)")
    return lines


def _closed(resolved: dict[str, Any]) -> str:
    how = str(resolved.get("how") or "answered")
    uid = resolved.get("by_uid")
    by = f" (uid {uid})" if how == "answered" and uid is not None else ""
    return f"{_PAD}⊘ Question {_HOW.get(how, how)}{by}"


def ask(
    params: dict[str, Any],
    interactive: bool,
    stdin: TextIO | None = None,
    out: TextIO | None = None,
    read_answer: Callable[[], str | dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Ask a person the model's question; the reply for the daemon."""
    if not interactive:
        return {"unattended": True}
    stdin = stdin or sys.stdin
    out = out or sys.stdout
    choices = [str(c) for c in params.get("choices") or []]
    out.write("\n".join(question_lines(params)) + "\n\n")
    hint = f"1-{len(choices) + 1}, or type an answer" if choices else "type your answer"
    own = False  # "Other" was picked: the next line is the answer
    while True:
        out.write(f"{_PAD}{'Your answer' if own or not choices else 'Choice'} [{hint}]: ")
        out.flush()
        line = read_answer() if read_answer is not None else stdin.readline()
        if isinstance(line, dict):
            out.write(f"\n{_closed(line)}\n")
            out.flush()
            return {"resolved_elsewhere": True}
        if not line:  # end of input: no one here to answer
            out.write(f"\n{_PAD}⊘ No answer given\n")
            out.flush()
            return {"unattended": True}
        text = line.strip()
        if not text:
            continue
        if choices and not own and text.isdigit():
            number = int(text)
            if 1 <= number <= len(choices):
                out.write(f"{_PAD}✓ {visible(choices[number - 1])}\n")
                out.flush()
                return {"choice": number}
            if number == len(choices) + 1:
                own, hint = True, "type your answer"
                continue
        out.write(f"{_PAD}✓ {visible(text)}\n")
        out.flush()
        return {"response": text}
