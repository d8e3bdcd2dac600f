"""Images attached to messages: what is accepted, how it is kept, how the model is sent it.

A client sends an image with ``session.send`` as raw bytes (``{"data": bytes}``, what hermesctl
sends for a file it read) or as a ``data:`` URL (``"data:image/png;base64,..."``, or
``{"url": ...}``). The type is sniffed from the bytes (PNG, JPEG, GIF, WebP: what vision models
take); a declared type is not trusted. A message holds at most `MAX_IMAGES` images and
`MAX_BYTES` of them together, so it and its images always fit one ``session.history`` answer.
They are kept as BLOBs in ``message_images`` (deleted with their message, copied by a fork),
never in the text that is searched. The model gets them as OpenAI ``image_url`` content parts;
clients get ``{mime, bytes, url}`` with a data URL.
"""

from __future__ import annotations

import base64
import binascii
import sqlite3
from dataclasses import dataclass
from typing import Any

MAX_IMAGES = 8
MAX_BYTES = 4 * 1024 * 1024  # all images of one message together
MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_NAMES = "PNG, JPEG, GIF or WebP"


class ImageError(ValueError):
    """An image that is refused; the text says which and why."""


@dataclass(frozen=True)
class Image:
    """One image: its sniffed type and its bytes."""

    mime: str
    data: bytes

    def data_url(self) -> str:
        """``data:<mime>;base64,...``."""
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    def part(self) -> dict[str, Any]:
        """The OpenAI content part the model is sent."""
        return {"type": "image_url", "image_url": {"url": self.data_url()}}

    def public(self) -> dict[str, Any]:
        """What a client is shown of it (``session.history``)."""
        return {"mime": self.mime, "bytes": len(self.data), "url": self.data_url()}

    def summary(self) -> dict[str, Any]:
        """Its type and size, without the bytes (events)."""
        return {"mime": self.mime, "bytes": len(self.data)}


def sniff(data: bytes) -> str | None:
    """The image type its first bytes say, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def checked(data: bytes, what: str, limit: int = MAX_BYTES) -> Image:
    """``data`` as an `Image`, its type sniffed; raises `ImageError` naming ``what``."""
    if not data:
        raise ImageError(f"{what} is empty")
    if len(data) > limit:
        raise ImageError(f"{what} is {len(data):,} bytes; the limit is {limit:,}")
    mime = sniff(data)
    if mime is None:
        raise ImageError(f"{what} is not a {_NAMES} image (its first bytes are {data[:8]!r})")
    return Image(mime, data)


def from_data_url(url: str, what: str, limit: int = MAX_BYTES) -> Image:
    """A ``data:...;base64,`` URL as an `Image` (the declared type is ignored)."""
    head, sep, body = url.partition(",")
    if not head.lower().startswith("data:") or not sep or not head.lower().endswith(";base64"):
        raise ImageError(f"{what} is not a base64 data: URL")
    if len(body) > (limit * 4) // 3 + 8:  # refused before decoding
        raise ImageError(f"{what} is over the limit of {limit:,} bytes")
    try:
        data = base64.b64decode(body.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ImageError(f"{what} is not valid base64") from None
    return checked(data, what, limit)


def _one(value: Any, what: str, limit: int) -> Image:
    if isinstance(value, (bytes, bytearray)):
        return checked(bytes(value), what, limit)
    if isinstance(value, str):
        return from_data_url(value, what, limit)
    if isinstance(value, dict):
        if isinstance(value.get("data"), (bytes, bytearray)):
            return checked(bytes(value["data"]), what, limit)
        url = value.get("url")
        nested = value.get("image_url")
        if url is None and isinstance(nested, dict):
            url = nested.get("url")
        if isinstance(url, str):
            return from_data_url(url, what, limit)
    raise ImageError(
        f"{what} must be bytes, a data: URL or {{data: bytes}} / {{url: data URL}}, "
        f"not {type(value).__name__}"
    )


def read_images(raw: Any) -> list[Image]:
    """The images of one message, checked (count, total size, type); raises `ImageError`."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ImageError(f"images must be a list, not {type(raw).__name__}")
    if len(raw) > MAX_IMAGES:
        raise ImageError(f"{len(raw)} images; a message may have {MAX_IMAGES}")
    images: list[Image] = []
    left = MAX_BYTES
    for n, value in enumerate(raw, 1):
        name = value.get("name") if isinstance(value, dict) else None
        what = f"image {n}" + (f" ({name})" if isinstance(name, str) and name else "")
        image = _one(value, what, left)
        images.append(image)
        left -= len(image.data)
    return images


def content(text: str, images: list[Image]) -> str | list[dict[str, Any]]:
    """A user message's content for the model: the text, with the images as parts."""
    if not images:
        return text
    return [{"type": "text", "text": text}, *(image.part() for image in images)]


# --- the table (the store's DB thread only) ----------------------------------------------------


def save(db: sqlite3.Connection, message_id: int, images: list[Image]) -> None:
    """Keep ``images`` for a message (inside the caller's transaction)."""
    db.executemany(
        "INSERT INTO message_images (message_id, n, mime, data) VALUES (?, ?, ?, ?)",
        [(message_id, n, image.mime, image.data) for n, image in enumerate(images)],
    )


def load(db: sqlite3.Connection, message_ids: list[int]) -> dict[int, list[Image]]:
    """The images of these messages, by message id."""
    found: dict[int, list[Image]] = {}
    for start in range(0, len(message_ids), 500):  # under SQLite's bound-variable limit
        chunk = message_ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for row in db.execute(
            f"SELECT message_id, mime, data FROM message_images WHERE message_id IN ({marks})"
            " ORDER BY message_id, n",
            chunk,
        ):
            found.setdefault(int(row[0]), []).append(Image(str(row[1]), bytes(row[2])))
    return found


def copy_for_fork(db: sqlite3.Connection, source: str, target: str) -> None:
    """A fork's copies of the images of the messages it copied (matched by seq)."""
    db.execute(
        "INSERT INTO message_images (message_id, n, mime, data)"
        " SELECT t.id, i.n, i.mime, i.data FROM message_images i"
        " JOIN messages s ON s.id = i.message_id AND s.session_id = ?"
        " JOIN messages t ON t.session_id = ? AND t.seq = s.seq",
        (source, target),
    )
