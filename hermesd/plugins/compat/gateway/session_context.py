"""hermesd's ``gateway.session_context``: the ``HERMES_SESSION_*`` values of the current turn."""

from __future__ import annotations

import os
from typing import Any

from hermesd.plugins import hostapi


def get_session_env(name: str, default: str = "") -> str:
    """The value of ``name`` for the session this code works for; the process environment,
    then ``default``, when none is set. ``HERMES_SESSION_ID`` is hermesd's session id."""
    value = hostapi.session_env(name)
    if value is not None:
        return value
    return os.environ.get(name, default)


def set_session_vars(**values: Any) -> Any:
    """Set ``HERMES_SESSION_<NAME>`` values for the current context; a token for
    `clear_session_vars`."""
    current = dict(hostapi.session_vars.get() or {})
    for key, value in values.items():
        name = (
            key.upper()
            if key.upper().startswith("HERMES_SESSION_")
            else (f"HERMES_SESSION_{key.upper()}")
        )
        current[name] = "" if value is None else str(value)
    return hostapi.session_vars.set(current)


def clear_session_vars(token: Any) -> None:
    """Undo `set_session_vars`."""
    hostapi.session_vars.reset(token)


def session_context_engaged() -> bool:
    """True inside a session (a turn, a tool call, a command of a session)."""
    return hostapi.session_env("HERMES_SESSION_ID") is not None
