"""Files between Matrix's media repository and the disk, for the Matrix adapter.

`upload` reads a local file and puts it in the homeserver's media repository (encrypted for an
encrypted room), returning the event content that shows it; `download` fetches what a person
posted (decrypted, from an encrypted room) for the adapter to keep (``cache_media``). Disk and
crypto work runs on a thread: the event loop does no file I/O.
"""

from __future__ import annotations

import asyncio
import io
import logging
import mimetypes
from pathlib import Path
from typing import Any

from nio import AsyncClient, RoomEncryptedMedia, RoomMessageMedia, UploadResponse
from nio.crypto import decrypt_attachment

log = logging.getLogger(__name__)

MAX_DOWNLOAD = 25 * 1024 * 1024  # bytes of one file a person posts that the agent takes


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
    client: AsyncClient, event: RoomMessageMedia | RoomEncryptedMedia
) -> tuple[bytes, str] | None:
    """The file of ``event`` (decrypted, from an encrypted room) and its MIME type, or None
    (also when it is, or says it is, larger than `MAX_DOWNLOAD`)."""
    info = event.source.get("content", {}).get("info") or {}
    mime = str(info.get("mimetype") or "application/octet-stream")
    size = info.get("size")
    if isinstance(size, int) and size > MAX_DOWNLOAD:
        log.warning(
            "matrix: %s is %d bytes (over %d): not downloaded", event.url, size, MAX_DOWNLOAD
        )
        return None
    got = await client.download(event.url)
    body = getattr(got, "body", None)
    if not isinstance(body, bytes):
        log.warning("matrix: downloading %s failed: %s", event.url, got)
        return None
    if len(body) > MAX_DOWNLOAD:  # the size in the event was missing or wrong
        log.warning("matrix: %s is over %d bytes: dropped", event.url, MAX_DOWNLOAD)
        return None
    if not isinstance(event, RoomEncryptedMedia):
        return body, mime
    try:
        keys = (event.key["k"], event.hashes["sha256"], event.iv)
        return await asyncio.to_thread(decrypt_attachment, body, *keys), mime
    except (KeyError, ValueError) as err:  # nio's EncryptionError is a ValueError
        log.warning("matrix: cannot decrypt %s: %s", event.url, err)
        return None
