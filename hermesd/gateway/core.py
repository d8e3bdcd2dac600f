"""`Gateway`: messages from chat platforms become turns, answers go back to the chat.

For each message an adapter hands over (`dispatch`): ``pre_gateway_dispatch`` (a plugin may
skip or rewrite it), admission (`hermesd.gateway.users`: an allowed user, or a pairing code),
``post_gateway_admission`` (a plugin may handle it), then a slash command (``command.run``:
built-in and plugin commands, ``/new``/``/reset`` rotating the chat's session, ``/approve`` and
``/deny``) or a turn (``session.send``) in the session of the chat's key
(`hermesd.gateway.sessions`), with the typing indicator on while it runs. Every call goes
through the chat user's `ChatLink`, as their identity. One turn per chat at a time: a message
arriving meanwhile waits its turn. `deliver` sends a text (cron results, ``send_message``) to a
``platform:chat_id[:thread_id]`` target, split at the platform's length, ``MEDIA:/path`` lines
sent as files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd import untrusted
from hermesd.caller import OWNER
from hermesd.gateway.base import MessageEvent, Platform, PlatformAdapter, SessionSource
from hermesd.gateway.chat import ChatLink
from hermesd.gateway.event_hooks import GatewayHooks, cut
from hermesd.gateway.outbound import send_text
from hermesd.gateway.platforms import Platforms
from hermesd.gateway.sessions import ChatSessions, session_key
from hermesd.gateway.users import ChatIdentity, ChatUsers
from hermesd.gateway.voice import Transcriber, is_voice
from hermesd.http.tokens import Identity
from hermesd.plugins import hostapi
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.runtime.hooks import HookBus

if TYPE_CHECKING:
    from hermesd.http.door import Door

log = logging.getLogger(__name__)

TYPING_EVERY = 4.0  # seconds: Telegram shows "typing" for about five
MAX_IMAGES = 4
_SESSION_GONE = (Codes.NOT_FOUND,)


class Gateway:
    """Adapters, chats and their sessions, on the daemon's loop."""

    def __init__(self, home: Path, hooks: HookBus, platforms: Platforms) -> None:
        self.hooks = hooks
        self.platforms = platforms
        self.users = ChatUsers(home / "gateway" / "paired.json")
        self.sessions = ChatSessions(home / "gateway" / "sessions.json")
        self.event_hooks = GatewayHooks(home / "hooks")
        self.media_dir = home / "gateway" / "media"  # files people sent, by platform
        self.door: Door | None = None  # set by the service when it binds to the router
        self.transcriber: Transcriber | None = None  # voice notes to text (stt.*)
        self.origins: dict[str, SessionSource] = {}  # session id -> the chat of its last turn
        self.chats: dict[tuple[str, int, str], ChatLink] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.group_per_user = True
        self.thread_per_user = False
        self.unauthorized_dm = "pair"
        self.busy_mode = "interrupt"  # display.busy_input_mode
        self._interrupted: set[str] = set()  # sessions whose turn a newer message cancelled

    @property
    def adapters(self) -> dict[Platform, PlatformAdapter]:
        """The running adapters by platform (the reference's ``GatewayRunner.adapters``)."""
        return {Platform(name): a for name, a in self.platforms.adapters.items()}

    def reload(self, cfg: Any) -> None:
        """Take ``gateway.*`` (the platforms' own settings are read at start)."""
        self.group_per_user = bool(cfg.get("gateway.group_sessions_per_user"))
        self.thread_per_user = bool(cfg.get("gateway.thread_sessions_per_user"))
        self.unauthorized_dm = str(cfg.get("gateway.unauthorized_dm_behavior"))
        self.busy_mode = str(cfg.get("display.busy_input_mode"))

    # --- one message ----------------------------------------------------------------------

    async def dispatch(self, adapter: PlatformAdapter, event: MessageEvent) -> str | None:
        """Handle one message from ``adapter``; the text to send back, if any."""
        source = event.source
        if not event.internal:
            for result in await self.hooks.invoke(
                "pre_gateway_dispatch", event=event, gateway=self, session_store=self.sessions
            ):
                action = result.get("action") if isinstance(result, dict) else None
                if action == "skip":
                    log.info("gateway: pre_gateway_dispatch skipped a message: %s", result)
                    return None
                if action == "rewrite" and isinstance(result.get("text"), str):
                    event.text = result["text"]
                    break
                if action == "allow":
                    break
        identity = self.users.identity(source.platform.value, source.user_id)
        if identity is None:
            return self._stranger(source)
        key = session_key(source, self.group_per_user, self.thread_per_user)
        handled = await self._admitted(event, key)
        if handled is not None:
            return handled or None
        chat = self._chat(adapter, source, key, identity)
        try:
            if event.media_urls:  # a voice note is its words from here on (even an answer)
                await self._hear(chat, event)
            if event.is_command():
                return await self._command(chat, key, event)
            if (question := chat.open_question()) is not None:
                return await self._answer_question(chat, key, question, event.text)
            lock = self._locks.setdefault(key, asyncio.Lock())
            if lock.locked() and self.busy_mode == "interrupt":
                await self._interrupt(chat, key)
            async with lock:
                return await self._converse(chat, key, event)
        except RpcError as exc:
            return exc.message
        except Exception as exc:  # the traceback to the log, a sentence to the chat
            log.exception("gateway: a message from %s failed", source.platform.value)
            return f"Sorry, that failed ({type(exc).__name__}); the daemon's log has details."

    def _stranger(self, source: SessionSource) -> str | None:
        log.warning(
            "gateway: %s user %s (%s) is not allowed",
            source.platform.value,
            source.user_id,
            source.user_name,
        )
        if source.chat_type != "dm" or self.unauthorized_dm != "pair" or not source.user_id:
            return None
        code = self.users.request_code(
            source.platform.value, source.user_id, source.user_name or ""
        )
        if code is None:
            return None
        return (
            "I don't know you yet.\n\n"
            f"Your pairing code: {code}\n\n"
            "Ask the owner of this agent to run:\n"
            f"hermesctl gateway pair {code}"
        )

    async def _admitted(self, event: MessageEvent, key: str) -> str | None:
        """``post_gateway_admission``: a plugin's reply ("" for none) when it handled it."""
        if event.internal or not self.hooks.has("post_gateway_admission"):
            return None
        source = event.source
        for result in await self.hooks.invoke(
            "post_gateway_admission",
            session_key=key,
            platform=source.platform.value,
            source=source.to_dict(),
            message_id=event.message_id,
            text=event.text or "",
        ):
            if isinstance(result, dict) and result.get("action") == "handled":
                reply = result.get("reply")
                return reply if isinstance(reply, str) else ""
        return None

    def _chat(
        self, adapter: PlatformAdapter, source: SessionSource, key: str, who: ChatIdentity
    ) -> ChatLink:
        index = (key, who.uid, who.trust)
        chat = self.chats.get(index)
        if chat is not None and not chat.link.closed:
            chat.source = source
            return chat
        if self.door is None:
            raise RpcError(Codes.INTERNAL, "the gateway is not connected to the daemon yet")
        link = self.door.open(Identity(who.uid, who.trust, who.name), f"gateway:{adapter.name}")
        chat = ChatLink(link, adapter, source, who)
        chat.start()
        self.chats[index] = chat
        return chat

    async def _session(self, chat: ChatLink, key: str, fresh: bool = False) -> str:
        sid = None if fresh else self.sessions.get(key)
        if sid is None:
            source = chat.source
            title = f"{source.platform.value} {source.chat_name or source.chat_id}"
            created = await chat.link.call(
                "session.create", {"platform": source.platform.value, "title": title[:100]}
            )
            sid = str(created["id"])
            await self.sessions.set(key, sid)
            await self.event_hooks.emit("session:start", {**_context(source), "session_id": sid})
        return sid

    async def _interrupt(self, chat: ChatLink, key: str) -> None:
        """A message came while the chat's turn runs (``display.busy_input_mode:
        interrupt``): cancel that turn; the new message runs once it has stopped, and the
        stopped one sends nothing."""
        sid = self.sessions.get(key)
        if not sid:
            return
        self._interrupted.add(sid)
        try:
            await chat.link.call("session.cancel", {"session_id": sid})
        except RpcError as exc:  # it ended meanwhile: nothing to stop
            log.debug("gateway: interrupting session %s: %s", sid, exc.message)

    async def _converse(self, chat: ChatLink, key: str, event: MessageEvent) -> str | None:
        text, images = await _with_media(event)
        if chat.identity.trust != OWNER:  # someone the owner let in, not the owner
            source = chat.source
            text = untrusted.mark(text, f"{source.platform.value}:{source.user_id}")
        sid = self.sessions.get(key) or ""
        context = {**_context(chat.source), "session_id": sid, "message": cut(event.text)}
        await self.event_hooks.emit("agent:start", context)
        typing = asyncio.get_running_loop().create_task(self._typing(chat))
        # the turn's HERMES_SESSION_* values (plugins read them): the handler's task and the
        # turn's copy this task's context
        token = hostapi.session_vars.set(_session_vars(chat.source, key, event))
        try:
            params = {"message": text, "wait": True, "platform": chat.source.platform.value}
            if images:
                params["images"] = images
            sid, result = await self._send(chat, key, params)
        finally:
            hostapi.session_vars.reset(token)
            typing.cancel()
        context["session_id"] = sid
        self.origins[sid] = chat.source
        answer = result.get("final_text")
        interrupted = sid in self._interrupted
        self._interrupted.discard(sid)
        if result.get("status") == "cancelled" and interrupted:
            answer = None  # a newer message of the chat took its place
        elif result.get("status") != "completed" and not answer:
            answer = f"The turn {result.get('status')}: {result.get('error') or 'no answer'}"
        await self.event_hooks.emit("agent:end", {**context, "response": cut(answer)})
        if answer:
            await send_text(chat.adapter, chat.source.chat_id, str(answer), chat.metadata)
        return None

    async def _hear(self, chat: ChatLink, event: MessageEvent) -> None:
        """Put the message's voice notes, transcribed, into its text and drop them from its
        attachments (each transcript echoed to the chat first when ``stt.echo_transcripts``)."""
        if self.transcriber is None:
            return
        event.text, heard = await self.transcriber.enrich(event)
        kept = [i for i in range(len(event.media_urls)) if not is_voice(event, i)]
        event.media_urls = [event.media_urls[i] for i in kept]
        event.media_types = [event.media_types[i] for i in kept if i < len(event.media_types)]
        if heard and self.transcriber.echoes():
            for transcript in heard:
                await chat.adapter.send(
                    chat.source.chat_id, f'🎙️ "{transcript}"', metadata=chat.metadata
                )

    async def _send(
        self, chat: ChatLink, key: str, params: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """``session.send`` in the key's session: a new one when it was deleted; for a
        member, one of their own beside it when it is not theirs (a thread shared with the
        owner)."""
        sid = await self._session(chat, key)
        for attempt in range(3):
            try:
                return sid, await chat.link.call("session.send", {"session_id": sid, **params})
            except RpcError as exc:
                if exc.code not in _SESSION_GONE or attempt == 2:
                    raise
            mine = f":{chat.source.user_id}"
            if chat.identity.trust != OWNER and not key.endswith(mine):
                key += mine
                sid = await self._session(chat, key)
            else:
                sid = await self._session(chat, key, fresh=True)
        raise AssertionError("unreachable")

    async def _typing(self, chat: ChatLink) -> None:
        with contextlib.suppress(Exception):
            while True:
                await chat.adapter.send_typing(chat.source.chat_id, chat.metadata)
                await asyncio.sleep(TYPING_EVERY)

    async def _command(self, chat: ChatLink, key: str, event: MessageEvent) -> str | None:
        name = event.get_command() or ""
        args = event.get_command_args()
        sid = self.sessions.get(key)
        if name in ("new", "reset"):
            sid = sid or await self._session(chat, key)
        result = await chat.link.call(
            "command.run", {"line": f"/{name} {args}".strip(), "session_id": sid or ""}
        )
        session = result.get("session")
        context = {**_context(chat.source), "session_id": sid, "command": name, "args": args}
        if result.get("action") == "session" and isinstance(session, dict):
            await self.sessions.set(key, str(session["id"]))
            if name in ("new", "reset"):
                await self.event_hooks.emit(
                    "session:reset", {**context, "session_id": session["id"]}
                )
        await self.event_hooks.emit(f"command:{name}", context)
        return str(result.get("output") or "") or None

    async def _answer_question(
        self, chat: ChatLink, key: str, question: str, text: str
    ) -> str | None:
        sid = self.sessions.get(key) or ""
        answer: dict[str, Any] = {"session_id": sid, "id": question}
        if text.strip().isdigit():
            answer["choice"] = int(text.strip())
        else:
            answer["response"] = text
        result = await chat.link.call("clarify.respond", answer)
        await chat.answered(question, f"Answered: {result.get('response')}")
        return None

    # --- buttons ----------------------------------------------------------------------------

    async def press(self, adapter: PlatformAdapter, source: SessionSource, data: str) -> str:
        """A button pressed in a chat: answer the approval or question it belongs to."""
        identity = self.users.identity(source.platform.value, source.user_id)
        if identity is None:
            return "You are not allowed to answer here."
        kind, _, rest = data.partition(":")
        question, _, value = rest.rpartition(":")
        key = session_key(source, self.group_per_user, self.thread_per_user)
        chat = self._chat(adapter, source, key, identity)
        try:
            if kind == "apr":
                result = await chat.link.call(
                    "approvals.respond", {"id": question, "choice": value}
                )
                await chat.answered(question, f"Approval: {result['choice']}")
                return f"Approval: {result['choice']}"
            if kind == "clq":
                sid = self.sessions.get(key) or ""
                result = await chat.link.call(
                    "clarify.respond", {"session_id": sid, "id": question, "choice": int(value)}
                )
                await chat.answered(question, f"Answered: {result['response']}")
                return "Answered"
        except RpcError as exc:
            return exc.message
        except ValueError:
            pass
        return "This button is no longer valid."

    async def offer_commands(self) -> None:
        """List the slash commands in each connected platform's menu (``set_commands``)."""
        adapters = [a for a in self.platforms.adapters.values() if a.is_connected]
        if not adapters or self.door is None:
            return
        owner = Identity(os.geteuid(), OWNER, "gateway")
        listed = await self.door.call(owner, "commands.list")
        menu = [(c["name"], str(c.get("description") or "")) for c in listed["commands"]]
        for adapter in adapters:
            try:
                await adapter.set_commands(menu)
            except Exception as exc:
                log.warning("gateway: %s: the command menu was not set: %s", adapter.name, exc)

    # --- delivery ---------------------------------------------------------------------------

    async def deliver(self, target: str, text: str) -> str | None:
        """Send ``text`` to ``platform:chat_id[:thread_id]``; a problem, or None when sent."""
        name, _, rest = target.partition(":")
        adapter = self.platforms.adapters.get(name)
        if adapter is None:
            return f"no messaging platform '{name}' is running ({self.platforms.state_of(name)})"
        chat_id, thread = _chat_and_thread(rest)
        chat_id = chat_id or self.platforms.home_channel(name)
        if not chat_id:
            return f"'{target}' names no chat and {name} has no home_channel"
        metadata = {"thread_id": thread} if thread else None
        return await send_text(adapter, chat_id, text, metadata)


async def _with_media(event: MessageEvent) -> tuple[str, list[bytes]]:
    """The message's text (voice notes transcribed already), and its images (sent to the model
    as images); other files are named in the text by their path."""
    lines: list[str] = [event.text]
    images: list[bytes] = []
    for path, kind in zip(event.media_urls, event.media_types, strict=False):
        if kind.startswith("image/") and len(images) < MAX_IMAGES:
            images.append(await asyncio.to_thread(Path(path).read_bytes))
        else:
            lines.append(f"[attached file: {path}]")
    return "\n".join(lines).strip() or "(an image)", images


def _chat_and_thread(rest: str) -> tuple[str, str]:
    """``-100123:42`` → (chat, thread) for numeric chat ids (Telegram topics, Discord
    threads); ``!room:server.org:$root`` → a Matrix room and its thread's root event (event
    ids start with ``$``); anything else (``!room:server.org``) is a chat id whole."""
    room, matrix_thread, root = rest.partition(":$")
    if matrix_thread:
        return room, f"${root}"
    chat, _, thread = rest.rpartition(":")
    if chat and thread.isdigit() and chat.lstrip("-").isdigit():
        return chat, thread
    return rest, ""


def _context(source: SessionSource) -> dict[str, Any]:
    """What gateway event hooks get about a chat (the reference's keys)."""
    return {
        "platform": source.platform.value,
        "user_id": source.user_id or "",
        "chat_id": source.chat_id,
        "thread_id": source.thread_id or "",
        "chat_type": source.chat_type,
    }


def _session_vars(source: SessionSource, key: str, event: MessageEvent) -> dict[str, str]:
    """The ``HERMES_SESSION_*`` values of a chat's turn (the reference's names)."""
    values = {
        "PLATFORM": source.platform.value,
        "SOURCE": source.platform.value,
        "CHAT_ID": source.chat_id,
        "CHAT_NAME": source.chat_name or "",
        "CHAT_TYPE": source.chat_type,
        "USER_ID": source.user_id or "",
        "USER_NAME": source.user_name or "",
        "THREAD_ID": source.thread_id or "",
        "MESSAGE_ID": event.message_id or source.message_id or "",
        "KEY": key,
    }
    return {f"HERMES_SESSION_{k}": v for k, v in values.items()}
