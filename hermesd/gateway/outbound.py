"""Sending an answer: split at the platform's length, ``MEDIA:/path`` lines sent as files.

An answer (or a delivery) may name files to send with it on lines of their own,
``MEDIA:/path/to/file`` (the reference's directive); images go as photos, anything else as a
document, after the text. Files that do not exist are reported, not sent.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from hermesd.gateway.base import PlatformAdapter
from hermesd.gateway.split import MAX_LENGTH, split_message, utf16_len

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".webp")


def take_media(text: str) -> tuple[str, list[str]]:
    """``text`` without its ``MEDIA:`` lines, and the paths they named."""
    kept: list[str] = []
    media: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("MEDIA:") and len(stripped) > 6:
            media.append(stripped[6:].strip().strip("`'\""))
        else:
            kept.append(line)
    return "\n".join(kept).strip(), media


async def send_text(
    adapter: PlatformAdapter, chat_id: str, text: str, metadata: dict[str, Any] | None = None
) -> str | None:
    """Send ``text`` (split, media as files) to ``chat_id``; a problem, or None."""
    body, media = take_media(text)
    name = adapter.platform.value
    limit = min(adapter.MAX_MESSAGE_LENGTH, MAX_LENGTH.get(name, adapter.MAX_MESSAGE_LENGTH))
    measure = utf16_len if name == "telegram" else len
    problems: list[str] = []
    for piece in split_message(adapter.format_message(body), limit, measure) if body else []:
        sent = await adapter.send(chat_id, piece, metadata=metadata)
        if not sent.success:
            problems.append(f"{name}:{chat_id}: {sent.error or 'not sent'}")
            break
    for path in media:
        if not await asyncio.to_thread(os.path.isfile, path):
            problems.append(f"{path}: no such file")
            continue
        send = (
            adapter.send_image_file
            if path.lower().endswith(IMAGE_EXTENSIONS)
            else adapter.send_document
        )
        sent = await send(chat_id, path, None, metadata)
        if not sent.success:
            problems.append(f"{path}: {sent.error or 'not sent'}")
    if problems:
        log.warning("gateway: sending to %s:%s: %s", name, chat_id, "; ".join(problems))
    return "; ".join(problems) or None
