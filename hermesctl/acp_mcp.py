"""The editor's MCP servers (``mcpServers`` of ``session/new``, ``load``, ``resume``, ``fork``).

Each becomes an ``mcp_servers`` entry handed to the daemon's ``mcp.session_add``: the daemon runs
it confined like its own servers, offers its tools to that session only, and stops it when this
bridge's connection closes. Starting a program is a widening the daemon wants confirmed on a
terminal; an editor-started bridge has none, so unless the daemon runs with
``HERMESD_CONFIRM_WIDENING=off`` the daemon refuses, and the bridge says so in its log (stderr,
the editor's log) and goes on without them. ACP's own ``acp`` transport is not supported.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import acp
from acp import schema

log = logging.getLogger("hermesctl.acp")

Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


def entries(servers: list[Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The servers as ``mcp_servers`` entries by name, and the names of those left out."""
    found: dict[str, dict[str, Any]] = {}
    left: list[str] = []
    for server in servers:
        if isinstance(server, schema.McpServerStdio):
            found[server.name] = {
                "command": server.command,
                "args": list(server.args),
                "env": {e.name: e.value for e in server.env},
            }
        elif isinstance(server, (schema.McpServerHttp, schema.McpServerSse)):
            found[server.name] = {
                "url": server.url,
                "headers": {h.name: h.value for h in server.headers},
                "transport": "sse"
                if isinstance(server, schema.McpServerSse)
                else "streamable_http",
            }
        else:
            left.append(str(getattr(server, "name", "?")))
    return found, left


async def connect(call: Call, session_id: str, servers: list[Any] | None) -> None:
    """Ask the daemon to run the editor's servers for ``session_id``; a refusal is logged."""
    found, left = entries(servers or [])
    if left:
        log.warning("MCP servers over ACP's own transport are not supported: %s", ", ".join(left))
    if not found:
        return
    try:
        await call("mcp.session_add", {"session_id": session_id, "servers": found})
    except acp.RequestError as err:
        log.warning("the editor's MCP servers (%s) are not connected: %s", ", ".join(found), err)
