"""Approvals as plugins see them (issue 32, docs/approvals.md): the human-input hooks, and a
plugin's approval transport.

``security.approval.transport`` may name a transport a plugin registered with
``ctx.register_approval_transport``; the broker then also hands each approval to it
(`ask_too`). Its answer resolves the approval like a client's, as the owner's (the owner chose
the transport); one that fails, is not a choice or comes too late decides nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from hermesd.runtime.hooks import HookBus
from hermesd.runtime.hooks_surfaces import ApprovalTransport

if TYPE_CHECKING:
    from hermesd.approvals.broker import ApprovalBroker, Pending

log = logging.getLogger(__name__)


def human_request(approval_id: str, session_id: str, surface: str, prompt: str) -> dict[str, Any]:
    """What ``on_human_input_request`` and ``on_human_input_resolved`` get for an approval."""
    return {
        "kind": "approval",
        "request_id": approval_id,
        "session_id": session_id,
        "session_key": session_id,
        "platform": surface,
        "prompt": prompt,
    }


async def human_input_requested(hooks: HookBus, human: dict[str, Any]) -> None:
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


async def human_input_resolved(hooks: HookBus, human: dict[str, Any], outcome: str) -> None:
    """Fire ``on_human_input_resolved`` with the approval's outcome (when a plugin has it)."""
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


def ask_too(
    broker: ApprovalBroker, pending: Pending, request: dict[str, Any]
) -> asyncio.Task[None] | None:
    """Start asking the selected plugin transport about ``pending``; None when it is the
    built-in one or no plugin registered it (warned)."""
    name = broker.transport
    if name == "builtin":
        return None
    transport = broker.hooks.surfaces.transports.get(name)
    if transport is None:
        log.warning(
            "approval %s: transport %r is selected but no plugin registered it", pending.id, name
        )
        return None
    asked = {
        **request,
        "id": pending.id,
        "tool": pending.subject.tool,
        "timeout": max(0.0, pending.deadline - time.time()),
    }
    return asyncio.get_running_loop().create_task(_ask(broker, pending, transport, asked))


async def _ask(
    broker: ApprovalBroker, pending: Pending, transport: ApprovalTransport, request: dict[str, Any]
) -> None:
    from hermesd.approvals.broker import parse_choice  # the broker imports this module

    surfaces = broker.hooks.surfaces
    try:
        answer = await asyncio.wait_for(surfaces.present(transport, request), request["timeout"])
    except TimeoutError:
        return
    except Exception:
        log.warning("approval %s: transport %r failed", pending.id, transport.name, exc_info=True)
        return
    raw, reason = (
        (answer.get("choice"), answer.get("reason")) if isinstance(answer, dict) else (answer, None)
    )
    choice = parse_choice(raw)
    if choice is None:
        log.warning(
            "approval %s: transport %r answered %r, not a choice",
            pending.id,
            transport.name,
            answer,
        )
        return
    log.info("approval %s: answered through transport %r", pending.id, transport.name)
    why = reason if isinstance(reason, str) else None
    broker._resolve(pending, choice, why, broker.owner_uid, None)
