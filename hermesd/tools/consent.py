"""`Consent`: what a tool's own check found about one call, before the call touches anything.

A tool registered with ``prepare=`` (`hermesd.tools.registry.ToolRegistry.register`) has that
function run on a worker thread after the ``pre_tool_call`` hooks and before the approver. It
looks at the call (for the file tools: resolves the path, classifies it, notes the inode) and
returns a `Consent`. The registry refuses the call, or asks a person through the same approver
the terminal uses, and runs the handler only after a yes, passing ``plan=`` so the handler acts
on exactly what was decided on and not on a path it resolves again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Consent:
    """``refuse``: the error the call ends with; ``ask``: what a person is asked (with
    ``rule_key`` for "session"/"always" answers); ``plan``: handed to the handler."""

    plan: Any = None
    ask: str | None = None
    rule_key: str | None = None
    refuse: str | None = None
