"""Helpers for tests of the HTTP door: a daemon with a listener and tokens, SSE reading."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx

from tests.support.daemon import short_tmpdir

OWNER_TOKEN = "owner-token-0123456789abcdef"
MEMBER_TOKEN = "member-token-0123456789abcdef"
MEMBER = "nobody"


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_config(port: int, base: str = "", http_extra: str = "") -> str:
    """config.yaml text: ``base`` plus a listener on ``port``, a token file and ``http_extra``
    (more lines of the ``http`` section)."""
    tokens = short_tmpdir("tk-") / "tokens"
    tokens.write_text(f"# the owner\n{OWNER_TOKEN}\n{MEMBER}:{MEMBER_TOKEN}\n")
    return f"{base}http:\n  listen: 127.0.0.1:{port}\n  token_file: {tokens}\n{http_extra}"


def client(port: int, token: str | None = OWNER_TOKEN, timeout: float = 30.0) -> httpx.Client:
    """An HTTP client of the door, with the bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=timeout)


def events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Parsed SSE events: ``{event, id, data}`` (data JSON-decoded when it can be)."""
    current: dict[str, Any] = {}
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                text = "\n".join(data)
                try:
                    current["data"] = json.loads(text)
                except ValueError:
                    current["data"] = text
                yield current
            current, data = {}, []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif line.startswith("event:"):
            current["event"] = line[6:].strip()
        elif line.startswith("id:"):
            current["id"] = line[3:].strip()


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``."""
    path.write_text(text)
    return path
