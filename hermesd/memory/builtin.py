"""`BuiltinMemory`: the daemon's one owner of the built-in memory.

Owns what happens around a write: the ``memory`` tool's calls (`tool_call`), staging them for a
person when ``memory.write_approval`` is on, a person's writes and answers to staged ones,
redaction of what is written, announcing every write to attached clients (``memory.event``) and
each session's frozen prompt snapshot (`prompt_block`). The writes themselves are
`hermesd.memory.edits`, on a worker thread; who may answer is the approval broker's rule, handed
in as ``may_answer``; the ``memory.*`` RPC is `hermesd.memory.service`.

External memory providers (issue 21, second half) plug in at three marked points: their
``system_prompt_block()`` beside the built-in blocks in `prompt_block`, ``on_memory_write`` as a
`write_listeners` entry, and ``prefetch`` in the agent loop, not here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermesd.caller import current_caller
from hermesd.memory import edits, snapshot, threats
from hermesd.memory.commands import SlashMemory
from hermesd.memory.files import TARGETS, Limits, MemoryFiles
from hermesd.memory.pending import STAGED_MESSAGE, PendingWrites
from hermesd.memory.tool import UNAVAILABLE, read_call, tool_error
from hermesd.rpc import wire
from hermesd.rpc.connection import Connection, connection_of
from hermesd.store.facade import SessionStore

log = logging.getLogger(__name__)

EVENT = "memory.event"
#: failed attempts to make room or find an entry in one turn before the model is told to stop
MAX_CONSOLIDATION_FAILURES = 3
_CACHED_SNAPSHOTS = 4096


@dataclass(frozen=True)
class MemoryWrite:
    """One write that reached the files (what ``on_memory_write`` will be told)."""

    payload: dict[str, Any]  # {action, target, content, old_text} or {action: batch, ...}
    origin: str  # tool | client | approval
    session_id: str
    by_uid: int | None
    task_id: str = ""  # the tool call's, for the provider's metadata
    tool_call_id: str = ""


class BuiltinMemory:
    """The built-in memory of one daemon."""

    def __init__(
        self,
        home: Path,
        store: SessionStore,
        config: Any,
        *,
        attached: dict[str, set[Connection]],
        may_answer: Callable[[int | None], bool],
        redact_text: Callable[[str], str],
    ) -> None:
        """``attached`` is the session service's table (who to announce writes to)."""
        self.files = MemoryFiles(home)
        self.pending = PendingWrites(home)
        self.store = store
        self.attached = attached
        self.may_answer = may_answer
        self.redact_text = redact_text
        #: called on the event loop after every write that reached the files; must not block
        self.write_listeners: list[Callable[[MemoryWrite], None]] = []
        self._snapshots: OrderedDict[str, str] = OrderedDict()
        self._approving = threading.Lock()  # one approval applied at a time
        self._failures: dict[str, int] = {}  # consolidation failures in a session's turn
        self.slash = SlashMemory(self)
        self.reload(config)

    def reload(self, cfg: Any) -> None:
        """Take ``memory.*`` from the configuration (limits apply to the next write)."""
        self.memory_enabled = bool(cfg.get("memory.memory_enabled", True))
        self.user_enabled = bool(cfg.get("memory.user_profile_enabled", True))
        self.write_approval = bool(cfg.get("memory.write_approval", False))
        self.files.limits = Limits(
            memory=int(cfg.get("memory.memory_char_limit", 2200)),
            user=int(cfg.get("memory.user_char_limit", 1375)),
        )

    def available(self) -> bool:
        """Whether the tool is offered: at least one of the two stores is switched on."""
        return self.memory_enabled or self.user_enabled

    def describe(self, target: str) -> dict[str, Any]:
        """A file as a person sees it (blocking: on a worker thread)."""
        raw = self.files.read_raw(target)
        entries = self.files.entries(target)
        enabled = self.memory_enabled if target == "memory" else self.user_enabled
        return {
            "target": target,
            "path": str(self.files.path(target)),
            "entries": entries,
            "usage": edits.usage(self.files, target, entries),
            "limit": self.files.limits.of(target),
            "enabled": enabled,
            "digest": edits.digest(raw),
        }

    async def set_entries(
        self, target: str, entries: list[str], base: str | None, uid: int | None
    ) -> dict[str, Any]:
        """A person's rewrite of a whole file (redacted), refused if it changed since ``base``
        or if an entry it adds is refused by the injection scan. Providers hear of it as the
        removes and adds it amounts to."""

        def run() -> tuple[edits.Edit, list[str], list[str]]:
            clean = [self.redact_text(e) for e in entries]
            before = self.files.entries(target)
            new = [e for e in (x.strip() for x in clean) if e]
            for entry in new:
                message = None if entry in before else threats.write_error(entry)
                if message:
                    return edits.Edit({"success": False, "error": message}), clean, before
            return edits.replace_all(self.files, target, clean, base), clean, before

        edit, clean, before = await asyncio.to_thread(run)
        if edit.written:
            after = [e for e in (x.strip() for x in clean) if e]
            operations = [{"action": "remove", "old_text": e} for e in before if e not in after]
            operations += [{"action": "add", "content": e} for e in after if e not in before]
            payload = {
                "action": "set",
                "target": target,
                "entries": clean,
                "operations": operations,
            }
            self._written(MemoryWrite(payload, "client", "", uid), edit.result)
        return edit.result

    # --- the frozen snapshot -------------------------------------------------------------

    async def prompt_block(self, session_id: str, *, fresh: bool = False) -> str:
        """The memory text of the session's system prompt.

        Taken from the files when the session starts (``fresh``: its first turn, also after a
        reset) or when it has none kept (an older session, a fork), then kept in state.db and
        reused, so writes made meanwhile show in the next session, not in this one.
        """
        self._failures.pop(session_id, None)  # called once as each turn starts: a new budget
        if not self.available():
            return ""
        stored = None if fresh else self._snapshots.get(session_id)
        if stored is None and not fresh:
            stored = await self.store.run(self.store.memory.snapshot, session_id)
        if stored is None:
            stored = await asyncio.to_thread(snapshot.take, self.files)
            await self.store.run(self.store.memory.keep_snapshot, session_id, stored)
        self._snapshots[session_id] = stored
        self._snapshots.move_to_end(session_id)
        while len(self._snapshots) > _CACHED_SNAPSHOTS:
            self._snapshots.popitem(last=False)
        # (providers: their system_prompt_block() text will be joined after these blocks)
        return snapshot.compose(
            stored, memory_enabled=self.memory_enabled, user_enabled=self.user_enabled
        )

    def forget_session(self, session_id: str) -> None:
        self._snapshots.pop(session_id, None)

    # --- writes ----------------------------------------------------------------------------

    async def tool_call(
        self,
        args: dict[str, Any],
        *,
        session_id: str = "",
        task_id: str = "",
        tool_call_id: str = "",
    ) -> dict[str, Any]:
        """The ``memory`` tool: the result the model gets, as a dict (``task_id`` and
        ``tool_call_id`` go to the memory provider with the write)."""
        if not self.available():
            return tool_error(UNAVAILABLE)
        call = read_call(args)
        if isinstance(call, dict):
            return call
        if call.missing_old_text:
            return await asyncio.to_thread(
                edits.missing_old_text, self.files, call.target, call.action
            )
        refused = await asyncio.to_thread(threats.payload_error, call.payload())
        if refused is not None:  # before staging: a person is never asked about one
            return refused
        # redaction scans the text: off the loop too, content may be long
        payload = await asyncio.to_thread(self.redacted, call.payload())
        if self.write_approval:
            record = await asyncio.to_thread(self.pending.stage, payload, session_id)
            self._announce("memory.staged", payload, "tool", session_id, None, record=record)
            return {
                "success": True,
                "staged": True,
                "pending_id": record["id"],
                "message": STAGED_MESSAGE,
            }
        return await self._write(payload, "tool", session_id, None, (task_id, tool_call_id))

    async def person_write(self, args: dict[str, Any], uid: int | None) -> dict[str, Any]:
        """A person's add/replace/remove/batch: never staged (they are the approval)."""
        call = read_call(args)
        if isinstance(call, dict):
            return call
        if call.missing_old_text:
            return await asyncio.to_thread(
                edits.missing_old_text, self.files, call.target, call.action
            )
        refused = await asyncio.to_thread(threats.payload_error, call.payload())
        if refused is not None:
            return refused
        payload = await asyncio.to_thread(self.redacted, call.payload())
        return await self._write(payload, "client", "", uid)

    async def _write(
        self,
        payload: dict[str, Any],
        origin: str,
        session_id: str,
        uid: int | None,
        call_ids: tuple[str, str] = ("", ""),
    ) -> dict[str, Any]:
        edit = await asyncio.to_thread(self.apply, payload)
        if edit.written:
            self._written(MemoryWrite(payload, origin, session_id, uid, *call_ids), edit.result)
        return self._budgeted(session_id, edit) if origin == "tool" else edit.result

    def _budgeted(self, session_id: str, edit: edits.Edit) -> dict[str, Any]:
        """The model's result, or, past the per-turn budget of failed attempts, a final
        "stop retrying" so that a memory side effect cannot eat the turn (as the reference)."""
        if edit.result.get("success"):
            self._failures.pop(session_id, None)
            return edit.result
        if not edit.consolidation_failure:
            return edit.result
        count = self._failures[session_id] = self._failures.get(session_id, 0) + 1
        if count <= MAX_CONSOLIDATION_FAILURES:
            return edit.result
        return {
            "success": False,
            "done": True,
            "error": (
                f"Memory consolidation failed {count} times "
                "this turn. Stop retrying memory calls — leave memory unchanged for "
                "now and continue with your reply to the user. The fact can be saved "
                "in a later turn."
            ),
        }

    def apply(self, payload: dict[str, Any]) -> edits.Edit:
        """Carry out a write described by a payload (blocking: on a worker thread)."""
        action, target = payload.get("action"), payload.get("target", "memory")
        if target not in TARGETS:
            return edits.Edit(tool_error(f"Invalid target '{target}'. Use 'memory' or 'user'."))
        content = str(payload.get("content") or "")
        old_text = str(payload.get("old_text") or "")
        if action == "batch":
            return edits.apply_batch(self.files, target, list(payload.get("operations") or []))
        if action == "add":
            return edits.add(self.files, target, content)
        if action == "replace":
            return edits.replace(self.files, target, old_text, content)
        if action == "remove":
            return edits.remove(self.files, target, old_text)
        return edits.Edit({"success": False, "error": f"Unknown staged action '{action}'."})

    def redacted(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The payload with secrets in what it writes replaced, as in tool output (blocking)."""
        out = dict(payload)
        if isinstance(out.get("content"), str):
            out["content"] = self.redact_text(out["content"])
        if isinstance(out.get("operations"), list):
            out["operations"] = [
                {**op, "content": self.redact_text(op["content"])}
                if isinstance(op, dict) and isinstance(op.get("content"), str)
                else op
                for op in out["operations"]
            ]
        return out

    def _written(self, write: MemoryWrite, result: dict[str, Any]) -> None:
        self._announce(
            "memory.written",
            write.payload,
            write.origin,
            write.session_id,
            write.by_uid,
            result=result,
        )
        for listener in list(self.write_listeners):  # (providers: on_memory_write)
            try:
                listener(write)
            except Exception:
                log.exception("a memory write listener failed")

    # --- approvals of staged writes --------------------------------------------------------

    async def approve(self, pending_id: str, uid: int | None) -> dict[str, Any] | None:
        """Apply a staged write; None when there is no such staged write. Kept when it fails."""

        def run() -> tuple[dict[str, Any] | None, edits.Edit | None]:
            with self._approving:
                record = self.pending.get(pending_id)
                if record is None:
                    return None, None
                # a staged file may come from another program: checked and redacted here too
                refused = threats.payload_error(record["payload"])
                if refused is not None:
                    return record, edits.Edit(refused)
                edit = self.apply(self.redacted(record["payload"]))
                if edit.result.get("success"):
                    self.pending.discard(pending_id)
                return record, edit

        record, edit = await asyncio.to_thread(run)
        if record is None or edit is None:
            return None
        if edit.written:
            write = MemoryWrite(record["payload"], "approval", record.get("session_id", ""), uid)
            self._written(write, edit.result)
        return {"id": pending_id, "applied": bool(edit.result.get("success")), **edit.result}

    async def reject(self, pending_id: str, uid: int | None) -> bool:
        """Drop a staged write; False when there is no such staged write."""

        def run() -> dict[str, Any] | None:
            with self._approving:
                record = self.pending.get(pending_id)
                return record if record is not None and self.pending.discard(pending_id) else None

        record = await asyncio.to_thread(run)
        if record is None:
            return False
        self._announce("memory.rejected", record["payload"], "approval", "", uid, record=record)
        return True

    # --- announcements ---------------------------------------------------------------------

    def _announce(
        self,
        kind: str,
        payload: dict[str, Any],
        origin: str,
        session_id: str,
        uid: int | None,
        *,
        result: dict[str, Any] | None = None,
        record: dict[str, Any] | None = None,
    ) -> None:
        """Tell every client attached to a session (and the caller) about a memory change."""
        event: dict[str, Any] = {
            "type": kind,
            "target": payload.get("target", "memory"),
            "action": payload.get("action"),
            "origin": origin,
            "session_id": session_id,
            "by_uid": uid,
        }
        if result is not None:
            event["usage"] = result.get("usage")
            event["entry_count"] = result.get("entry_count")
        if record is not None:
            event["pending_id"] = record["id"]
            event["summary"] = self.redact_text(str(record.get("summary") or ""))
        data = wire.pack_notification(EVENT, [event])
        for conn in _recipients(self.attached.values(), connection_of(current_caller.get())):
            conn.send_soon(data)
        log.info(
            "memory %s: %s %s (%s%s)",
            kind.removeprefix("memory."),
            event["action"],
            event["target"],
            origin,
            f", session {session_id}" if session_id else "",
        )


def _recipients(attached: Iterable[set[Connection]], caller: Connection | None) -> list[Connection]:
    conns: dict[Connection, None] = {}
    for group in attached:
        conns.update(dict.fromkeys(group))
    if caller is not None:
        conns[caller] = None
    return [c for c in conns if c.is_open]
