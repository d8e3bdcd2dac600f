"""The ``session.*`` methods: who is attached to which session, and the one running turn of each.

Owns attachment (which connections receive a session's ``session.event`` notifications), the
one-turn-per-session rule (a second ``session.send`` gets ``SessionBusy``; nothing is queued),
turn tasks that outlive the connection that started them, and session teardown hooks. Storage
is ``store.SessionStore``'s job and the turn itself is ``agent.AgentLoop``'s.

Sessions have owners: a session records the uid of the peer that created it, and a peer that
is not the daemon's owner (a member of ``socket.group``) sees and touches only its own — another
user's session answers ``NotFound``, like one that does not exist (`SessionService.check_access`,
which ``tools.call`` and ``command.run`` use too).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import pwd
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hermesd.agent.event_log import EventLog
from hermesd.agent.loop import AgentLoop, Toolsets, TurnResult, new_id
from hermesd.model.client import ModelError
from hermesd.model.fastjson import valid_text
from hermesd.rpc import wire
from hermesd.rpc.connection import Call, Connection, Router
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.runtime.hooks import HookBus
from hermesd.runtime.session import current_session
from hermesd.store.dbfile import MessageNotFound, SessionNotFound, StorageUnavailable, StoreError
from hermesd.store.facade import SessionStore

if TYPE_CHECKING:
    from hermesd.context.host import ContextHost

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
        on_switch: Callable[[str, str, str], None] | None = None,
    ) -> None:
        """``attached`` is shared with whoever must reach a session's clients (approvals);
        ``on_attach(session_id, conn)`` runs whenever a connection attaches, ``on_forget``
        with the id of a deleted session, ``redact_event`` on every event before it is sent,
        ``on_switch(old_id, new_id, reason)`` when a conversation moves on: ``new_session``
        (``session.reset``), ``resume`` (`switched`), ``rewind`` (``session.undo``, the same id
        twice) and ``branch`` (``session.fork``; the caller stays in the old one)."""
        self.store = store
        self.agent = agent
        # the sessions' context engines (hermesd.context.host)
        self.context: ContextHost | None = getattr(agent, "context", None)
        self.hooks = hooks
        self.platform = platform
        self.attached: dict[str, set[Connection]] = {} if attached is None else attached
        self.turns: dict[str, tuple[str, asyncio.Task[TurnResult]]] = {}
        self.touched: set[str] = set()  # sessions used since start: finalized at stop
        self._count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._injections: dict[str, list[tuple[str, str]]] = {}
        self._warm_up: asyncio.Task[None] | None = None
        self._owners: dict[str, int | None] = {}  # owner uid of sessions looked up: never changes
        self.on_attach = on_attach
        self.redact_event = redact_event
        self.on_forget = on_forget
        self.on_switch = on_switch
        self.events = EventLog()

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
            "undo",
            "compress",
        ):
            router.bind(f"session.{name}", getattr(self, f"rpc_{name}"))

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
                record = await self.store.run(self.store.messages.append, sid, role, content)
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

    def connection_closed(self, conn: Connection) -> None:
        """Forget a closed connection; its sessions' turns keep running."""
        for sid in list(conn.attachments):
            self._detach(sid, conn)

    def _detach(self, sid: str, conn: Connection) -> None:
        conn.attachments.discard(sid)
        conns = self.attached.get(sid)
        if conns is not None:
            conns.discard(conn)
            if not conns:
                del self.attached[sid]

    # --- events ------------------------------------------------------------------------------

    def emit(self, event: dict[str, Any]) -> None:
        """Send one turn event to every connection attached to its session.

        Encoded once for all of them; each connection sends it with whatever else it has to
        send in this round of the loop (``Connection.send_soon``: one write, order kept).
        """
        if self.redact_event is not None:
            event = self.redact_event(event)
        event = self.events.stamp(event)  # kept for re-attaching clients, attached or not
        conns = self.attached.get(event["session_id"])
        if not conns:
            return
        data = wire.pack_notification(EVENT, [event])
        for conn in conns:
            conn.send_soon(data)

    def broadcast(self, event: dict[str, Any], skip: str = "") -> None:
        """Send one event (a budget warning: not a turn's) to every attached client, through
        each session it is attached to but ``skip`` (whose turn sent it already)."""
        for sid in list(self.attached):
            if sid != skip:
                self.emit({**event, "session_id": sid})

    def _attach(self, sid: str, conn: Connection) -> None:
        self.attached.setdefault(sid, set()).add(conn)
        conn.attachments.add(sid)  # an attached connection waits for events: never idle
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

    async def check_access(self, conn: Connection, sid: str) -> None:
        """Raise ``NotFound`` unless ``conn`` may use session ``sid`` (it exists, and the peer
        is the daemon's owner or the session's)."""
        scope = conn.scope_uid
        if scope is None:
            return
        if sid not in self._owners:
            session = await self._db(self.store.sessions.get, sid)
            self._owners[sid] = session["owner_uid"]
        if self._owners[sid] != scope:
            log.info("uid %d asked for session %s of another user: not found", scope, sid)
            raise _not_found(SessionNotFound(sid))

    async def _owned(self, conn: Connection, sid: str) -> dict[str, Any]:
        """The session, when ``conn`` may use it (`check_access`)."""
        session: dict[str, Any] = await self._db(self.store.sessions.get, sid)
        self._owners[sid] = session["owner_uid"]
        await self.check_access(conn, sid)
        return session

    async def _resolve(self, conn: Connection, p: dict[str, Any], key: str = "session_id") -> str:
        """``p[key]`` as a full session id: a unique prefix stands for its session (like git
        and docker); an ambiguous one is an error listing the candidates. Only the sessions
        ``conn`` may use are candidates (sessions have owners). Returns the id."""
        sid = p.get(key)
        if not isinstance(sid, str) or not sid or sid in self.touched or sid in self.attached:
            return str(sid or "")
        matches = await self._db(
            self.store.sessions.ids_starting_with, sid, 11, owner_uid=conn.scope_uid
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

    def _live(self, session: dict[str, Any]) -> dict[str, Any]:
        turn = self.turns.get(session["id"])
        context = self.context
        return {
            **session,
            "running": turn is not None,
            "turn_id": turn[0] if turn else None,
            "attached": len(self.attached.get(session["id"], ())),
            "context": context.status(session["id"]) if context is not None else None,
        }

    # --- methods -----------------------------------------------------------------------------

    def _check_model_choice(self, conn: Connection, model: str | None) -> None:
        """Which model the daemon's key pays for is the owner's choice (``/model`` too)."""
        if model and conn.scope_uid is not None and model != self.agent.client.settings.model:
            raise RpcError(
                Codes.PERMISSION_DENIED,
                "only the daemon's owner may choose a session's model",
                {"peer_uid": conn.peer.uid},
            )

    async def rpc_create(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        self._check_model_choice(call.conn, p.get("model"))
        session = await self._db(
            self.store.sessions.create,
            title=p.get("title"),
            model=p.get("model"),
            platform=p.get("platform") or "cli",
            owner_uid=_owner_uid(call.conn),
        )
        self._count += 1
        if p.get("attach", True):
            self._attach(session["id"], call.conn)
        return self._live(session)

    async def rpc_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        page: dict[str, Any] = await self._db(
            self.store.sessions.page,
            p.get("limit") or 50,
            before=p.get("before"),
            owner_uid=call.conn.scope_uid,
        )
        page["sessions"] = [self._live(s) for s in page["sessions"]]
        return page

    async def rpc_get(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self._resolve(call.conn, p)
        return self._live(await self._owned(call.conn, p["session_id"]))

    async def rpc_history(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self._resolve(call.conn, p)
        await self.check_access(call.conn, p["session_id"])
        messages, more = await self._db(  # bounded in bytes: one answer fits an RPC frame
            self.store.messages.page,
            p["session_id"],
            limit=p.get("limit"),
            after_seq=p.get("after_seq") or 0,
        )
        return {"messages": messages, "more": more}

    async def rpc_rename(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self._resolve(call.conn, p)
        await self.check_access(call.conn, p["session_id"])
        return self._live(await self._db(self.store.sessions.rename, p["session_id"], p["title"]))

    async def rpc_delete(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self._resolve(call.conn, p)
        sid = p["session_id"]
        await self._owned(call.conn, sid)
        await self._cancel(sid)
        await self.hooks.invoke("on_session_finalize", session_id=sid, platform=self.platform)
        await self._db(self.store.sessions.delete, sid)
        self._count -= 1
        self.touched.discard(sid)
        self._owners.pop(sid, None)
        self.events.forget(sid)
        if self.on_forget is not None:
            self.on_forget(sid)
        for conn in self.attached.pop(sid, set()):
            conn.attachments.discard(sid)
            conn.notify(EVENT, [{"type": "session.deleted", "session_id": sid}])
        return {"deleted": True}

    async def rpc_fork(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self._resolve(call.conn, p)
        await self.check_access(call.conn, p["session_id"])
        session = await self._db(
            self.store.sessions.fork,
            p["session_id"],
            p.get("upto_message_id"),
            title=p.get("title"),
        )
        self._count += 1
        self.switched(p["session_id"], session["id"], "branch")
        return self._live(session)

    async def rpc_search(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("session_id"):
            await self._resolve(call.conn, p)
            await self.check_access(call.conn, p["session_id"])
        hits = await self._db(
            self.store.search.find,
            p["query"],
            p.get("limit") or 20,
            session_id=p.get("session_id"),
            owner_uid=call.conn.scope_uid,
        )
        return {"hits": hits}

    async def rpc_reset(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        old = await self._resolve(call.conn, p) if p.get("session_id") else None
        model = None
        if old:
            previous = await self._owned(call.conn, old)
            model = previous["model"]
            await self.hooks.invoke("on_session_reset", session_id=old, platform=self.platform)
            self._detach(old, call.conn)
        session = await self._db(
            self.store.sessions.create,
            model=model,
            platform=self.platform,
            owner_uid=_owner_uid(call.conn),
        )
        self._count += 1
        self._attach(session["id"], call.conn)
        if old:
            self.switched(old, session["id"], "new_session")
        return self._live(session)

    async def rpc_attach(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self._resolve(call.conn, p)
        session = await self._owned(call.conn, p["session_id"])
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
        await self._resolve(call.conn, p)
        conns = self.attached.get(p["session_id"])
        if not conns or call.conn not in conns:
            return {"detached": False}
        self._detach(p["session_id"], call.conn)
        return {"detached": True}

    async def rpc_send(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self._resolve(call.conn, p)
        sid = p["session_id"]
        message = p["message"]
        if not message.strip():
            raise RpcError(Codes.INVALID_PARAMS, "session.send: message is empty")
        if sid not in self.touched:  # a session that ran a turn exists until it is deleted
            await self._owned(call.conn, sid)
        else:
            await self.check_access(call.conn, sid)
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

    # --- turns no client sent (hermesd.cron) ------------------------------------------------

    async def create_session(self, **fields: Any) -> dict[str, Any]:
        """A new session made by the daemon itself (a scheduled run's); counted in status."""
        session: dict[str, Any] = dict(await self.store.run(self.store.sessions.create, **fields))
        self._count += 1
        return session

    async def run_unsent_turn(
        self,
        sid: str,
        message: str,
        *,
        platform: str,
        sender_id: str,
        toolsets: Toolsets | None = None,
        started: Callable[[str], None] | None = None,
    ) -> TurnResult:
        """Run a turn in ``sid`` that no client sent, with its events going to every client
        attached to the session, as any turn's do. Waits while another turn runs there (the
        one-turn rule); ``started(turn_id)`` is called once it begins."""
        while (running := self.turns.get(sid)) is not None:
            await asyncio.wait([running[1]])
        self.touched.add(sid)
        turn_id, task = self._start_turn(
            sid, message, None, platform, sender_id=sender_id, toolsets=toolsets
        )
        if started is not None:
            started(turn_id)
        return await asyncio.shield(task)

    def _start_turn(
        self,
        sid: str,
        message: str,
        uid: int | None,
        platform: str | None = None,
        *,
        sender_id: str | None = None,
        toolsets: Toolsets | None = None,
    ) -> tuple[str, asyncio.Task[TurnResult]]:
        """Run a turn of ``sid`` answering ``message``; ``uid`` is who asked (None: a plugin or
        the scheduler, whose ``sender_id`` says so), ``platform`` what kind of client (default
        the daemon's, ``cli``), ``toolsets`` what narrows the turn's tools."""
        turn_id = new_id("turn")
        task = asyncio.get_running_loop().create_task(
            self.agent.run_turn(
                sid,
                message,
                emit=self.emit,
                platform=platform or self.platform,
                sender_id=sender_id if uid is None else str(uid),
                user_name=None if uid is None else _user_name(uid),
                turn_id=turn_id,
                toolsets=toolsets,
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

    def switched(self, old: str, new: str, reason: str) -> None:
        """Report that the conversation of ``old`` goes on as ``new`` (``on_switch``)."""
        if self.on_switch is not None:
            try:
                self.on_switch(old, new, reason)
            except Exception:
                log.exception("a session switch listener failed (%s -> %s)", old, new)

    async def rpc_undo(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        sid = await self._resolve(call.conn, p)
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
        }

    async def rpc_compress(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        """Compact the session now (``/compress``): the engine's ``compress(force=True)``."""
        sid = await self._resolve(call.conn, p)
        session = await self._owned(call.conn, sid)
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
        await self._resolve(call.conn, p)
        await self._owned(call.conn, p["session_id"])
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


def _owner_uid(conn: Connection) -> int:
    """The uid a session created by ``conn`` belongs to (the one it is scoped to)."""
    scope = conn.scope_uid
    return conn.peer.uid if scope is None else scope


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


def _user_name(uid: int) -> str | None:
    """The login name of ``uid`` (None when it has none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None
