"""The approval prompt a person sees when hermesd asks (an ``approval.request``).

`ask` shows the reference's prompt and returns the answer map the daemon expects
(``{"choice": ..., "reason": ...}``); without a terminal it returns the default the user chose
on the command line (``--approve deny|once``, default deny). `request_handler` wraps it as a
``Client.on_request`` handler. Standard library only: this is on hermesctl's start-up path.
"""

from __future__ import annotations

import sys

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


def ask(
    params: dict[str, Any],
    interactive: bool,
    default: str = "deny",
    stdin: TextIO | None = None,
    out: TextIO | None = None,
) -> dict[str, Any]:
    """Ask a person about one approval request; ``{"choice": ..., "reason"?: ...}``.

    Not ``interactive``: ``default`` (``deny`` or ``once``) without asking. Interactive: the
    reference prompt; an empty or unknown answer denies, as does end of input.
    """
    if default not in ("deny", "once"):
        default = "deny"
    if not interactive:
        return (
            {"choice": default, "reason": "no terminal to ask at"}
            if default == "deny"
            else {"choice": default}
        )
    stdin = stdin or sys.stdin
    out = out or sys.stdout
    description = str(params.get("description") or params.get("pattern_key") or "")
    choices = params.get("choices") or ["once", "session", "always", "deny"]
    out.write(f"\n  ⚠️  DANGEROUS COMMAND: {description}\n")
    out.write(f"{_PAD}{params.get('command') or params.get('tool') or ''}\n\n")
    if "always" in choices:
        out.write(f"{_PAD}[o]nce  |  [s]ession  |  [a]lways  |  [d]eny\n\n")
        out.write(f"{_PAD}Choice [o/s/a/D]: ")
    else:
        out.write(f"{_PAD}[o]nce  |  [s]ession  |  [d]eny\n\n")
        out.write(f"{_PAD}Choice [o/s/D]: ")
    out.flush()
    line = stdin.readline()
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
