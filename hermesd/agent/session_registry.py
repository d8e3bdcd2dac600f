"""`SessionRegistry`: the live state of sessions, whoever asks for them.

Owns attachment (which connections receive a session's ``session.event`` notifications), the
one-turn-per-session rule (a turn waits for, or is refused beside, the one running), turn
tasks that outlive the connection that started them, the events of a turn (sent to every
attached connection, kept for clients that re-attach), messages plugins inject, notices that
wake a session (a background process's: `wake`) and the listeners of a conversation moving to
another session. It answers no RPC: that is
`hermesd.agent.session_service.SessionService`, built on it; storage is
``store.SessionStore``'s job and the turn itself ``agent.AgentLoop``'s.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import pwd
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hermesd.agent.event_log import EventLog
from hermesd.agent.loop import AgentLoop, Toolsets, TurnResult, new_id
from hermesd.model.client import ModelError
from hermesd.model.fastjson import valid_text
from hermesd.rpc import wire
from hermesd.rpc.connection import Connection
from hermesd.runtime.hooks import HookBus
from hermesd.runtime.session import current_session
from hermesd.store.dbfile import StoreError
from hermesd.store.facade import SessionStore
from hermesd.store.images import Image

if TYPE_CHECKING:
    from hermesd.context.host import ContextHost
    from hermesd.model.fallback import EndpointSpec

log = logging.getLogger(__name__)

EVENT = "session.event"
MAX_WAKES = 20  # notices waiting for one busy session; older ones are dropped beyond it


class SessionRegistry:
    """Attachments, running turns and events of every session; one per daemon."""

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
        self._wakes: dict[str, list[tuple[str, str, Callable[[], bool] | None]]] = {}
        self._wakes_dropped: dict[str, int] = {}
        self._warm_up: asyncio.Task[None] | None = None
        self._owners: dict[str, int | None] = {}  # owner uid of sessions looked up: never changes
        self.on_attach = on_attach
        self.redact_event = redact_event
        self.on_forget = on_forget
        self.on_switch = on_switch
        self.events = EventLog()
        # sid -> a listener of that session's events besides its clients (a delegating parent)
        self.watchers: dict[str, Callable[[dict[str, Any]], None]] = {}
        #: called with every event as sent (the HTTP door's metrics); each must be cheap
        self.observers: list[Callable[[dict[str, Any]], None]] = []
        self.narrowing: dict[str, Toolsets | None] = {}  # the running turns' toolsets

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

        loop.call_soon_threadsafe(self.deliver, sid, content, role)
        return True

    def deliver(self, sid: str, content: str, role: str = "user") -> None:
        """On the loop: a message for ``sid`` no client sent (a plugin's, a background
        delegation's result). An idle session starts a turn on a user message; a busy one
        gets it stored once its turn ends."""
        if sid not in self.turns and role == "user" and self._can_start(sid):
            # idle: the message starts a turn, as the reference's CLI does
            self._start_turn(sid, content, None)
            return
        self._injections.setdefault(sid, []).append((role, content))
        if sid not in self.turns and self._loop is not None:
            self._loop.create_task(self._flush_injections(sid))

    def wake(
        self, sid: str, text: str, sender_id: str, wanted: Callable[[], bool] | None = None
    ) -> None:
        """On the loop: a notice for ``sid`` from something the session started (a background
        process, ``sender_id`` ``process:<id>``; a background delegation, ``delegation``).
        An idle session starts a turn on it; a busy one when its running turn ends (notices
        that waited together share one turn). One
        whose ``wanted()`` is false by then is dropped; after a cancelled turn, or with no
        model configured, the notices are stored as messages instead of starting a turn. At
        most `MAX_WAKES` wait; past that the oldest are dropped (the turn is told how many)."""
        waiting = self._wakes.setdefault(sid, [])
        waiting.append((text, sender_id, wanted))
        if len(waiting) > MAX_WAKES:
            del waiting[0]
            self._wakes_dropped[sid] = self._wakes_dropped.get(sid, 0) + 1
        if sid not in self.turns:
            self._wake_next(sid, start=True)

    def _wake_next(self, sid: str, start: bool) -> None:
        waiting = [w for w in self._wakes.pop(sid, []) if w[2] is None or w[2]()]
        if not waiting:
            return
        text = "\n\n".join(w[0] for w in waiting)
        if dropped := self._wakes_dropped.pop(sid, 0):
            text = f"[{dropped} earlier notices were dropped while the session was busy.]\n\n{text}"
        senders = {w[1] for w in waiting}
        if start and self._can_start(sid):
            self.touched.add(sid)
            sender = senders.pop() if len(senders) == 1 else "notices"
            self._start_turn(sid, text, None, sender_id=sender)
            return
        self._injections.setdefault(sid, []).append(("user", text))
        if self._loop is not None:
            self._loop.create_task(self._flush_injections(sid))

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
        if self.watchers and (watcher := self.watchers.get(event["session_id"])) is not None:
            watcher(event)
        for observe in self.observers:
            observe(event)
        conns = self.attached.get(event["session_id"])
        if not conns:
            return
        data = wire.pack_notification(EVENT, [event])
        for conn in conns:
            conn.send_soon(data)

    def announce(self, kind: str, sid: str) -> None:
        """Tell the observers (not the clients: it is no turn's event) that session ``sid``
        was ``session.created``, ``session.renamed`` or ``session.deleted``."""
        for observe in self.observers:
            observe({"type": kind, "session_id": sid})

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

    # --- turns no client sent (hermesd.cron) ------------------------------------------------

    async def create_session(self, **fields: Any) -> dict[str, Any]:
        """A new session made by the daemon itself (a scheduled run's); counted in status."""
        session: dict[str, Any] = dict(await self.store.run(self.store.sessions.create, **fields))
        self._count += 1
        self.announce("session.created", session["id"])
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
        model: str | None = None,
        max_iterations: int | None = None,
        endpoint: EndpointSpec | None = None,
    ) -> TurnResult:
        """Run a turn in ``sid`` that no client sent, with its events going to every client
        attached to the session, as any turn's do. Waits while another turn runs there (the
        one-turn rule); ``started(turn_id)`` is called once it begins. ``model``,
        ``max_iterations`` and ``endpoint`` replace the daemon's for this turn (a delegated
        child's)."""
        while (running := self.turns.get(sid)) is not None:
            await asyncio.wait([running[1]])
        self.touched.add(sid)
        turn_id, task = self._start_turn(
            sid,
            message,
            None,
            platform,
            sender_id=sender_id,
            toolsets=toolsets,
            model=model,
            max_iterations=max_iterations,
            endpoint=endpoint,
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
        images: list[Image] | None = None,
        model: str | None = None,
        max_iterations: int | None = None,
        endpoint: EndpointSpec | None = None,
        system: str | None = None,
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
                images=images,
                model=model,
                max_iterations=max_iterations,
                endpoint=endpoint,
                system=system,
            )
        )
        self.turns[sid] = (turn_id, task)
        if toolsets is not None:
            self.narrowing[sid] = toolsets
        task.add_done_callback(functools.partial(self._turn_done, sid, turn_id))
        return turn_id, task

    def _turn_done(self, sid: str, turn_id: str, task: asyncio.Task[TurnResult]) -> None:
        current = self.turns.get(sid)
        if current is not None and current[0] == turn_id:
            del self.turns[sid]
            self.narrowing.pop(sid, None)
        if self._injections.get(sid) and self._loop is not None:
            self._loop.create_task(self._flush_injections(sid))
        if self._wakes.get(sid) and sid not in self.turns:
            self._wake_next(sid, start=not task.cancelled())
        if not task.cancelled() and task.exception() is not None:
            log.error("turn %s of session %s crashed", turn_id, sid, exc_info=task.exception())

    def switched(self, old: str, new: str, reason: str) -> None:
        """Report that the conversation of ``old`` goes on as ``new`` (``on_switch``); the
        plugins' system-prompt sections of ``old`` are rendered afresh (a rewind, a reset)."""
        self.agent.prompt_sections.forget(old)
        if self.on_switch is not None:
            try:
                self.on_switch(old, new, reason)
            except Exception:
                log.exception("a session switch listener failed (%s -> %s)", old, new)

    async def _cancel(self, sid: str) -> str | None:
        running = self.turns.get(sid)
        if running is None:
            return None
        turn_id, task = running
        task.cancel()
        await asyncio.wait([task], timeout=10)
        if self.hooks.has("agent_loop_stopped"):  # issue 32
            await self.hooks.invoke(
                "agent_loop_stopped",
                session_key=sid,
                platform=self.platform,
                reason="cancel",
                invalidation_reason=None,
            )
        return turn_id


def _user_name(uid: int) -> str | None:
    """The login name of ``uid`` (None when it has none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None
