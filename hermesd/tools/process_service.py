"""Background processes for people: ``process.list`` and ``process.kill`` over RPC (``hermesctl
processes``), ``/ps`` in chat, and the daemon's start and stop of the process table.

`register_processes` builds the `ProcessTable`, gives ``terminal`` its background mode,
registers the ``process`` tool and ``/ps``, and returns the service the daemon starts (it reads
``processes.json``: what a crashed daemon left is killed and shown as gone) and stops (every
running process is killed). Deleting a session kills its processes (`forget_session`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.redact import redact
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.rpc.service import RpcService
from hermesd.runtime.session import current_session
from hermesd.tools.process_tool import MAX_WAIT, SCHEMA, ProcessTool
from hermesd.tools.processes import Background, ProcessTable
from hermesd.tools.registry import BUILTIN

if TYPE_CHECKING:
    from hermesd.caller import Caller
    from hermesd.commands.registry import CommandRegistry
    from hermesd.rpc.connection import Call, Router
    from hermesd.sandbox.confine import Sandbox
    from hermesd.tools.registry import ToolRegistry
    from hermesd.tools.terminal import Terminal

log = logging.getLogger(__name__)

#: raises unless the caller may use the session (`SessionService.check_access`)
MayUse = Callable[["Caller", str], Awaitable[None]]


def describe(item: Background) -> dict[str, Any]:
    """One process as ``process.list`` answers it (secrets redacted, as in tool results)."""
    return {
        "id": item.id,
        "session_id": item.session_id,
        "command": redact(item.command),
        "cwd": item.cwd,
        "pid": item.pid,
        "status": item.status,
        "started_at": item.started_at,
        "exit_code": item.exit_code,
        "completion_reason": item.completion_reason,
        "termination_source": item.termination_source,
        "output_tail": redact(item.output[-500:]),  # as the tool's results are
    }


def render(items: list[Background]) -> str:
    """The table ``/ps`` and ``hermesctl processes`` print."""
    if not items:
        return "No background processes."
    lines = [f"{'ID':<18} {'STATUS':<8} {'PID':>7} {'UPTIME':>8}  COMMAND"]
    for p in items:
        uptime = f"{int(time.time() - p.started_at)}s" if not p.exited else "-"
        status = p.status if p.status != "exited" else f"exit {p.exit_code}"
        shown = redact(p.command)
        command = shown if len(shown) <= 60 else shown[:57] + "..."
        lines.append(f"{p.id:<18} {status:<8} {p.pid or '-':>7} {uptime:>8}  {command}")
    return "\n".join(lines)


class ProcessService(RpcService):
    """The process table's life with the daemon, and its RPC methods."""

    def __init__(self, table: ProcessTable, may_use: MayUse) -> None:
        self.table = table
        self.may_use = may_use

    def bind(self, router: Router) -> None:
        router.bind("process.list", self.rpc_list)
        router.bind("process.kill", self.rpc_kill)

    async def start(self) -> None:
        await self.table.restore()

    async def stop(self) -> None:
        await self.table.stop_all()

    def status(self) -> dict[str, Any]:
        running = sum(not p.exited for p in self.table.items.values())
        return {"background_processes": running} if running else {}

    def forget_session(self, session_id: str) -> Awaitable[None]:
        """A deleted session: its processes killed and forgotten."""
        return self.table.forget_session(session_id)

    async def rpc_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        sid = p.get("session_id") or None  # checked by the access gate (Access.SESSION)
        items = self.table.of_session(sid)
        if sid is None and call.caller.scope_uid is not None:  # only the caller's sessions
            items = [i for i in items if await self._usable(call.caller, i.session_id)]
        return {"processes": [describe(i) for i in items]}

    async def _usable(self, caller: Caller, sid: str) -> bool:
        try:
            await self.may_use(caller, sid)
        except RpcError:
            return False
        return True

    async def rpc_kill(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        item = self.table.get(p["session_id"], str(p["id"]))
        if item is None:
            raise RpcError(Codes.NOT_FOUND, f"session {p['session_id']} has no process {p['id']}")
        if not item.exited:
            await self.table.kill(item, "process.kill (client)")
        return {k: describe(item)[k] for k in ("id", "status", "exit_code")} | {
            "completion_reason": item.completion_reason,
            "termination_source": item.termination_source,
        }

    async def slash(self, raw_args: str) -> str:
        """``/ps``: the calling session's background processes."""
        sid = current_session.get()
        if not sid:
            return "/ps needs a session: use it inside hermesctl chat, or pass session_id."
        return render(self.table.of_session(sid))


def register_processes(
    tools: ToolRegistry,
    commands: CommandRegistry,
    terminal: Terminal,
    sandbox: Sandbox,
    home: Path,
    config: Any,
    may_use: MayUse,
) -> ProcessService:
    """The process table, terminal's background mode, the ``process`` tool and ``/ps``."""
    table = ProcessTable(sandbox, home, config)
    terminal.processes = table
    tool = ProcessTool(table)
    tools.register(
        "process",
        "terminal",
        SCHEMA,
        tool.run,
        is_async=True,
        emoji="⚙️",
        owner=BUILTIN,
        check_arguments=False,
        timeout=MAX_WAIT + 30,  # a wait bounds itself
    )
    service = ProcessService(table, may_use)
    commands.register(
        "ps", service.slash, description="Show this session's background processes", access="any"
    )
    return service
