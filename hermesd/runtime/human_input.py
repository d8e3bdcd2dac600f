"""The human-input hooks (issue 32): ``on_human_input_request`` when a person is asked for
something, ``on_human_input_resolved`` once when the wait ends, with the same ``request_id``.

Two kinds are asked in hermesd: ``approval`` (the approval broker; ``outcome`` is the choice,
``timeout`` or ``cancelled``) and ``clarify`` (the clarify tool; ``submitted``, ``timed_out``,
``unattended`` or ``cancelled``). ``prompt`` is what the person is shown, with known secret
values already hidden; what the person answers never reaches a plugin.
"""

from __future__ import annotations

from typing import Any

from hermesd.runtime.hooks import HookBus


def human_request(
    kind: str, request_id: str, session_id: str, platform: str, prompt: str
) -> dict[str, Any]:
    """The keyword arguments both hooks get (``session_key`` is the session id in hermesd)."""
    return {
        "kind": kind,
        "request_id": request_id,
        "session_id": session_id,
        "session_key": session_id,
        "platform": platform,
        "prompt": prompt,
    }


async def requested(hooks: HookBus, human: dict[str, Any]) -> None:
    """Fire ``on_human_input_request`` (when a plugin has it)."""
    if hooks.has("on_human_input_request"):
        await hooks.invoke(
            "on_human_input_request",
            kind=human["kind"],
            request_id=human["request_id"],
            session_id=human["session_id"],
            session_key=human["session_key"],
            platform=human["platform"],
            prompt=human["prompt"],
        )


async def resolved(hooks: HookBus, human: dict[str, Any], outcome: str) -> None:
    """Fire ``on_human_input_resolved`` with how the wait ended (when a plugin has it)."""
    if hooks.has("on_human_input_resolved"):
        await hooks.invoke(
            "on_human_input_resolved",
            kind=human["kind"],
            request_id=human["request_id"],
            session_id=human["session_id"],
            session_key=human["session_key"],
            platform=human["platform"],
            prompt=human["prompt"],
            outcome=outcome,
        )
