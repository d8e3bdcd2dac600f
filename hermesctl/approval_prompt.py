"""The approval prompt a person sees when hermesd asks (an ``approval.request``).

`ask` shows the reference's prompt and returns the answer map the daemon expects
(``{"choice": ..., "reason": ...}``); without a terminal it returns the default the user chose
on the command line (``--approve deny|once``, default deny). `request_handler` wraps it as a
``Client.on_request`` handler. `command_lines` is how a command is drawn here and in
``hermesctl approvals pending``: the daemon sends it with control characters already escaped
and only known secret values hidden, plus its length, notes and warnings (look-alike letters,
bidi and invisible characters, collapsed padding); this side escapes again whatever a terminal
would act on (an older or foreign daemon), frames a multi-line command so no line of it can
pass for the prompt, and prints the warnings and notes. Standard library only: this is
on hermesctl's start-up path.
"""

from __future__ import annotations

import sys
import unicodedata

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TextIO

_ANSWERS = {
    "o": "once",
    "once": "once",
    "s": "session",
    "session": "session",
    "a": "always",
    "always": "always",
    "d": "deny",
    "deny": "deny",
}
_FEEDBACK = {
    "once": "✓ Allowed once",
    "session": "✓ Allowed for this session",
    "always": "✓ Added to permanent allowlist",
    "deny": "✗ Denied",
}
_PAD = "      "
_GUTTER = "│ "


def visible(text: str) -> str:
    """``text`` with every character a terminal would act on or not draw shown as ``\\uXXXX``
    (newlines kept)."""
    return "".join(ch if ch == "\n" or not _hidden(ch) else f"\\u{ord(ch):04x}" for ch in str(text))


def _hidden(ch: str) -> bool:
    code = ord(ch)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return True
    return code > 0x7F and unicodedata.category(ch) in ("Cf", "Zl", "Zp", "Co", "Cn", "Cs")


def command_lines(params: dict[str, Any], pad: str = _PAD) -> list[str]:
    """The lines that show a request's command: the command (framed when it spans lines),
    its length, the daemon's warnings (look-alikes, bidi, invisible, padding) and its notes
    (secrets hidden, characters escaped)."""
    command = visible(params.get("command") or params.get("tool") or "")
    parts = command.split("\n")
    lines = [f"{pad}{_GUTTER if len(parts) > 1 else ''}{part}" for part in parts]
    length = params.get("command_length")
    if isinstance(length, int):
        extra = f", {len(parts)} lines" if len(parts) > 1 else ""
        lines.append(f"{pad}({length} characters{extra})")
    for warning in params.get("warnings") or []:
        if isinstance(warning, dict):
            kind = str(warning.get("kind") or "warning").upper()
            lines.append(f"{pad}⚠️  {visible(kind)}: {visible(warning.get('message') or '')}")
    for note in params.get("notes") or []:
        lines.append(f"{pad}⚠️  {visible(note)}")
    return lines


_DECIDED = {
    "once": "✓ Allowed once",
    "session": "✓ Allowed for this session",
    "always": "✓ Added to permanent allowlist",
    "deny": "✗ Denied",
    "timeout": "✗ Timed out (denied)",
    "cancelled": "⊘ The tool call was cancelled",
    "stopped": "✗ hermesd stopped (denied)",
}


def decided_elsewhere(resolved: dict[str, Any]) -> str:
    """How an ``approval.resolved`` reads: what was decided, and by whom."""
    choice = str(resolved.get("choice") or "?")
    what = _DECIDED.get(choice, choice)
    uid = resolved.get("by_uid")
    if uid is None:
        return f"{what}, without an answer"
    who = resolved.get("by") or _user_name(uid)
    return f"{what} by {who} (uid {uid}), answered elsewhere"


def _user_name(uid: Any) -> str:
    try:
        import pwd

        return pwd.getpwuid(int(uid)).pw_name
    except (ImportError, KeyError, TypeError, ValueError):
        return "uid " + str(uid)


def ask(
    params: dict[str, Any],
    interactive: bool,
    default: str = "deny",
    stdin: TextIO | None = None,
    out: TextIO | None = None,
    read_answer: Callable[[], str | dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Ask a person about one approval request; ``{"choice": ..., "reason"?: ...}``.

    Not ``interactive``: ``default`` (``deny`` or ``once``) without asking. Interactive: the
    reference prompt; an empty or unknown answer denies, as does end of input.
    ``read_answer`` (default: a line of ``stdin``) may instead return the ``approval.resolved``
    params of this request: the prompt then closes saying what was decided and by whom.
    """
    if default not in ("deny", "once"):
        default = "deny"
    if not interactive:
        if default == "deny":  # the daemon tells the model no one was asked, not "by user"
            return {"choice": "deny", "reason": "no terminal to ask at", "unattended": True}
        return {"choice": default}
    stdin = stdin or sys.stdin
    out = out or sys.stdout
    description = visible(params.get("description") or params.get("pattern_key") or "")
    choices = params.get("choices") or ["once", "session", "always", "deny"]
    out.write(f"\n  ⚠️  DANGEROUS COMMAND: {description}\n")
    out.write("\n".join(command_lines(params)) + "\n\n")
    if "always" in choices:
        out.write(f"{_PAD}[o]nce  |  [s]ession  |  [a]lways  |  [d]eny\n\n")
        out.write(f"{_PAD}Choice [o/s/a/D]: ")
    else:
        out.write(f"{_PAD}[o]nce  |  [s]ession  |  [d]eny\n\n")
        out.write(f"{_PAD}Choice [o/s/D]: ")
    out.flush()
    line = read_answer() if read_answer is not None else stdin.readline()
    if isinstance(line, dict):
        out.write(f"\n{_PAD}{decided_elsewhere(line)}\n")
        out.flush()
        return {"choice": line.get("choice") or "deny", "resolved_elsewhere": True}
    if not line:
        out.write(f"\n{_PAD}✗ Cancelled\n")
        out.flush()
        return {"choice": "deny", "reason": "cancelled at the prompt"}
    choice = _ANSWERS.get(line.strip().lower(), "deny")
    if choice not in choices:
        choice = "deny"
    out.write(f"{_PAD}{_FEEDBACK[choice]}\n")
    out.flush()
    return {"choice": choice}


def request_handler(interactive: bool, default: str = "deny") -> Callable[[str, list[Any]], Any]:
    """A ``Client.on_request`` that answers ``approval.request`` with `ask`."""

    def handle(method: str, params: list[Any]) -> Any:
        if method != "approval.request":
            from hermesd.rpc.protocol import Codes, RpcError

            raise RpcError(Codes.METHOD_NOT_FOUND, f"hermesctl does not handle '{method}'")
        request = params[0] if params and isinstance(params[0], dict) else {}
        try:
            return ask(request, interactive, default)
        except (KeyboardInterrupt, EOFError):
            return {"choice": "deny", "reason": "interrupted at the approval prompt"}

    return handle
