"""`SessionService`: the ``session.*`` methods, the RPC face of the `SessionRegistry`.

Sessions have owners: a session records the uid of the peer that created it, and a peer that
is not the daemon's owner (a member of ``socket.group``) sees and touches only its own — another
user's session answers ``NotFound``, like one that does not exist. Every ``Access.SESSION``
method (``session.*``, ``tools.call``, ``command.run``, ``usage.get``) is checked by `guard`
before its handler runs (`hermesd.rpc.access`); the handlers here do not check again. A second
``session.send`` while a turn runs gets ``SessionBusy``; nothing is queued.
"""

from __future__ import annotations

import asyncio
import logging
import pwd
import re
import time
from typing import Any

from hermesd.agent.loop import TurnResult
from hermesd.agent.session_registry import EVENT, SessionRegistry
from hermesd.caller import Caller
from hermesd.model.client import ModelError
from hermesd.rpc.connection import Call, Connection, Router
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.store.dbfile import (
    MessageNotFound,
    SessionNotFound,
    StorageUnavailable,
    StoreError,
)
from hermesd.store.images import ImageError, read_images

log = logging.getLogger(__name__)

_PLATFORM = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _not_found(exc: Exception) -> RpcError:
    if isinstance(exc, SessionNotFound):
        return RpcError(
            Codes.NOT_FOUND, f"no session '{exc.session_id}'", {"session_id": exc.session_id}
        )
    return RpcError(Codes.NOT_FOUND, str(exc))


class SessionService(SessionRegistry):
    """Sessions over RPC; one per daemon."""

    # --- the service protocol ------------------------------------------------------------

    def bind(self, router: Router) -> None:
        for name in (
            "create",
            "list",
            "get",
            "history",
            "rename",
            "delete",
            "prune",
            "fork",
            "search",
            "reset",
            "attach",
            "detach",
            "send",
            "cancel",
            "undo",
            "compress",
        ):
            router.bind(f"session.{name}", getattr(self, f"rpc_{name}"))
        router.gate.sessions = self.guard  # every Access.SESSION method's check

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._count = await self.store.run(self.store.sessions.count)
        # Import the model SDK in the background now, not during the first turn (~0.5 s).
        self._warm_up = self._loop.create_task(self._warm_model_client())

    async def _warm_model_client(self) -> None:
        warm_up = getattr(self.agent.client, "warm_up", None)
        if warm_up is None:
            return
        try:
            await warm_up()
        except Exception:  # the first turn will report the problem properly
            log.warning("could not prepare the model client", exc_info=True)
            return

    async def stop(self) -> None:
        running = [task for _, task in self.turns.values()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=10)
        for sid in sorted(self.touched):
            await self.hooks.invoke("on_session_finalize", session_id=sid, platform=self.platform)
        if self.context is not None:  # on_session_end for every engine started
            await self.context.close()
        await self.agent.client.aclose()
        await self.store.aclose()

    def reload_settings(self, settings: Any, model_settings: Any) -> None:
        """Apply new agent and model settings to the turns that start from now on."""
        self.agent.settings = settings
        self.agent.client.settings = model_settings

    def status(self) -> dict[str, Any]:
        return {
            "sessions": self._count,
            "turns_running": len(self.turns),
            "model": self.agent.client.settings.model,
            "context_engine": self.context.settings.engine if self.context else None,
        }

    def reload(self, cfg: Any) -> None:
        """Config reload: ``model.*``, ``agent.*`` and ``sessions.*`` apply to the turns that
        start from now on."""
        from hermesd.agent.loop import AgentSettings
        from hermesd.model.client import ModelSettings

        self.reload_settings(
            AgentSettings.from_config(cfg, skills_index=self.agent.settings.skills_index),
            ModelSettings.from_config(cfg),
        )
        if self.context is not None:
            self.context.reload(cfg)
        self.store.messages.max_bytes = max(4096, int(cfg.get("sessions.max_message_bytes")))

    async def _db(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self.store.run(fn, *args, **kwargs)
        except (SessionNotFound, MessageNotFound) as exc:
            raise _not_found(exc) from None
        except ValueError as exc:
            raise RpcError(Codes.INVALID_PARAMS, str(exc)) from None
        except StorageUnavailable as exc:
            raise RpcError(Codes.STORAGE_UNAVAILABLE, str(exc), {"reason": exc.reason}) from None
        except StoreError as exc:
            raise RpcError(Codes.INTERNAL, f"session store: {exc}") from None

    async def guard(self, caller: Caller, p: dict[str, Any], key: str) -> None:
        """The access check of every ``Access.SESSION`` method (`hermesd.rpc.access`):
        resolve ``p[key]`` (`resolve`), then `check_access`."""
        await self.check_access(caller, await self.resolve(caller, p, key))

    async def check_access(self, caller: Caller, sid: str) -> None:
        """Raise ``NotFound`` unless ``caller`` may use session ``sid`` (it exists, and the
        caller is the daemon's owner or the session's)."""
        scope = caller.scope_uid
        if scope is None:
            return
        if sid not in self._owners:
            session = await self._db(self.store.sessions.get, sid)
            self._owners[sid] = session["owner_uid"]
        if self._owners[sid] != scope:
            log.info("%s asked for session %s of another user: not found", caller.describe(), sid)
            raise _not_found(SessionNotFound(sid))

    async def _session(self, sid: str) -> dict[str, Any]:
        """The stored session (``NotFound`` when there is none); access was checked before."""
        session: dict[str, Any] = await self._db(self.store.sessions.get, sid)
        self._owners[sid] = session["owner_uid"]
        return session

    async def resolve(self, caller: Caller, p: dict[str, Any], key: str = "session_id") -> str:
        """``p[key]`` as a full session id: a unique prefix stands for its session (like git
        and docker); an ambiguous one is an error listing the candidates. Only the sessions
        ``caller`` may use are candidates (sessions have owners). Returns the id."""
        sid = p.get(key)
        if not isinstance(sid, str) or not sid or sid in self.touched or sid in self.attached:
            return str(sid or "")
        matches = await self._db(
            self.store.sessions.ids_starting_with, sid, 11, owner_uid=caller.scope_uid
        )
        if len(matches) > 1 and sid not in matches:
            shown = ", ".join(matches[:10]) + (", …" if len(matches) > 10 else "")
            raise RpcError(
                Codes.INVALID_PARAMS,
                f"session id '{sid}' is ambiguous: it starts {shown}; type more of it",
                {"session_id": sid, "candidates": matches[:10]},
            )
        if len(matches) == 1:
            p[key] = sid = matches[0]
        return sid

    # --- methods -----------------------------------------------------------------------------

    def _check_model_choice(self, caller: Caller, model: str | None) -> None:
        """Which model the daemon's key pays for is the owner's choice (``/model`` too)."""
        if model and not caller.is_owner and model != self.agent.client.settings.model:
            raise RpcError(
                Codes.PERMISSION_DENIED,
                "only the daemon's owner may choose a session's model",
                {"peer_uid": caller.uid},
            )

    async def rpc_create(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        self._check_model_choice(call.caller, p.get("model"))
        history = _history(p.get("history") or [])
        session = await self._db(
            self.store.sessions.create,
            title=p.get("title"),
            model=p.get("model"),
            platform=p.get("platform") or "cli",
            owner_uid=call.caller.session_uid,
        )
        self._count += 1
        self.announce("session.created", session["id"])
        for role, content in history:  # a conversation carried over (the HTTP door's)
            await self._db(self.store.messages.append, session["id"], role, content)
        if p.get("attach", True):
            self._attach(session["id"], call.conn)
        return self._live(session)

    async def rpc_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        page: dict[str, Any] = await self._db(
            self.store.sessions.page,
            p.get("limit") or 50,
            before=p.get("before"),
            owner_uid=call.caller.scope_uid,
        )
        page["sessions"] = [self._live(s) for s in page["sessions"]]
        return page

    async def rpc_get(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return self._live(await self._session(p["session_id"]))

    async def rpc_history(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        messages, more = await self._db(  # bounded in bytes: one answer fits an RPC frame
            self.store.messages.page,
            p["session_id"],
            limit=p.get("limit"),
            after_seq=p.get("after_seq") or 0,
        )
        return {"messages": messages, "more": more}

    async def rpc_rename(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        session = await self._db(self.store.sessions.rename, p["session_id"], p["title"])
        self.announce("session.renamed", session["id"])
        return self._live(session)

    async def rpc_delete(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        sid = p["session_id"]
        await self._session(sid)
        await self._cancel(sid)
        await self._forget(sid)
        return {"deleted": True}

    async def rpc_prune(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        older, empty = p.get("older_than_s"), bool(p.get("empty"))
        if older is None and not empty:
            raise RpcError(Codes.INVALID_PARAMS, "say which sessions: older_than_s and/or empty")
        if older is not None and older < 0:
            raise RpcError(Codes.INVALID_PARAMS, "older_than_s must not be negative")
        cutoff = None if older is None else time.time() - float(older)
        found = await self._db(
            self.store.sessions.prunable,
            updated_before=cutoff,
            empty=empty,
            owner_uid=call.caller.scope_uid,
        )
        chosen = [sid for sid in found if sid not in self.turns]  # a running turn keeps it
        if not p.get("dry_run"):
            for sid in chosen:
                await self._forget(sid)
        return {"deleted": chosen, "dry_run": bool(p.get("dry_run"))}

    async def _forget(self, sid: str) -> None:
        """Delete a session (its turn already stopped) and tell whoever is attached."""
        await self.hooks.invoke("on_session_finalize", session_id=sid, platform=self.platform)
        await self._db(self.store.sessions.delete, sid)
        self._count -= 1
        self.announce("session.deleted", sid)
        self.touched.discard(sid)
        self._owners.pop(sid, None)
        self.events.forget(sid)
        if self.on_forget is not None:
            self.on_forget(sid)
        for conn in self.attached.pop(sid, set()):
            conn.attachments.discard(sid)
            conn.notify(EVENT, [{"type": "session.deleted", "session_id": sid}])

    async def rpc_fork(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        session = await self._db(
            self.store.sessions.fork,
            p["session_id"],
            p.get("upto_message_id"),
            title=p.get("title"),
        )
        self._count += 1
        self.announce("session.created", session["id"])
        self.switched(p["session_id"], session["id"], "branch")
        return self._live(session)

    async def rpc_search(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        hits = await self._db(
            self.store.search.find,
            p["query"],
            p.get("limit") or 20,
            session_id=p.get("session_id"),
            owner_uid=call.caller.scope_uid,
        )
        return {"hits": hits}

    async def rpc_reset(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        old = p.get("session_id")
        model = None
        if old:
            previous = await self._session(old)
            model = previous["model"]
            await self.hooks.invoke("on_session_reset", session_id=old, platform=self.platform)
            self._detach(old, call.conn)
        session = await self._db(
            self.store.sessions.create,
            model=model,
            platform=self.platform,
            owner_uid=call.caller.session_uid,
        )
        self._count += 1
        self.announce("session.created", session["id"])
        self._attach(session["id"], call.conn)
        if old:
            self.switched(old, session["id"], "new_session")
        return self._live(session)

    async def rpc_attach(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        session = await self._session(p["session_id"])
        sid = session["id"]
        others = [c for c in self.attached.get(sid, ()) if c is not call.conn and c.is_open]
        # No await from here on: the events replayed and the ones sent from now on meet
        # exactly, neither missing nor repeating one.
        self._attach(sid, call.conn)
        result = self._live(session)
        result["event_seq"] = self.events.last_seq(sid)
        result["clients"] = [_client_info(c) for c in others]
        after = p.get("after_seq")
        if after is not None:
            result["missed"], result["missed_complete"] = self.events.since(sid, int(after))
        return result

    async def rpc_detach(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        conns = self.attached.get(p["session_id"])
        if not conns or call.conn not in conns:
            return {"detached": False}
        self._detach(p["session_id"], call.conn)
        return {"detached": True}

    async def rpc_send(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        sid = p["session_id"]
        message = p["message"]
        try:
            attached = read_images(p.get("images"))
        except ImageError as exc:
            raise RpcError(Codes.INVALID_PARAMS, f"session.send: {exc}") from None
        if not message.strip() and not attached:
            raise RpcError(Codes.INVALID_PARAMS, "session.send: message is empty")
        if sid not in self.touched:  # a session that ran a turn exists until it is deleted
            await self._session(sid)
        running = self.turns.get(sid)
        if running is not None:
            raise RpcError(
                Codes.SESSION_BUSY,
                f"session {sid} is already running turn {running[0]}; wait for it "
                "to finish or cancel it",
                {"turn_id": running[0]},
            )
        try:
            self.agent.check_ready()
        except ModelError as exc:
            raise RpcError(Codes.MODEL, str(exc)) from None
        refused = await self.agent.meter.refusal(sid)  # budget.action: stop, a budget used up
        if refused is not None:
            raise RpcError(Codes.BUDGET_EXCEEDED, str(refused), refused.data())
        self._attach(sid, call.conn)
        self.touched.add(sid)
        platform = p.get("platform")
        if platform is not None and not _PLATFORM.fullmatch(platform):
            raise RpcError(
                Codes.INVALID_PARAMS,
                "session.send: platform must be 1 to 64 letters, digits, '_', '-' or '.'",
            )
        turn_id, task = self._start_turn(
            sid, message, call.caller.uid, platform, images=attached, system=p.get("system")
        )
        if not p.get("wait"):
            return {"turn_id": turn_id}
        try:
            return _result(await asyncio.shield(task))
        except asyncio.CancelledError:
            if task.cancelled():  # session.cancel stopped the turn, not our caller
                return {
                    "turn_id": turn_id,
                    "status": "cancelled",
                    "final_text": None,
                    "error": None,
                    "error_type": None,
                    "exit_reason": "cancelled",
                }
            raise

    async def rpc_undo(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        sid = p["session_id"]
        running = self.turns.get(sid)
        if running is not None:
            raise RpcError(
                Codes.SESSION_BUSY,
                f"session {sid} is running turn {running[0]}; cancel it before undoing",
                {"turn_id": running[0]},
            )
        undone = await self._db(self.store.messages.undo_last_turn, sid)
        if undone:
            self.switched(sid, sid, "rewind")
        first = undone[0] if undone else None
        return {
            "undone": [m["id"] for m in undone],
            "user_message": first["content"] if first else None,
            "user_images": [i["url"] for i in first["images"]] if first else [],
        }

    async def rpc_compress(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        """Compact the session now (``/compress``): the engine's ``compress(force=True)``."""
        sid = p["session_id"]
        session = await self._session(sid)
        context = self.context
        if context is None:
            raise RpcError(Codes.INTERNAL, "this daemon has no context engine")
        focus = p.get("focus")  # a str: the method's declaration is checked before this
        model = session["model"] or self.agent.client.settings.model or ""
        await context.open(sid, platform=session["platform"] or self.platform, model=model)
        self.touched.add(sid)
        result = await context.compact(sid, force=True, focus=focus or None, reason="manual")
        result["session_id"] = sid
        result["context"] = context.status(sid)
        return result

    async def rpc_cancel(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self._session(p["session_id"])
        turn_id = await self._cancel(p["session_id"])
        return {"cancelled": turn_id is not None, "turn_id": turn_id}


def _history(given: list[Any]) -> list[tuple[str, str]]:
    """``session.create``'s ``history`` as (role, content) pairs; anything else is refused."""
    out = []
    for i, m in enumerate(given):
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        if role not in ("user", "assistant") or not isinstance(content, str):
            raise RpcError(
                Codes.INVALID_PARAMS,
                f"session.create: history[{i}] must be {{role: user|assistant, content: str}}",
            )
        out.append((role, content))
    return out


def _client_info(conn: Connection) -> dict[str, Any]:
    """Who is behind a connection, for ``session.attach``'s ``clients``."""
    try:
        user = pwd.getpwuid(conn.peer.uid).pw_name
    except KeyError:
        user = str(conn.peer.uid)
    return {
        "connection": conn.id,
        "uid": conn.peer.uid,
        "user": user,
        "pid": conn.peer.pid,
        "client": conn.client_name or None,
    }


def _result(result: TurnResult) -> dict[str, Any]:
    return {
        "turn_id": result.turn_id,
        "status": result.status,
        "final_text": result.final_text,
        "error": result.error,
        "error_type": result.error_type,
        "exit_reason": result.exit_reason,
        "iterations": result.iterations,
        "usage": result.usage,
        "cost_usd": result.cost_usd,
    }
