"""The ``approvals.*`` methods over an `ApprovalBroker`, and its place in the daemon's life.

Translates RPC to broker calls and back (permission checks included: only the owner, root and
``approvals.approvers`` may answer or revoke), and ``/approve``/``/deny`` (`slash_command`),
answered as the command's `Caller` (handed in). Decisions live in
``hermesd.approvals.broker``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from hermesd.approvals.broker import ApprovalBroker
from hermesd.caller import Caller
from hermesd.rpc.connection import Call, Router
from hermesd.rpc.protocol import Codes, RpcError

log = logging.getLogger(__name__)


class ApprovalService:
    """approvals.pending|respond|list|revoke|mode."""

    def __init__(self, broker: ApprovalBroker) -> None:
        self.broker = broker

    def bind(self, router: Router) -> None:
        router.bind("approvals.pending", self.rpc_pending)
        router.bind("approvals.respond", self.rpc_respond)
        router.bind("approvals.list", self.rpc_list)
        router.bind("approvals.revoke", self.rpc_revoke)
        router.bind("approvals.mode", self.rpc_mode)

    async def start(self) -> None:
        await self.broker.load()

    async def stop(self) -> None:
        await self.broker.close()
        await asyncio.sleep(0.1)  # let a turn store the denial before sessions cancel turns

    def status(self) -> dict[str, Any]:
        return {
            "approvals_pending": len(self.broker.pending),
            "approval_rules": len(self.broker.rules),
        }

    def reload(self, cfg: Any) -> None:
        """New approval settings."""
        self.broker.reload(cfg)

    def _check(self, call: Call, what: str) -> None:
        # a tool's process is refused at the edge (Access.PERSON); who is an approver is
        # the broker's configuration
        if not self.broker.may_answer(call.caller):
            raise RpcError(
                Codes.PERMISSION_DENIED,
                f"{what}: only the daemon's owner or a user listed in "
                "approvals.approvers may do this",
                {"peer_uid": call.caller.uid},
            )

    # --- methods -----------------------------------------------------------------------------

    def rpc_pending(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        caller = call.caller
        viewer = caller.uid if caller.scope_uid is None else caller.scope_uid
        return {"pending": self.broker.pending_for(p.get("session_id") or None, viewer)}

    def rpc_respond(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        self._check(call, "approvals.respond")
        try:
            return self.broker.respond(p["id"], p["choice"], p.get("reason"), call.caller.uid)
        except KeyError:
            raise RpcError(
                Codes.NOT_FOUND,
                f"no pending approval '{p['id']}' (answered, timed out, or never asked)",
                {"id": p["id"]},
            ) from None
        except ValueError as exc:
            raise RpcError(Codes.INVALID_PARAMS, f"approvals.respond: {exc}") from None
        except PermissionError:
            raise RpcError(
                Codes.PERMISSION_DENIED,
                "approvals.respond: not an approver",
                {"peer_uid": call.caller.uid},
            ) from None

    def rpc_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return {"rules": sorted(self.broker.rules.values(), key=lambda r: r["created_at"])}

    async def rpc_revoke(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        self._check(call, "approvals.revoke")
        if not await self.broker.revoke(p["pattern_key"]):
            raise RpcError(
                Codes.NOT_FOUND,
                f"no always-rule for '{p['pattern_key']}'",
                {"pattern_key": p["pattern_key"]},
            )
        return {"revoked": True, "pattern_key": p["pattern_key"]}

    # --- /approve and /deny (handed to CommandService as ``approvals``) --------------------------

    async def slash_command(self, verb: str, session_id: str, raw_args: str, caller: Caller) -> str:
        """``/approve [session|always]`` or ``/deny [reason]`` for the session's oldest
        pending approval, answered as ``caller`` (the command's)."""
        pending = self.broker.pending_for(session_id or None)
        if not pending:
            return "No pending approvals."
        uid = caller.uid
        if not self.broker.may_answer(caller):
            return (
                "Only the daemon's owner (or a user in approvals.approvers) can answer approvals."
            )
        first = pending[0]
        words = raw_args.strip()
        if verb == "approve":
            choice = words.lower() if words.lower() in ("session", "always") else "once"
            reason = None
        else:
            choice, reason = "deny", words or None
        self.broker.respond(first["id"], choice, reason, uid)
        scope = {"once": "once", "session": "for this session", "always": "permanently"}
        if choice == "deny":
            return f"✗ Denied: {first['command']}"
        return f"✓ Approved {scope[choice]}: {first['command']}"

    def rpc_mode(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        sid, mode = p["session_id"], p.get("mode")
        if mode is not None:
            try:
                self.broker.set_session_mode(sid, mode)
            except ValueError as exc:
                raise RpcError(Codes.INVALID_PARAMS, str(exc), {"mode": mode}) from None
            log.info("approval mode of session %s set to %s by %s", sid, mode, call.caller.uid)
        return {
            "session_id": sid,
            "mode": self.broker.session_mode(sid),
            "configured": self.broker.mode,
        }
