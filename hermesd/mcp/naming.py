"""How an MCP server's tool is named for the model: ``mcp__<server>__<tool>``.

Each part is reduced to ``[A-Za-z0-9_]`` (anything else becomes ``_``). Providers accept at most
64 characters, so a longer name keeps a readable prefix and ends in ``_`` plus the first eight
hex digits of the SHA-256 of the full name: the same server and tool always give the same name,
and two long names that share a prefix still differ. The older ``mcp_<server>_<tool>`` form
(saved transcripts and skills use it) is accepted as an alias when a call is dispatched.
"""

from __future__ import annotations

import hashlib
import re

PREFIX = "mcp__"
MAX_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def sanitize(part: str) -> str:
    """``part`` with every character outside ``[A-Za-z0-9_]`` replaced by ``_``."""
    return _UNSAFE.sub("_", part)


def clamp(name: str) -> str:
    """``name`` when it fits in 64 characters, else a readable prefix + ``_`` + 8 hex."""
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def tool_name(server: str, tool: str) -> str:
    """The model-facing name of ``tool`` on ``server``."""
    return clamp(f"{PREFIX}{sanitize(server)}__{sanitize(tool)}")


def legacy_name(server: str, tool: str) -> str:
    """The older ``mcp_<server>_<tool>`` name, accepted as a dispatch alias."""
    return clamp(f"mcp_{sanitize(server)}_{sanitize(tool)}")


def toolset(server: str) -> str:
    """The toolset of a server's tools."""
    return f"mcp-{server}"
