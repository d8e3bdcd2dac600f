"""The one access check of every request, read from the method's declaration.

`AccessGate.admit` runs before a handler: ``Access.OWNER`` methods answer ``PermissionDenied``
to anyone but the daemon's owner, ``Access.PERSON`` ones to a tool's process, and an
``Access.SESSION`` method's session parameter must name a session of the caller (the owner may
use any): the session service supplies that lookup (`AccessGate.sessions`), and a session of
someone else answers ``NotFound``, like one that does not exist. A call whose declaration says
it widens what tools may do (``MethodSpec.widens``) also needs a confirmation: see `confirm`.
Handlers do not repeat these checks.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from hermesd.caller import Caller
from hermesd.rpc.confirm import Confirmations
from hermesd.rpc.protocol import Access, Codes, MethodSpec, RpcError

log = logging.getLogger(__name__)

#: ``(caller, params, key)``: resolve ``params[key]`` (a unique prefix becomes the full id) and
#: raise ``NotFound`` unless the caller may use that session.
SessionCheck = Callable[[Caller, dict[str, Any], str], Awaitable[None]]


def denied(what: str, caller: Caller, access: str, verb: str = "call") -> RpcError:
    """The ``PermissionDenied`` answer to ``caller`` for ``what`` (a method or a command)."""
    why = refusal(access, caller) or "is not allowed"
    log.warning(
        "uid %d (%s, pid %d) may not %s %s (%s only)",
        caller.uid,
        caller.trust,
        caller.pid,
        verb,
        what,
        access,
    )
    return RpcError(
        Codes.PERMISSION_DENIED,
        f"{what} {why.replace('be called', 'be ' + ('run' if verb == 'run' else 'called'))}",
        {"peer_uid": caller.uid, "trust": caller.trust, "access": access},
    )


def refusal(access: str, caller: Caller) -> str | None:
    """Why ``caller`` may not call a method of ``access`` at all, or None."""
    if access == Access.OWNER and not caller.is_owner:
        return "may only be called by the daemon's owner"
    if access == Access.PERSON and caller.is_tool:
        return "may not be called from a tool's process (a person's client is needed)"
    return None


class AccessGate:
    """Enforces each method's declared access; one per router."""

    def __init__(self) -> None:
        self.sessions: SessionCheck | None = None  # set by the session service when it binds
        self.confirmations = Confirmations()

    def admit(self, spec: MethodSpec, caller: Caller, params: dict[str, Any]) -> bool:
        """Raise unless ``caller`` may call ``spec`` with ``params``; True when the session
        parameter still has to be checked (`check_session`, asynchronous)."""
        if refusal(spec.access, caller) is not None:
            raise denied(spec.name, caller, spec.access)
        if spec.widens is not None:
            self.confirmations.check(spec, caller, params)
        return spec.access == Access.SESSION and bool(params.get(spec.session_param))

    def guarded(self, spec: MethodSpec, handler: Callable[[Any, dict[str, Any]], Any]) -> Any:
        """``handler`` run only once the call's session is known to be the caller's."""

        async def run(call: Any, params: dict[str, Any]) -> Any:
            if self.sessions is None:  # fail closed: nobody can tell whose the session is
                raise RpcError(Codes.INTERNAL, f"{spec.name}: session ownership is unknown")
            await self.sessions(call.caller, params, spec.session_param)
            result = handler(call, params)
            return await result if inspect.isawaitable(result) else result

        return run
