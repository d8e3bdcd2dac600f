"""The session a piece of work runs for, as a context variable every layer can read.

Set by the tool pipeline and the command service around a call; plugin threads started
through the worker pool inherit it, so ``ctx.dispatch_tool`` or ``ctx.inject_message`` from
plugin code acts on that session. It names a session, nothing more: who is asking is a
separate value handed down from the RPC edge.
"""

from __future__ import annotations

import contextvars

#: The session a tool call or plugin command runs for ("" outside any session).
current_session: contextvars.ContextVar[str] = contextvars.ContextVar(
    "hermesd_current_session", default=""
)

#: The tool names the running turn may call when its toolsets are narrowed (a scheduled run's),
#: None when they are not: a tool that calls tools itself (``execute_code``) keeps to them.
turn_tools: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "hermesd_turn_tools", default=None
)
