"""The built-in Matrix adapter: a Matrix account the person talks to their agent through.

Built on matrix-nio's ``AsyncClient`` (client-server API over aiohttp). It logs in with an
access token (``token_file``) or a password, runs one ``/sync`` loop on the daemon's event
loop, turns room messages into `MessageEvent` values (a thread's root event id becomes the
``thread_id``), and sends answers as ``m.text`` with the markdown rendered to HTML
(``matrix_format``). Invites are joined when the inviter is admitted (the gateway's check), and
direct-chat invites from anyone so a stranger can ask for a pairing code. When the homeserver
goes away the loop retries with exponential backoff (``gateway status`` says disconnected, the
log why) until a sync succeeds again. With ``encryption`` it reads and answers end-to-end
encrypted rooms (keys in ``store_dir``, devices trusted on first use); without, encrypted
messages are logged and ignored (docs/gateway-matrix.md).

It owns the Matrix connection only: who may talk, sessions and turns are the gateway's.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import aiohttp
from nio import (
    AsyncClient,
    AsyncClientConfig,
    InviteMemberEvent,
    JoinError,
    LoginResponse,
    MegolmEvent,
    ReactionEvent,
    RoomEncryptedAudio,
    RoomEncryptedFile,
    RoomEncryptedImage,
    RoomEncryptedMedia,
    RoomMessageAudio,
    RoomMessageFile,
    RoomMessageImage,
    RoomMessageMedia,
    RoomMessageText,
    RoomSendResponse,
    SyncError,
    SyncResponse,
    WhoamiResponse,
)

from hermesd.gateway.base import (
    MessageEvent,
    MessageType,
    Platform,
    PlatformAdapter,
    PlatformConfig,
    SendResult,
    SessionSource,
)
from hermesd.gateway.matrix_format import (
    edit_content,
    mentions,
    relate,
    strip_mention,
    text_content,
)
from hermesd.gateway.matrix_media import UploadFailed, download, upload
from hermesd.gateway.matrix_settings import MatrixSettings

log = logging.getLogger(__name__)

_NETWORK_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
_SYNC_TIMEOUT_MS = 30_000
# a filter for the first sync: state and invites, but not the history before we started
_FIRST_SYNC = {"room": {"timeline": {"limit": 0}}}


class MatrixAdapter(PlatformAdapter):
    """One Matrix account, synced on the daemon's loop."""

    MAX_MESSAGE_LENGTH = 4000
    supports_code_blocks = True
    supported_actions = frozenset({"add_reaction"})

    def __init__(self, config: PlatformConfig, settings: MatrixSettings | None = None) -> None:
        super().__init__(config, Platform.MATRIX)
        self.settings = settings or MatrixSettings.from_config(config)
        self.client: AsyncClient | None = None
        self.state = "disconnected"
        self._sync_task: asyncio.Task[None] | None = None
        self._logged_in = False
        self._threads: set[str] = set()  # threads the agent has taken part in
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- connection ----------------------------------------------------------------------

    async def connect(self) -> bool:
        """Log in, take the first sync (joining pending invites) and start the sync loop."""
        s = self.settings
        # max_timeouts=0: a network error surfaces at once and the sync loop's backoff handles it
        config = AsyncClientConfig(
            max_timeouts=0, store_sync_tokens=False, encryption_enabled=s.encryption
        )
        store = ""
        if s.encryption and s.store_dir is not None:
            await asyncio.to_thread(s.store_dir.mkdir, mode=0o700, parents=True, exist_ok=True)
            store = str(s.store_dir)
        client = AsyncClient(
            s.homeserver, s.user_id, device_id=s.device_id or "", store_path=store, config=config
        )
        self.client = client
        try:
            first = await self._first_sync(client)
        except _NETWORK_ERRORS as err:
            # the homeserver may come later: the loop keeps trying
            self._note_down(f"cannot reach {s.homeserver}: {err}")
        except PermissionError as err:
            self._set_fatal_error("login", str(err))
            self.state = "failed"
            await client.close()
            return False
        else:
            self._mark_up()
            await self._handle_invites(first)
        self._sync_task = asyncio.create_task(self._sync_loop(), name="matrix-sync")
        self._sync_task.add_done_callback(self._sync_ended)
        return True

    def _sync_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._set_fatal_error("sync", repr(task.exception()))
            self.state = "failed"
            log.error("matrix: the sync loop stopped", exc_info=task.exception())

    async def _first_sync(self, client: AsyncClient) -> SyncResponse:
        """Log in and sync from now: state and invites, not the history before we started."""
        if not self._logged_in:
            await self._login(client)
            self._logged_in = True
        reply = await client.sync(timeout=0, sync_filter=_FIRST_SYNC, full_state=True)
        if not isinstance(reply, SyncResponse):
            raise PermissionError(f"the first sync was refused: {reply}")
        await self._keys(client)
        return reply

    async def _login(self, client: AsyncClient) -> None:
        s = self.settings
        if s.access_token:
            client.access_token = s.access_token
            who = await client.whoami()
            if not isinstance(who, WhoamiResponse):
                client.access_token = ""
                raise PermissionError(f"the access token was refused: {who}")
            # restore_login also opens the key store of that device (encryption)
            client.restore_login(who.user_id, who.device_id or s.device_id or "", s.access_token)
            return
        reply = await client.login(password=s.password or "", device_name="hermesd")
        if not isinstance(reply, LoginResponse):
            raise PermissionError(f"login as {s.user_id} failed: {reply}")

    async def _keys(self, client: AsyncClient) -> None:
        """Encryption's housekeeping after a sync: our keys up, others' keys known."""
        if not self.settings.encryption or client.olm is None:
            return
        if client.should_upload_keys:
            await client.keys_upload()
        if client.should_query_keys:
            await client.keys_query()
        if client.should_claim_keys:
            await client.keys_claim(client.get_users_for_key_claiming())

    async def disconnect(self) -> None:
        """Stop the sync loop and close the HTTP session."""
        task, self._sync_task = self._sync_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for pending in list(self._tasks):
            pending.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.client is not None:
            await self.client.close()
        self._mark_disconnected()
        self.state = "disconnected"

    def _mark_up(self) -> None:
        if self.state != "connected":
            log.info("matrix: connected as %s", self.client.user_id if self.client else "?")
        self.state = "connected"
        self._mark_connected()

    def _note_down(self, why: str) -> None:
        if self.state != "reconnecting":
            log.warning("matrix: %s; reconnecting with backoff", why)
        self.state = "reconnecting"
        self._mark_disconnected()

    async def _sync_loop(self) -> None:
        client = self.client
        assert client is not None
        delay = self.settings.backoff_initial
        while True:
            try:
                if client.next_batch is None:  # the first sync has not worked yet
                    await self._handle_invites(await self._first_sync(client))
                    reply = None
                else:
                    # after a failure a quick sync says at once that the homeserver is back
                    wait = _SYNC_TIMEOUT_MS if self.state == "connected" else 0
                    reply = await client.sync(timeout=wait, since=client.next_batch)
                    await self._keys(client)
            except _NETWORK_ERRORS as err:
                self._note_down(f"sync failed: {err or type(err).__name__}")
            except PermissionError as err:
                self._note_down(str(err))
            else:
                if reply is None or isinstance(reply, SyncResponse):
                    delay = self.settings.backoff_initial
                    self._mark_up()
                    if reply is not None:
                        await self._dispatch(reply)
                    continue
                if isinstance(reply, SyncError) and reply.status_code == "M_UNKNOWN_TOKEN":
                    self._set_fatal_error("login", f"the homeserver ended the session: {reply}")
                    self.state = "failed"
                    return
                self._note_down(f"sync refused: {reply}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.settings.backoff_max)

    # -- incoming -------------------------------------------------------------------------

    async def _dispatch(self, reply: SyncResponse) -> None:
        assert self.client is not None
        await self._handle_invites(reply)
        for room_id, room in reply.rooms.join.items():
            for event in room.timeline.events:
                if isinstance(event, RoomMessageText | RoomMessageMedia | RoomEncryptedMedia):
                    self._spawn(self._on_message(room_id, event))
                elif isinstance(event, ReactionEvent) and event.sender != self.client.user_id:
                    self._spawn(self._on_reaction(room_id, event))
                elif isinstance(event, MegolmEvent):
                    # encrypted and we hold no key for it (or encryption is off here)
                    log.warning(
                        "matrix: cannot decrypt %s in %s (encryption %s)",
                        event.event_id,
                        room_id,
                        "on" if self.settings.encryption else "off",
                    )

    async def _handle_invites(self, reply: SyncResponse) -> None:
        assert self.client is not None
        for room_id, info in reply.rooms.invite.items():
            invite = next(
                (
                    e
                    for e in info.invite_state
                    if isinstance(e, InviteMemberEvent) and e.state_key == self.client.user_id
                ),
                None,
            )
            if invite is None:
                continue
            if not self._accepts_invite(invite):
                log.warning("matrix: invite to %s from %s not accepted", room_id, invite.sender)
                continue
            joined = await self.client.join(room_id)
            if isinstance(joined, JoinError):
                log.warning("matrix: joining %s failed: %s", room_id, joined)
            else:
                log.info("matrix: joined %s (invited by %s)", room_id, invite.sender)

    def _accepts_invite(self, invite: InviteMemberEvent) -> bool:
        """Rooms from the allow-lists' users; a direct chat from anyone while strangers are
        offered pairing, the only thing the gateway answers someone not admitted
        (``gateway.unauthorized_dm_behavior: ignore`` joins none of theirs)."""
        if self._is_sender_authorized(invite.sender):
            return True
        return (
            bool(invite.content.get("is_direct"))
            and self.settings.direct_from_anyone
            and self._strangers_may_pair()
        )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("matrix: handling a message failed", exc_info=task.exception())

    async def _on_message(
        self, room_id: str, event: RoomMessageText | RoomMessageMedia | RoomEncryptedMedia
    ) -> None:
        assert self.client is not None
        if event.sender == self.client.user_id:
            return
        content = event.source.get("content", {})
        relation = content.get("m.relates_to") or {}
        if relation.get("rel_type") == "m.replace":
            return  # an edit of an earlier message: not a new message
        source = self._source(room_id, event.sender, relation, event.event_id)
        text = event.body if isinstance(event, RoomMessageText) else ""
        if source.chat_type == "group" and self.settings.require_mention:
            # in a room of several people, only what is addressed to the agent (the reference's
            # require_mention): a mention, a command, or a thread the agent is already in
            named = mentions(content, self.client.user_id)
            if not (named or text.startswith("/") or source.thread_id in self._threads):
                return
            text = strip_mention(text, self.client.user_id) if named else text
        if source.thread_id:
            self._threads.add(source.thread_id)
        event_out = MessageEvent(
            text=text,
            source=source,
            raw_message=event.source,
            message_id=event.event_id,
            reply_to_message_id=(relation.get("m.in_reply_to") or {}).get("event_id"),
        )
        if not isinstance(event, RoomMessageText):
            await self._attach_media(event, event_out)
        await self.handle_message(event_out)

    async def _on_reaction(self, room_id: str, event: ReactionEvent) -> None:
        """A reaction to a message: ``gateway_platform_event`` (the payload Telegram's has)."""
        payload = {
            "chat_id": room_id,
            "message_id": event.reacts_to,
            "user_id": event.sender,
            "new_reaction": [event.key],
            "old_reaction": [],
        }
        await self.platform_event("reaction", payload)

    def _source(
        self, room_id: str, sender: str, relation: dict[str, Any], event_id: str
    ) -> SessionSource:
        assert self.client is not None
        room = self.client.rooms.get(room_id)
        thread = relation.get("event_id") if relation.get("rel_type") == "m.thread" else None
        direct = room is not None and room.joined_count <= 2
        return SessionSource(
            platform=Platform.MATRIX,
            chat_id=room_id,
            chat_name=room.display_name if room else None,
            chat_type="dm" if direct else "group",
            user_id=sender,
            user_name=room.user_name(sender) if room else None,
            thread_id=thread,
            message_id=event_id,
        )

    async def _attach_media(
        self, event: RoomMessageMedia | RoomEncryptedMedia, out: MessageEvent
    ) -> None:
        """An image or file: kept in the gateway's media directory for the turn (images reach
        the model as images); its file name is the text unless a caption says more."""
        assert self.client is not None
        content = event.source.get("content", {})
        name = str(content.get("filename") or event.body or "file")
        if isinstance(event, RoomMessageImage | RoomEncryptedImage):
            out.message_type = MessageType.PHOTO
        elif isinstance(event, RoomMessageFile | RoomEncryptedFile):
            out.message_type = MessageType.DOCUMENT
        elif isinstance(event, RoomMessageAudio | RoomEncryptedAudio):
            # a recorded voice message carries the MSC3245 flag; other audio is a file
            voice = content.get("org.matrix.msc3245.voice") is not None
            out.message_type = MessageType.VOICE if voice else MessageType.AUDIO
            if not Path(name).suffix:
                name = ("voice" if voice else "audio") + ".ogg"
        caption = str(event.body or "")
        out.text = caption if content.get("filename") and caption != name else ""
        got = await download(self.client, event)
        if got is not None:
            out.media_urls.append(await self.cache_media(got[0], name))
            out.media_types.append(got[1])

    # -- outgoing -------------------------------------------------------------------------

    async def send(
        self,
        chat_id: str,
        content: str,
        reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SendResult:
        """Post ``content`` (markdown) to the room ``chat_id``."""
        if not content:
            return SendResult(True)
        return await self._send_event(chat_id, text_content(content), reply_to, metadata)

    async def _send_event(
        self,
        room_id: str,
        content: dict[str, Any],
        reply_to: str | None,
        metadata: dict[str, Any] | None,
        event_type: str = "m.room.message",
    ) -> SendResult:
        if self.client is None:
            return SendResult(False, error="matrix is not connected", retryable=True)
        relate(content, reply_to, (metadata or {}).get("thread_id"))
        try:
            # devices are trusted on first use: nobody verifies the bot's sessions interactively
            reply = await self.client.room_send(
                self._room_for(room_id),
                event_type,
                content,
                ignore_unverified_devices=True,
            )
        except _NETWORK_ERRORS as err:
            return SendResult(False, error=f"matrix: {err or type(err).__name__}", retryable=True)
        if isinstance(reply, RoomSendResponse):
            return SendResult(True, message_id=reply.event_id)
        return SendResult(False, error=f"matrix: {reply}")

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> SendResult:
        """Replace an earlier message's text (an ``m.replace`` edit; clients show the new one)."""
        edit = edit_content(message_id, content)
        return await self._send_event(chat_id, edit, None, None)

    async def add_reaction(self, chat_id: str, message_id: str, emoji: str) -> SendResult:
        """An ``m.reaction`` annotating ``message_id`` with ``emoji``."""
        relation = {"rel_type": "m.annotation", "event_id": message_id, "key": emoji}
        return await self._send_event(chat_id, {"m.relates_to": relation}, None, None, "m.reaction")

    def _room_for(self, chat_id: str) -> str:
        """A user id (``@name:server``, as a pairing notice is addressed) means the direct
        chat with that user: the joined room of two whose other member they are."""
        if not chat_id.startswith("@") or self.client is None:
            return chat_id
        for room_id, room in self.client.rooms.items():
            if room.joined_count == 2 and chat_id in room.users:
                return str(room_id)
        return chat_id

    async def send_typing(self, chat_id: str, metadata: dict[str, Any] | None = None) -> None:
        """Show “typing…” in the room for up to 30 seconds."""
        if self.client is not None:
            try:
                await self.client.room_typing(chat_id, True, timeout=30_000)
            except _NETWORK_ERRORS as err:
                log.debug("matrix: typing notice failed: %s", err)

    async def stop_typing(self, chat_id: str) -> None:
        """Clear the typing notice."""
        if self.client is not None:
            try:
                await self.client.room_typing(chat_id, False)
            except _NETWORK_ERRORS as err:
                log.debug("matrix: typing notice failed: %s", err)

    async def send_image_file(
        self,
        chat_id: str,
        image_path: str,
        caption: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SendResult:
        """Upload an image and post it (then the caption, if any)."""
        return await self._send_file(chat_id, image_path, "m.image", caption, metadata)

    async def send_document(
        self,
        chat_id: str,
        file_path: str,
        caption: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SendResult:
        """Upload a file and post it (then the caption, if any)."""
        return await self._send_file(chat_id, file_path, "m.file", caption, metadata)

    async def _send_file(
        self,
        room_id: str,
        path_text: str,
        msgtype: str,
        caption: str | None,
        metadata: dict[str, Any] | None,
    ) -> SendResult:
        if self.client is None:
            return SendResult(False, error="matrix is not connected", retryable=True)
        room = self.client.rooms.get(room_id)
        encrypt = bool(self.settings.encryption and room is not None and room.encrypted)
        try:
            content = await upload(self.client, Path(path_text), msgtype, encrypt)
        except UploadFailed as err:
            return SendResult(False, error=str(err))
        except _NETWORK_ERRORS as err:
            return SendResult(False, error=f"matrix: {err or type(err).__name__}", retryable=True)
        sent = await self._send_event(room_id, content, None, metadata)
        if sent.success and caption:
            return await self.send(room_id, caption, metadata=metadata)
        return sent

    async def get_chat_info(self, chat_id: str) -> dict[str, Any]:
        """The room's name and whether it is a direct chat (two members)."""
        room = self.client.rooms.get(chat_id) if self.client else None
        if room is None:
            return {"name": chat_id, "type": "group"}
        return {"name": room.display_name, "type": "dm" if room.joined_count <= 2 else "group"}


def create_adapter(config: PlatformConfig) -> MatrixAdapter:
    """The gateway's factory for ``gateway.platforms.matrix``."""
    return MatrixAdapter(config)


def check_requirements() -> bool:
    """matrix-nio is importable (this module imported it)."""
    return True


def validate_config(config: PlatformConfig) -> str | None:
    """What is missing from ``gateway.platforms.matrix``, or None."""
    try:
        MatrixSettings.from_config(config)
    except ValueError as exc:
        return str(exc)
    return None
