"""What every command module shares: exit statuses, the handler table, output helpers."""

from __future__ import annotations

import argparse
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from hermesctl.client import Client

    Command = Callable[[argparse.Namespace, Client], int]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_RUNNING = 0, 1, 2, 3

COMMANDS: dict[str, Command] = {}


class UsageError(Exception):
    """A usage mistake found after parsing; reported like an argparse error (status 2)."""


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def command(name: str) -> Callable[[Command], Command]:
    """Register the handler of ``hermesctl NAME``."""

    def deco(fn: Command) -> Command:
        COMMANDS[name] = fn
        return fn

    return deco


def emit_json(obj: Any) -> None:
    """Print one JSON document."""
    import json

    json.dump(obj, sys.stdout, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


def sandbox_text(sandbox: Any) -> str | None:
    """One line about the tool sandbox from ``status``'s ``sandbox`` field (None: not told)."""
    if not isinstance(sandbox, dict):
        return None
    mode, mechanism = sandbox.get("mode"), sandbox.get("mechanism")
    if mode == "off":
        return "sandbox: off (sandbox.mode: off; tool commands run unconfined)"
    if mechanism == "unavailable":
        return (
            f"sandbox: {mode}, but no mechanism works here: tool commands are refused "
            f"({sandbox.get('reason', '')})"
        )
    return f"sandbox: {mode} ({mechanism}){_network_text(sandbox)}"


def _network_text(sandbox: dict[str, Any]) -> str:
    """``, network: …`` from ``sandbox.network`` (absent from older daemons)."""
    network = sandbox.get("network")
    if network == "allowlist":
        domains = sandbox.get("allowed_domains") or []
        return f", network: allowlist ({len(domains)} domain{'s' if len(domains) != 1 else ''})"
    return f", network: {network}" if isinstance(network, str) else ""
