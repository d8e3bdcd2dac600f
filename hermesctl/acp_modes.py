"""ACP session modes as hermesd's approval modes (``approvals.mode``, `hermesd.approvals.modes`).

An editor shows a session's modes as a picker and switches with ``session/set_mode``; each
mode is one of the daemon's per-session approval modes: ``manual`` (ask before a dangerous
command), ``deny`` (refuse it without asking: for work nobody watches) and ``off`` (run it
without asking). The daemon decides: ``off`` widens what tools may do, so it needs a person
confirming on a terminal, which an editor-started bridge has not; the daemon's refusal is the
editor's error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import acp
from acp import schema

MODES = [
    schema.SessionMode(
        id="manual", name="Ask", description="Ask before dangerous commands (approvals)."
    ),
    schema.SessionMode(
        id="deny", name="Refuse", description="Refuse what needs approval; never ask."
    ),
    schema.SessionMode(
        id="off",
        name="Don't ask",
        description="Run dangerous commands unasked (needs confirming on a terminal).",
    ),
]

Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


async def state(call: Call, session_id: str) -> schema.SessionModeState | None:
    """The session's modes, its current one as the daemon has it; None when the daemon does not
    let this user see them (``approvals.mode`` is the owner's: a member's editor has no modes)."""
    try:
        now = await call("approvals.mode", {"session_id": session_id})
    except acp.RequestError:
        return None
    return schema.SessionModeState(current_mode_id=str(now["mode"]), available_modes=MODES)


async def set_mode(call: Call, session_id: str, mode_id: str) -> str:
    """Switch the session's approval mode; the mode now in force."""
    now = await call("approvals.mode", {"session_id": session_id, "mode": mode_id})
    return str(now["mode"])
