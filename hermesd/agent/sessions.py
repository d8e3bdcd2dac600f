"""The ``session.*`` methods: who is attached to which session, and the one running turn of each.

Owns attachment (which connections receive a session's ``session.event`` notifications), the
one-turn-per-session rule (a second ``session.send`` gets ``SessionBusy``; nothing is queued),
turn tasks that outlive the connection that started them, and session teardown hooks. Storage
is ``store.SessionStore``'s job and the turn itself is ``agent.AgentLoop``'s.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import pwd
import re
from collections.abc import Callable
from typing import Any

from hermesd.agent.loop import AgentLoop, TurnResult, new_id
from hermesd.model.client import ModelError
from hermesd.model.fastjson import valid_text
from hermesd.plugins.context import current_session
from hermesd.plugins.hooks import HookBus
from hermesd.rpc import wire
from hermesd.rpc.connection import Call, Connection, Router
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.store.sessions import (
    MessageNotFound,
    SessionNotFound,
    SessionStore,
    StorageUnavailable,
    StoreError,
)

log = logging.getLogger(__name__)

_PLATFORM = re.compile(r"[A-Za-z0-9_.-]{1,64}")

EVENT = "session.event"


def _not_found(exc: Exception) -> RpcError:
    if isinstance(exc, SessionNotFound):
        return RpcError(
            Codes.NOT_FOUND, f"no session '{exc.session_id}'", {"session_id": exc.session_id}
        )
    return RpcError(Codes.NOT_FOUND, str(exc))


class SessionService:
    """Sessions over RPC; one per daemon."""

    def __init__(
        self,
        store: SessionStore,
        agent: AgentLoop,
        hooks: HookBus,
        platform: str = "cli",
        *,
        attached: dict[str, set[Connection]] | None = None,
        on_attach: Callable[[str, Connection], None] | None = None,
        on_forget: Callable[[str], None] | None = None,
        redact_event: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        """``attached`` is shared with whoever must reach a session's clients (approvals);
        ``on_attach(session_id, conn)`` runs whenever a connection attaches, ``on_forget``
        with the id of a deleted session, ``redact_event`` on every event before it is sent."""
        self.store = store
        self.agent = agent
        self.hooks = hooks
        self.platform = platform
        self.attached: dict[str, set[Connection]] = {} if attached is None else attached
        self.turns: dict[str, tuple[str, asyncio.Task[TurnResult]]] = {}
        self.touched: set[str] = set()  # sessions used since start: finalized at stop
        self._count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._injections: dict[str, list[tuple[str, str]]] = {}
        self._warm_up: asyncio.Task[None] | None = None
        self.on_attach = on_attach
        self.redact_event = redact_event
        self.on_forget = on_forget

    # --- the service protocol ------------------------------------------------------------

    def bind(self, router: Router) -> None:
        for name in (
            "create",
            "list",
            "get",
            "history",
            "rename",
            "delete",
            "fork",
            "search",
            "reset",
            "attach",
            "detach",
            "send",
            "cancel",
        ):
            router.bind(f"session.{name}", getattr(self, f"rpc_{name}"))

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._count = await self.store.run(self.store.count_sessions)
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
        await self.agent.client.aclose()
        await self.store.aclose()

    def reload_settings(self, settings: Any, model_settings: Any) -> None:
        """Apply new agent and model settings to the turns that start from now on."""
        self.agent.settings = settings
        self.agent.client.settings = model_settings

    # --- ctx.inject_message ------------------------------------------------------------------

    def inject(self, content: str, role: str = "user") -> bool:
        """Append a message to the session the calling plugin code works for.

        Called from plugin threads. While a turn runs, the message waits until it ends, so
        it never lands between a tool call and its result.
        """
        sid = current_session.get()
        loop = self._loop
        if not sid or loop is None or role not in ("user", "assistant", "system"):
            return False
        if not isinstance(content, str) or not content:
            return False
        content = valid_text(content)  # half a surrogate pair could be neither stored nor sent

        def queue() -> None:
            if sid not in self.turns and role == "user" and self._can_start(sid):
                # idle: the message starts a turn, as the reference's CLI does
                self._start_turn(sid, content, None)
                return
            self._injections.setdefault(sid, []).append((role, content))
            if sid not in self.turns:
                loop.create_task(self._flush_injections(sid))

        loop.call_soon_threadsafe(queue)
        return True

    def _can_start(self, sid: str) -> bool:
        """Whether an injected message may start a turn of ``sid`` (a model is configured)."""
        try:
            self.agent.check_ready()
        except ModelError as exc:
            log.info("inject_message into %s stored without a turn: %s", sid, exc)
            return False
        return True

    async def _flush_injections(self, sid: str) -> None:
        for role, content in self._injections.pop(sid, []):
            try:
                record = await self.store.run(self.store.append_message, sid, role, content)
            except StoreError as exc:
                log.warning("inject_message into %s failed: %s", sid, exc)
                return
            self.emit(
                {
                    "type": "message",
                    "session_id": sid,
                    "turn_id": None,
                    "role": role,
                    "content": content,
                    "message_id": record["id"],
                    "injected": True,
                }
            )

    def status(self) -> dict[str, Any]:
        return {
            "sessions": self._count,
            "turns_running": len(self.turns),
            "model": self.agent.client.settings.model,
        }

    def reload(self, cfg: Any) -> None:
        """Config reload: ``model.*`` and ``agent.*`` apply to the turns that start from now on."""
        from hermesd.agent.loop import AgentSettings
        from hermesd.model.client import ModelSettings

        self.reload_settings(
            AgentSettings.from_config(cfg, skills_index=self.agent.settings.skills_index),
            ModelSettings.from_config(cfg),
        )

    def connection_closed(self, conn: Connection) -> None:
        """Forget a closed connection; its sessions' turns keep running."""
        for sid in list(self.attached):
            conns = self.attached[sid]
            conns.discard(conn)
            if not conns:
                del self.attached[sid]

    # --- events ------------------------------------------------------------------------------

    def emit(self, event: dict[str, Any]) -> None:
        """Send one turn event to every connection attached to its session.

        Encoded once for all of them; each connection sends it with whatever else it has to
        send in this round of the loop (``Connection.send_soon``: one write, order kept).
        """
        conns = self.attached.get(event["session_id"])
        if not conns:
            return
        if self.redact_event is not None:
            event = self.redact_event(event)
        data = wire.pack_notification(EVENT, [event])
        for conn in conns:
            conn.send_soon(data)

    def _attach(self, sid: str, conn: Connection) -> None:
        self.attached.setdefault(sid, set()).add(conn)
        if self.on_attach is not None:
            self.on_attach(sid, conn)

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

    def _live(self, session: dict[str, Any]) -> dict[str, Any]:
        turn = self.turns.get(session["id"])
        return {
            **session,
            "running": turn is not None,
            "turn_id": turn[0] if turn else None,
            "attached": len(self.attached.get(session["id"], ())),
        }

    # --- methods -----------------------------------------------------------------------------

    async def rpc_create(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        session = await self._db(
            self.store.create_session,
            title=p.get("title"),
            model=p.get("model"),
            platform=p.get("platform") or "cli",
        )
        self._count += 1
        if p.get("attach", True):
            self._attach(session["id"], call.conn)
        return self._live(session)

    async def rpc_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        page: dict[str, Any] = await self._db(
            self.store.list_sessions, p.get("limit") or 50, before=p.get("before")
        )
        page["sessions"] = [self._live(s) for s in page["sessions"]]
        return page

    async def rpc_get(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return self._live(await self._db(self.store.get_session, p["session_id"]))

    async def rpc_history(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        messages = await self._db(
            self.store.messages,
            p["session_id"],
            limit=p.get("limit"),
            after_seq=p.get("after_seq") or 0,
        )
        return {"messages": messages}

    async def rpc_rename(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return self._live(await self._db(self.store.rename, p["session_id"], p["title"]))

    async def rpc_delete(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        sid = p["session_id"]
        await self._db(self.store.get_session, sid)
        await self._cancel(sid)
        await self.hooks.invoke("on_session_finalize", session_id=sid, platform=self.platform)
        await self._db(self.store.delete, sid)
        self._count -= 1
        self.touched.discard(sid)
        if self.on_forget is not None:
            self.on_forget(sid)
        for conn in self.attached.pop(sid, set()):
            conn.notify(EVENT, [{"type": "session.deleted", "session_id": sid}])
        return {"deleted": True}

    async def rpc_fork(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        session = await self._db(
            self.store.fork, p["session_id"], p.get("upto_message_id"), title=p.get("title")
        )
        self._count += 1
        return self._live(session)

    async def rpc_search(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        hits = await self._db(
            self.store.search, p["query"], p.get("limit") or 20, session_id=p.get("session_id")
        )
        return {"hits": hits}

    async def rpc_reset(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        old = p.get("session_id")
        model = None
        if old:
            previous = await self._db(self.store.get_session, old)
            model = previous["model"]
            await self.hooks.invoke("on_session_reset", session_id=old, platform=self.platform)
            conns = self.attached.get(old)
            if conns:
                conns.discard(call.conn)
                if not conns:
                    del self.attached[old]
        session = await self._db(self.store.create_session, model=model, platform=self.platform)
        self._count += 1
        self._attach(session["id"], call.conn)
        return self._live(session)

    async def rpc_attach(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        session = await self._db(self.store.get_session, p["session_id"])
        self._attach(session["id"], call.conn)
        return self._live(session)

    def rpc_detach(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        conns = self.attached.get(p["session_id"])
        if not conns or call.conn not in conns:
            return {"detached": False}
        conns.discard(call.conn)
        if not conns:
            del self.attached[p["session_id"]]
        return {"detached": True}

    async def rpc_send(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        sid = p["session_id"]
        message = p["message"]
        if not message.strip():
            raise RpcError(Codes.INVALID_PARAMS, "session.send: message is empty")
        running = self.turns.get(sid)
        if running is not None:
            raise RpcError(
                Codes.SESSION_BUSY,
                f"session {sid} is already running turn {running[0]}; wait for it "
                "to finish or cancel it",
                {"turn_id": running[0]},
            )
        if sid not in self.touched:  # a session that ran a turn exists until it is deleted
            await self._db(self.store.get_session, sid)
        try:
            self.agent.check_ready()
        except ModelError as exc:
            raise RpcError(Codes.MODEL, str(exc)) from None
        self._attach(sid, call.conn)
        self.touched.add(sid)
        platform = p.get("platform")
        if platform is not None and not _PLATFORM.fullmatch(platform):
            raise RpcError(
                Codes.INVALID_PARAMS,
                "session.send: platform must be 1 to 64 letters, digits, '_', '-' or '.'",
            )
        turn_id, task = self._start_turn(sid, message, call.conn.peer.uid, platform)
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

    def _start_turn(
        self, sid: str, message: str, uid: int | None, platform: str | None = None
    ) -> tuple[str, asyncio.Task[TurnResult]]:
        """Run a turn of ``sid`` answering ``message``; ``uid`` is who asked (None: a plugin),
        ``platform`` what kind of client (default the daemon's, ``cli``)."""
        turn_id = new_id("turn")
        task = asyncio.get_running_loop().create_task(
            self.agent.run_turn(
                sid,
                message,
                emit=self.emit,
                platform=platform or self.platform,
                sender_id=None if uid is None else str(uid),
                user_name=None if uid is None else _user_name(uid),
                turn_id=turn_id,
            )
        )
        self.turns[sid] = (turn_id, task)
        task.add_done_callback(functools.partial(self._turn_done, sid, turn_id))
        return turn_id, task

    def _turn_done(self, sid: str, turn_id: str, task: asyncio.Task[TurnResult]) -> None:
        current = self.turns.get(sid)
        if current is not None and current[0] == turn_id:
            del self.turns[sid]
        if self._injections.get(sid) and self._loop is not None:
            self._loop.create_task(self._flush_injections(sid))
        if not task.cancelled() and task.exception() is not None:
            log.error("turn %s of session %s crashed", turn_id, sid, exc_info=task.exception())

    async def rpc_cancel(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self._db(self.store.get_session, p["session_id"])
        turn_id = await self._cancel(p["session_id"])
        return {"cancelled": turn_id is not None, "turn_id": turn_id}

    async def _cancel(self, sid: str) -> str | None:
        running = self.turns.get(sid)
        if running is None:
            return None
        turn_id, task = running
        task.cancel()
        await asyncio.wait([task], timeout=10)
        return turn_id


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
    }


def _user_name(uid: int) -> str | None:
    """The login name of ``uid`` (None when it has none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None
