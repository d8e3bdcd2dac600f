"""The ``memory.*`` methods over a `BuiltinMemory`, and its place in the daemon's life.

Translates RPC to the built-in memory's calls and back, with the permission check: only the
daemon's owner, root and ``approvals.approvers`` may read or change memory. What a write does
is `hermesd.memory.builtin`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hermesd.memory.builtin import BuiltinMemory
from hermesd.memory.files import TARGETS
from hermesd.memory.providers import MemoryProviders
from hermesd.rpc.connection import Call, Router
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.store.dbfile import storage_error

log = logging.getLogger(__name__)


class MemoryService:
    """memory.show|write|set|pending|approve|reject."""

    def __init__(self, memory: BuiltinMemory, providers: MemoryProviders | None = None) -> None:
        """``providers``: the external memory provider, checked at start, ended at stop."""
        self.memory = memory
        self.providers = providers
        self._checking: asyncio.Task[None] | None = None

    def bind(self, router: Router) -> None:
        for name in ("show", "write", "set", "pending", "approve", "reject"):
            router.bind(f"memory.{name}", getattr(self, f"rpc_{name}"))

    async def start(self) -> None:
        removed = await asyncio.to_thread(self.memory.files.remove_stale_temps)
        if removed:
            log.info("removed %d temporary memory file(s) left by a crash", removed)
        if self.providers is not None:  # the listing's availability; a warning in the log
            self._checking = asyncio.get_running_loop().create_task(self._providers_start())

    async def _providers_start(self) -> None:
        assert self.providers is not None
        await self.providers.check()
        await self.providers.replay()  # deliveries a killed daemon left in the journal

    async def stop(self) -> None:
        if self.providers is not None:
            await self.providers.close()

    def status(self) -> dict[str, Any]:
        return {"memory_write_approval": self.memory.write_approval}

    def reload(self, cfg: Any) -> None:
        self.memory.reload(cfg)
        if self.providers is not None:
            before = self.providers.selected
            self.providers.reload(cfg)
            if self.providers.selected != before:  # the listing, the CLI of the new one
                self._checking = asyncio.get_running_loop().create_task(self.providers.check())

    # --- methods -----------------------------------------------------------------------------

    def _check(self, call: Call, what: str) -> int:
        # who is an approver is configuration; a tool's process is refused writes at the edge
        # (memory.write/set/approve/reject are Access.PERSON)
        uid = call.caller.uid
        if not self.memory.may_answer(uid):
            raise RpcError(
                Codes.PERMISSION_DENIED,
                f"{what}: only the daemon's owner or a user listed in approvals.approvers "
                "may read or change memory",
                {"peer_uid": uid},
            )
        return uid

    async def rpc_show(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        self._check(call, "memory.show")
        targets = [_check_target(p["target"])] if p.get("target") else list(TARGETS)
        shown = await asyncio.to_thread(lambda: [self.memory.describe(t) for t in targets])
        return {"targets": shown, "write_approval": self.memory.write_approval}

    async def rpc_write(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        uid = self._check(call, "memory.write")
        names = ("target", "action", "content", "old_text", "operations")
        with self._disk_errors():
            return await self.memory.person_write({k: p[k] for k in names if k in p}, uid)

    async def rpc_set(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        uid = self._check(call, "memory.set")
        target = _check_target(p["target"])
        entries = p["entries"]
        if not all(isinstance(e, str) for e in entries):
            raise RpcError(Codes.INVALID_PARAMS, "memory.set: entries must be strings")
        with self._disk_errors():
            return await self.memory.set_entries(target, entries, p.get("base"), uid)

    @contextlib.contextmanager
    def _disk_errors(self) -> Iterator[None]:
        """A memory file the disk refused (full, read-only, failing) as the storage error
        every other write gives (`StorageUnavailable`), not an internal error."""
        try:
            yield
        except OSError as exc:
            where = Path(exc.filename) if exc.filename else self.memory.files.dir
            mapped = storage_error(exc, where)
            if mapped is None:
                raise
            log.error("%s", mapped)
            raise mapped from exc

    async def rpc_pending(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        self._check(call, "memory.pending")
        return {"pending": await asyncio.to_thread(self.memory.pending.list)}

    async def rpc_approve(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        uid = self._check(call, "memory.approve")
        result = await self.memory.approve(p["id"], uid)
        if result is None:
            raise _no_pending(p["id"])
        return result

    async def rpc_reject(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        uid = self._check(call, "memory.reject")
        if not await self.memory.reject(p["id"], uid):
            raise _no_pending(p["id"])
        return {"id": p["id"], "rejected": True}


def _check_target(target: str) -> str:
    if target not in TARGETS:
        raise RpcError(
            Codes.INVALID_PARAMS,
            f"Invalid target '{target}'. Use 'memory' or 'user'.",
            {"param": "target"},
        )
    return target


def _no_pending(pending_id: str) -> RpcError:
    return RpcError(
        Codes.NOT_FOUND, f"No pending memory write with id '{pending_id}'.", {"id": pending_id}
    )
