"""Confirmation of calls that widen what tools may do: the owner is proven, not presumed.

A call whose declaration says it widens something (``MethodSpec.widens``: a sandbox, approval
or allowlist setting, an MCP server, a plugin's code) runs only when a person confirmed it on a
terminal. The first call is answered ``ConfirmationRequired`` with a one-time challenge and the
list of what widens; the client (``hermesctl``, only when its stdin and stdout are a terminal)
shows the list, asks the person, and sends the same call again with ``confirm: <challenge>``.
The daemon accepts the answer only on the same connection, for the same method and
parameters, within `TTL` seconds, and only from a peer that has a controlling terminal
(``tty_nr`` in ``/proc/<pid>/stat``) and is not a tool's process; anyone else is refused
outright. Editing config.yaml and reloading stays the other way: that is the person too.
Whoever starts the daemon may turn the terminal requirement off for the owner with
``HERMESD_CONFIRM_WIDENING=off`` in its environment (provisioning scripts, CI; a tool's process
stays refused). Limits are in docs/sandbox.md ("The owner is proven, not presumed").
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import time
from typing import Any

from hermesd.caller import Caller
from hermesd.rpc.protocol import CONFIRM_PARAM, Codes, MethodSpec, RpcError

log = logging.getLogger(__name__)

TTL = 300.0  # seconds a challenge stays open
MAX_OPEN = 256  # challenges kept at once (the oldest go first)
CONFIRM_ENV = "HERMESD_CONFIRM_WIDENING"  # "off": the owner's calls need no terminal


def controlling_tty(pid: int) -> int:
    """The ``tty_nr`` of process ``pid`` (0: no controlling terminal or not readable)."""
    if pid <= 0:
        return 0
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
        # the command name may hold spaces and parentheses: the fields follow the last ')'
        return int(stat.rsplit(")", 1)[1].split()[4])
    except (OSError, ValueError, IndexError):
        return 0


def _digest(method: str, params: dict[str, Any]) -> str:
    text = json.dumps([method, params], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Confirmations:
    """Open challenges, per connection and call."""

    def __init__(self) -> None:
        self._open: dict[tuple[int, str], tuple[str, float]] = {}
        setting = os.environ.get(CONFIRM_ENV, "on").strip().lower()
        self.required = setting not in ("off", "0", "false", "no")
        if not self.required:
            log.warning(
                "%s=%s: calls that widen what tools may do are accepted from the owner "
                "without a confirmation on a terminal",
                CONFIRM_ENV,
                setting,
            )

    def check(self, spec: MethodSpec, caller: Caller, params: dict[str, Any]) -> None:
        """Return when the call needs no confirmation or carries a valid one; else raise
        ``ConfirmationRequired`` (a challenge) or ``PermissionDenied`` (no person can confirm
        from there). Takes ``confirm`` out of ``params``."""
        assert spec.widens is not None
        answer = params.pop(CONFIRM_PARAM, None)
        widened = spec.widens(params)
        if not widened:
            return
        who = _why_not_a_person(caller)
        if not self.required and caller.is_owner:  # never a tool's process (not the owner)
            log.info("%s by %s, unconfirmed (%s=off)", spec.name, caller.describe(), CONFIRM_ENV)
            return
        if who is not None:
            log.warning("%s refused to %s: %s", spec.name, caller.describe(), who)
            raise RpcError(
                Codes.PERMISSION_DENIED,
                f"{spec.name} widens what tools may do ({'; '.join(widened)}) and needs a "
                f"person to confirm it on a terminal, but {who}. Run it from hermesctl in a "
                "terminal, or edit config.yaml yourself and run 'hermesctl reload'.",
                {"peer_uid": caller.uid, "trust": caller.trust, "widens": widened},
            )
        now = time.monotonic()
        self._expire(now)
        digest = _digest(spec.name, params)
        if answer is not None:
            entry = self._open.pop((caller.connection_id, str(answer)), None)
            if entry is None or entry[0] != digest:
                raise RpcError(
                    Codes.PERMISSION_DENIED,
                    f"{spec.name}: the confirmation does not match an open challenge for this "
                    "call on this connection (expired, used, or for other parameters)",
                    {"peer_uid": caller.uid},
                )
            log.info("%s confirmed by %s: %s", spec.name, caller.describe(), "; ".join(widened))
            return
        challenge = secrets.token_hex(8)
        self._open[(caller.connection_id, challenge)] = (digest, now + TTL)
        raise RpcError(
            Codes.CONFIRMATION_REQUIRED,
            f"{spec.name} widens what tools may do: {'; '.join(widened)}. Confirm it on your "
            f"terminal (send the call again with {CONFIRM_PARAM}: <challenge>).",
            {"challenge": challenge, "widens": widened, "method": spec.name, "ttl": TTL},
        )

    def forget(self, connection_id: int) -> None:
        """Drop the open challenges of a closed connection."""
        for key in [k for k in self._open if k[0] == connection_id]:
            del self._open[key]

    def _expire(self, now: float) -> None:
        for key in [k for k, (_, until) in self._open.items() if until < now]:
            del self._open[key]
        while len(self._open) >= MAX_OPEN:
            del self._open[next(iter(self._open))]


def _why_not_a_person(caller: Caller) -> str | None:
    """Why no person can confirm from ``caller``'s process, or None."""
    if caller.is_tool:
        return f"the caller is a tool's process ({caller.tool_origin})"
    if not caller.is_owner:
        return "the caller is not the daemon's owner"
    if controlling_tty(caller.pid) == 0:
        return "the calling process has no controlling terminal"
    return None
