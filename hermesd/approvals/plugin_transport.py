"""Approvals as plugins see them (issue 32, docs/approvals.md): a plugin's approval transport
(the human-input hooks are `hermesd.runtime.human_input`).

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

from hermesd.runtime.hooks_surfaces import ApprovalTransport

if TYPE_CHECKING:
    from hermesd.approvals.broker import ApprovalBroker, Pending

log = logging.getLogger(__name__)


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
