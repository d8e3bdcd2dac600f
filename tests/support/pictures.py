"""Pictures for upload tests, made here: PNGs of random pixels, as large as asked."""

from __future__ import annotations

import os
import struct
import zlib


def noise_png(width: int, height: int) -> bytes:
    """A PNG of random pixels: it does not compress, so its size is about width × height × 3."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(tag + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    rows = b"".join(b"\x00" + os.urandom(width * 3) for _ in range(height))
    head = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", head)
        + chunk(b"IDAT", zlib.compress(rows, 1))
        + chunk(b"IEND", b"")
    )
