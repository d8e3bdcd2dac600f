"""The ``clarify.*`` methods over a `ClarifyBroker`, and its place in the daemon's life.

``clarify.pending`` lists a session's open questions and ``clarify.respond`` answers one; both
are ``Access.SESSION`` (whoever may use the session may answer its questions; a tool's process
never may). At stop every open question gets the fallback answer. The questions themselves are
``hermesd.tools.clarify``'s.
"""

from __future__ import annotations

from typing import Any

from hermesd.rpc.connection import Call, Router
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.rpc.service import RpcService
from hermesd.tools.clarify import ClarifyBroker


class ClarifyService(RpcService):
    """clarify.pending|respond."""

    def __init__(self, broker: ClarifyBroker) -> None:
        self.broker = broker

    def bind(self, router: Router) -> None:
        router.bind("clarify.pending", self.rpc_pending)
        router.bind("clarify.respond", self.rpc_respond)

    async def stop(self) -> None:
        self.broker.close()

    def status(self) -> dict[str, Any]:
        return {"clarify_pending": len(self.broker.pending)}

    def reload(self, cfg: Any) -> None:
        """New ``clarify.*`` settings (for questions asked from now on)."""
        self.broker.reload(cfg)

    def rpc_pending(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return {"pending": self.broker.pending_for(p["session_id"])}

    def rpc_respond(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("response") is None and p.get("choice") is None:
            raise RpcError(Codes.INVALID_PARAMS, "clarify.respond: give a response or a choice")
        try:
            return self.broker.respond(
                p["id"], p["session_id"], p.get("response"), p.get("choice"), call.caller.uid
            )
        except KeyError:
            raise RpcError(
                Codes.NOT_FOUND,
                f"no open question '{p['id']}' in session {p['session_id']} (answered, timed "
                "out, or never asked)",
                {"id": p["id"]},
            ) from None
        except ValueError as exc:
            raise RpcError(Codes.INVALID_PARAMS, f"clarify.respond: {exc}") from None
