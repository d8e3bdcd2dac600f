"""``/memory [pending|approve ID|reject ID|approval on|off]``: staged memory writes answered
from any client, and the switch that stages them.

Registered as a built-in slash command through `CommandRegistry.register`, the call plugins
use. Answers as the caller running the command (a `Caller`, handed in), with the
approval broker's rule for who may answer; the texts are the reference's. ``approval on|off``
writes ``memory.write_approval`` to config.yaml through `set_approval` (the daemon's config
editor, handed in; then a reload), and only the daemon's owner may, as ``config.set``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from hermesd.caller import Caller

if TYPE_CHECKING:
    from hermesd.commands.registry import CommandRegistry
    from hermesd.memory.builtin import BuiltinMemory

USAGE = "Unknown /memory subcommand. Use: pending, approve <id>, reject <id>, approval <on|off>."
TRUTHY = {"on", "true", "yes", "1", "enable", "enabled"}
FALSEY = {"off", "false", "no", "0", "disable", "disabled"}
NOT_OWNER = "Only the daemon's owner can change memory.write_approval (as with config.set)."
NOT_ALLOWED = "Only the daemon's owner (or a user in approvals.approvers) can review memory writes."


def format_pending(records: list[dict[str, Any]]) -> str:
    """The pending list as the reference prints it."""
    if not records:
        return "No pending memory writes."
    lines = [f"Pending memory writes ({len(records)}):"]
    lines += [f"  {r['id']}  {r.get('summary', '')}" for r in records]
    lines += ["", "Apply: /memory approve <id>   Reject: /memory reject <id>"]
    return "\n".join(lines)


class SlashMemory:
    """The ``/memory`` handler of a `BuiltinMemory`."""

    def __init__(self, service: BuiltinMemory) -> None:
        self.service = service
        #: persists ``memory.write_approval`` and reloads; None: tell the person the command
        self.set_approval: Callable[[bool], Awaitable[None]] | None = None

    def register(self, commands: CommandRegistry) -> None:
        commands.register(
            "memory",
            self.run,
            description="Review memory writes waiting for approval",
            args_hint="[pending|approve ID|reject ID|approval on|off]",
            access="person",  # as memory.approve: a person, never a tool's process
            takes_caller=True,
        )

    async def run(self, raw_args: str, caller: Caller) -> str:
        """``/memory …`` run by ``caller``."""
        uid = caller.uid
        if not self.service.may_answer(uid):
            return NOT_ALLOWED
        words = raw_args.split()
        verb = words[0].lower() if words else ""
        records = await self._records()
        if not words:
            state = "on" if self.service.write_approval else "off"
            return f"memory.write_approval = {state}\n\n" + format_pending(records)
        if verb == "pending":
            return format_pending(records)
        if verb in ("approval", "mode"):  # 'mode': the reference's older name
            return await self._approval(words[1:], caller.is_owner)
        if verb not in ("approve", "apply", "reject", "deny", "drop"):
            return USAGE
        if len(words) < 2:
            return "Usage: /memory approve|reject <id>  (or 'all')"
        wanted = words[1]
        if verb in ("approve", "apply"):
            return await self._approve(wanted, records, uid)
        return await self._reject(wanted, records, uid)

    async def _approval(self, rest: list[str], owner: bool) -> str:
        state = f"memory.write_approval = {'on' if self.service.write_approval else 'off'}"
        if not rest:
            return f"{state}\nSet with: /memory approval <on|off>"
        value = rest[0].strip().lower()
        if value not in TRUTHY | FALSEY:
            return f"Invalid value '{value}'. Use: on or off."
        if not owner:
            return NOT_OWNER
        enabled = value in TRUTHY
        if self.set_approval is None:
            return (
                "To change the memory approval gate, run:\n"
                f"  hermesctl config set memory.write_approval {'true' if enabled else 'false'}"
            )
        try:
            await self.set_approval(enabled)
        except Exception as exc:
            return f"Failed to set memory.write_approval: {exc}"
        return f"memory.write_approval set to '{'on' if enabled else 'off'}'."

    async def _records(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.service.pending.list)

    async def _approve(self, wanted: str, records: list[dict[str, Any]], uid: int | None) -> str:
        if not records:
            return "No pending memory writes."
        ids = [r["id"] for r in records] if wanted.lower() == "all" else [wanted]
        applied, failed = 0, []
        for pending_id in ids:
            result = await self.service.approve(pending_id, uid)
            if result is None:
                if wanted.lower() != "all":
                    return f"No pending memory write with id '{wanted}'."
                continue
            if result.get("applied"):
                applied += 1
            else:
                failed.append(f"{pending_id}: {result.get('error', '')}")
        out = [f"Approved {applied} memory write(s)."]
        if failed:
            out += ["Failed:", *(f"  {f}" for f in failed)]
        return "\n".join(out)

    async def _reject(self, wanted: str, records: list[dict[str, Any]], uid: int | None) -> str:
        if wanted.lower() == "all":
            count = 0
            for record in records:
                count += await self.service.reject(record["id"], uid)
            return f"Rejected {count} pending memory write(s)."
        if await self.service.reject(wanted, uid):
            return f"Rejected pending memory write '{wanted}'."
        return f"No pending memory write with id '{wanted}'."
