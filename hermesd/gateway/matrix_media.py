"""Files between Matrix's media repository and the disk, for the Matrix adapter.

`upload` reads a local file and puts it in the homeserver's media repository (encrypted for an
encrypted room), returning the event content that shows it; `download` saves what a person
posted (decrypted, from an encrypted room) into the adapter's media directory for the agent.
Disk and crypto work runs on a thread: the event loop does no file I/O.
"""

from __future__ import annotations

import asyncio
import io
import logging
import mimetypes
import secrets
from pathlib import Path
from typing import Any

from nio import AsyncClient, RoomEncryptedMedia, RoomMessageMedia, UploadResponse
from nio.crypto import decrypt_attachment

log = logging.getLogger(__name__)


class UploadFailed(Exception):
    """A file could not be read or uploaded; the message says why."""


async def upload(client: AsyncClient, path: Path, msgtype: str, encrypt: bool) -> dict[str, Any]:
    """Upload ``path``; the ``m.room.message`` content that posts it (``m.image``/``m.file``)."""
    try:
        data = await asyncio.to_thread(path.read_bytes)
    except OSError as err:
        raise UploadFailed(f"cannot read {path.name}: {err.strerror}") from None
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    uploaded, keys = await client.upload(
        io.BytesIO(data), content_type=mime, filename=path.name, encrypt=encrypt, filesize=len(data)
    )
    if not isinstance(uploaded, UploadResponse):
        raise UploadFailed(f"matrix upload: {uploaded}")
    content: dict[str, Any] = {
        "msgtype": msgtype,
        "body": path.name,
        "info": {"mimetype": mime, "size": len(data)},
    }
    if keys:  # an encrypted room: the key travels in the (encrypted) event
        content["file"] = {"url": uploaded.content_uri, **keys}
    else:
        content["url"] = uploaded.content_uri
    return content


async def download(
    client: AsyncClient, event: RoomMessageMedia | RoomEncryptedMedia, media_dir: Path
) -> tuple[str, str] | None:
    """Save the file of ``event`` in ``media_dir`` (decrypted, from an encrypted room); (its
    path, its MIME type), or None."""
    info = event.source.get("content", {}).get("info") or {}
    mime = str(info.get("mimetype") or "application/octet-stream")
    got = await client.download(event.url)
    body = getattr(got, "body", None)
    if not isinstance(body, bytes):
        log.warning("matrix: downloading %s failed: %s", event.url, got)
        return None
    path = media_dir / f"matrix-{secrets.token_hex(8)}{mimetypes.guess_extension(mime) or ''}"

    def save() -> bool:
        data = body
        if isinstance(event, RoomEncryptedMedia):
            try:
                data = decrypt_attachment(body, event.key["k"], event.hashes["sha256"], event.iv)
            except (KeyError, ValueError) as err:  # nio's EncryptionError is a ValueError
                log.warning("matrix: cannot decrypt %s: %s", event.url, err)
                return False
        media_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.write_bytes(data)
        return True

    return (str(path), mime) if await asyncio.to_thread(save) else None
