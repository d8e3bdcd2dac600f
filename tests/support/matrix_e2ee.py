"""A phone that encrypts: matrix-nio's AsyncClient with end-to-end encryption, for the tests.

The plain client in tests/support/synapse.py cannot read or write an encrypted room. This one
logs in as a registered user with its own key store, runs its event loop on a thread of its
own, and offers the same blocking calls a test uses (create a room, send, wait for a message),
decrypting what arrives and encrypting what it sends (devices trusted on first use, as the
adapter does).
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from nio import AsyncClient, AsyncClientConfig, RoomMessageText, SyncResponse

from tests.support.daemon import short_tmpdir
from tests.support.synapse import Homeserver, MatrixUser

_ENCRYPTED = {
    "type": "m.room.encryption",
    "state_key": "",
    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
}


class EncryptedPhone:
    """``user``'s encrypting client; close it when done."""

    def __init__(self, server: Homeserver, user: MatrixUser) -> None:
        self.user = user
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        config = AsyncClientConfig(encryption_enabled=True, store_sync_tokens=False)
        store = str(short_tmpdir("mxe-"))
        self.client = AsyncClient(server.url, user.user_id, store_path=store, config=config)
        self.texts: list[tuple[str, str, str]] = []  # (room, sender, body), decrypted
        self._run(self._login())

    def _run(self, coro: Coroutine[Any, Any, Any], timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _login(self) -> None:
        reply = await self.client.login(self.user.password, device_name="phone")
        assert self.client.olm is not None, f"no encryption on the phone: {reply}"
        await self._sync(0)

    async def _sync(self, timeout_ms: int) -> None:
        first = self.client.next_batch is None
        reply = await self.client.sync(timeout=timeout_ms, full_state=first)
        if self.client.should_upload_keys:
            await self.client.keys_upload()
        if self.client.should_query_keys:
            await self.client.keys_query()
        if self.client.should_claim_keys:
            await self.client.keys_claim(self.client.get_users_for_key_claiming())
        if isinstance(reply, SyncResponse):
            for room_id, room in reply.rooms.join.items():
                for event in room.timeline.events:
                    if isinstance(event, RoomMessageText):
                        self.texts.append((room_id, event.sender, event.body))

    def create_encrypted_room(self, invite: list[str]) -> str:
        """An encrypted private room with ``invite`` invited; its id."""

        async def create() -> str:
            reply = await self.client.room_create(invite=invite, initial_state=[_ENCRYPTED])
            await self._sync(0)
            return str(reply.room_id)

        return str(self._run(create()))

    def send(self, room_id: str, text: str) -> None:
        """Send ``text`` encrypted to every device in the room."""

        async def send() -> None:
            await self._sync(0)  # know the room's members and their devices first
            content = {"msgtype": "m.text", "body": text}
            await self.client.room_send(
                room_id, "m.room.message", content, ignore_unverified_devices=True
            )

        self._run(send())

    def send_file(self, room_id: str, data: bytes, mime: str, name: str) -> None:
        """Upload ``data`` encrypted and post it as an image (the key inside the event)."""

        async def send() -> None:
            await self._sync(0)
            uploaded, keys = await self.client.upload(
                io.BytesIO(data), content_type=mime, filename=name, encrypt=True, filesize=len(data)
            )
            content = {
                "msgtype": "m.image",
                "body": name,
                "file": {"url": uploaded.content_uri, **keys},
                "info": {"mimetype": mime, "size": len(data)},
            }
            await self.client.room_send(
                room_id, "m.room.message", content, ignore_unverified_devices=True
            )

        self._run(send())

    def wait_for(
        self, room_id: str, match: Callable[[str, str], bool], timeout: float = 30.0
    ) -> str:
        """The body of the first decrypted message in ``room_id`` that ``match(sender, body)``."""
        deadline = time.monotonic() + timeout
        while True:
            for i, (rid, sender, body) in enumerate(self.texts):
                if rid == room_id and match(sender, body):
                    del self.texts[: i + 1]
                    return body
            if time.monotonic() > deadline:
                raise AssertionError(f"no matching message in {room_id}: {self.texts}")
            self._run(self._sync(1000))

    def close(self) -> None:
        self._run(self.client.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
