"""Asking the person before a call that widens what tools may do.

The daemon answers such a call (``config.set`` of a sandbox, approval or allowlist setting,
``plugins.install``/``enable``/``update``) with ``ConfirmationRequired``, a one-time challenge
and the list of what widens. `call_confirmed` shows that list and asks the person to type
``yes``, only when stdin and stdout are a terminal, then sends the same call again with the
challenge; the daemon checks that this process has a controlling terminal and is not a tool's.
"""

from __future__ import annotations

import sys
from typing import Any

from hermesctl.client import Client
from hermesd.rpc.protocol import CONFIRM_PARAM, Codes, RpcError


def call_confirmed(
    client: Client, method: str, params: dict[str, Any], timeout: float | None = None
) -> Any:
    """``client.call`` that asks the person on this terminal when the daemon wants it."""
    try:
        return client.call(method, params, timeout=timeout)
    except RpcError as exc:
        if exc.code != Codes.CONFIRMATION_REQUIRED or not isinstance(exc.data, dict):
            raise
        challenge = str(exc.data.get("challenge") or "")
        widens = [str(w) for w in exc.data.get("widens") or []]
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise RpcError(
            Codes.PERMISSION_DENIED,
            f"{method} widens what tools may do and needs your confirmation on a terminal; "
            "run it with stdin and stdout on a terminal, or edit config.yaml and run "
            "'hermesctl reload'",
        )
    print("This widens what tools run by hermesd may do:")
    for item in widens:
        print(f"  - {item}")
    try:
        answer = input("Type 'yes' to allow it: ")
    except EOFError:
        answer = ""
    if answer.strip().lower() != "yes":
        raise RpcError(Codes.PERMISSION_DENIED, f"{method}: not confirmed; nothing was changed")
    return client.call(method, {**params, CONFIRM_PARAM: challenge}, timeout=timeout)
