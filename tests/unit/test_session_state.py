"""Per-session state in SessionService is dropped when it no longer applies (no slow leaks).

These check the service's own tables, which no RPC exposes; the daemon-level figure (RSS over
10,000 turns with sessions created and deleted) is bench/memory.py's.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from hermesd.agent.loop import AgentLoop
from hermesd.agent.session_service import SessionService
from hermesd.caller import OWNER, Caller
from hermesd.model.client import ModelClient, ModelSettings
from hermesd.rpc.connection import Call, Peer
from hermesd.runtime.hooks import HookBus
from hermesd.store.facade import SessionStore
from hermesd.tools.registry import ToolRegistry


class Conn:
    """The part of a connection the session service touches."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, Any]] = []
        self.peer = Peer(1, os.geteuid(), os.getegid())
        self.attachments: set[str] = set()

    def notify(self, method: str, params: Any) -> None:
        self.notes.append((method, params))


OWNER_CALLER = Caller(os.geteuid(), 1, OWNER)


def service(tmp_path: Path) -> SessionService:
    store, hooks = SessionStore(tmp_path / "state.db"), HookBus()
    agent = AgentLoop(store, ToolRegistry(hooks), hooks, ModelClient(ModelSettings(None, None)))
    return SessionService(store, agent=agent, hooks=hooks)


def test_reset_drops_the_old_session_from_the_attachment_table(tmp_path: Path) -> None:
    svc = service(tmp_path)
    conn = Conn()
    call = Call(conn=conn, msgid=1, method="session.create", caller=OWNER_CALLER)  # type: ignore[arg-type]

    async def run() -> tuple[str, str]:
        old = (await svc.rpc_create(call, {}))["id"]
        new = (await svc.rpc_reset(call, {"session_id": old}))["id"]
        return old, new

    try:
        old, new = asyncio.run(run())
        assert old not in svc.attached
        assert svc.attached[new] == {conn} and conn.attachments == {new}
    finally:
        svc.store.close()


def test_deleting_a_session_forgets_its_state_elsewhere(tmp_path: Path) -> None:
    svc = service(tmp_path)
    forgotten: list[str] = []
    svc.on_forget = forgotten.append
    conn = Conn()
    call = Call(conn=conn, msgid=1, method="session.create", caller=OWNER_CALLER)  # type: ignore[arg-type]

    async def run() -> str:
        sid = (await svc.rpc_create(call, {}))["id"]
        await svc.rpc_delete(call, {"session_id": sid})
        return sid

    try:
        sid = asyncio.run(run())
        assert forgotten == [sid]
        assert sid not in svc.attached
        assert conn.notes[-1][1][0] == {"type": "session.deleted", "session_id": sid}
    finally:
        svc.store.close()
