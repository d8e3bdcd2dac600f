"""`McpService`: the mcp.* RPC methods, ``/reload-mcp``, ``status`` counts and config reloads.

It owns the `McpPool`'s life in the daemon: the pool is configured from ``mcp_servers`` when
the daemon starts and on every configuration reload (only changed servers are touched), and
stopped with the daemon. ``mcp.session_add`` starts servers for one session only (an editor's,
through ``hermesctl acp``); they stop when the connection that asked for them closes.
Reading config.yaml goes through the `SettingsFiles`-like loader the
daemon hands in, on a thread (the loop does no disk I/O).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from hermesd.mcp.pool import McpPool, session_server_name
from hermesd.mcp.settings import McpSettingsError, check_allowlists, check_servers
from hermesd.rpc.connection import Call, Connection, Router
from hermesd.rpc.protocol import Codes, RpcError

log = logging.getLogger(__name__)

DEFAULT_LOG_TAIL = 64 * 1024


class McpService:
    """The daemon's MCP servers over RPC."""

    def __init__(self, pool: McpPool, config: Any, load_config: Callable[[], Any]) -> None:
        """``config``: the daemon's configuration now; ``load_config``: reads it anew (raises
        ``ValueError`` when it cannot be used)."""
        self.pool = pool
        self._config = config
        self._load_config = load_config
        self._reloading: asyncio.Task[Any] | None = None
        self._by_connection: dict[int, list[str]] = {}  # connection id -> its session servers
        self._dropping: set[asyncio.Task[None]] = set()

    # --- service protocol --------------------------------------------------------------------

    def bind(self, router: Router) -> None:
        router.bind("mcp.list", self.rpc_list)
        router.bind("mcp.tools", self.rpc_tools)
        router.bind("mcp.restart", self.rpc_restart)
        router.bind("mcp.reload", self.rpc_reload)
        router.bind("mcp.logs", self.rpc_logs)
        router.bind("mcp.session_add", self.rpc_session_add)

    async def start(self) -> None:
        await self._apply(self._config)
        await self.pool.start()

    async def stop(self) -> None:
        if self._reloading is not None:
            self._reloading.cancel()
        await self.pool.stop()

    def status(self) -> dict[str, Any]:
        return self.pool.status()

    def reload(self, cfg: Any) -> None:
        """A daemon configuration reload: apply the new ``mcp_servers`` in the background."""
        self._config = cfg
        self._reloading = asyncio.ensure_future(self._apply(cfg))
        self._reloading.add_done_callback(_log_failure)

    async def _apply(self, cfg: Any) -> dict[str, list[str]]:
        servers, _ = check_servers(cfg.get("mcp_servers"))
        self.pool.start_mode = str(cfg.get("mcp.start") or "lazy")
        cwd = cfg.get("terminal.cwd")
        self.pool.terminal_cwd = str(cwd) if cwd else None
        self.pool.allowlists = check_allowlists(cfg.get("plugins.entries"))
        return await self.pool.configure(servers)

    # --- methods -----------------------------------------------------------------------------

    def rpc_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return {"servers": self.pool.describe()}

    def _server(self, name: str) -> str:
        if name not in self.pool.servers:
            known = ", ".join(sorted(self.pool.servers)) or "none"
            raise RpcError(
                Codes.NOT_FOUND, f"no MCP server '{name}' is configured (configured: {known})"
            )
        return name

    def rpc_tools(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        name = self._server(p["name"])
        return {"server": name, "tools": self.pool.tools(name)}

    async def rpc_restart(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        name = self._server(p["name"])
        try:
            await self.pool.restart(name)
        except McpSettingsError as exc:
            raise RpcError(Codes.CONFLICT, str(exc)) from None
        server = self.pool.servers[name]
        return {"server": name, "state": server.state, "error": server.error}

    async def rpc_reload(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return await self.reload_now()

    async def reload_now(self) -> dict[str, list[str]]:
        """Re-read config.yaml and apply its ``mcp_servers`` (``/reload-mcp``)."""
        try:
            cfg = await asyncio.to_thread(self._load_config)
            self._config = cfg
            return await self._apply(cfg)
        except ValueError as exc:
            raise RpcError(Codes.INVALID_PARAMS, f"MCP servers not reloaded: {exc}") from None

    def rpc_logs(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        name = self._server(p["name"])
        tail = p.get("tail") or DEFAULT_LOG_TAIL
        if tail <= 0:
            raise RpcError(Codes.INVALID_PARAMS, "mcp.logs: tail must be a positive number")
        return {"server": name, "text": self.pool.servers[name].stderr.text(tail)}

    async def rpc_session_add(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        sid, raw = p["session_id"], p["servers"]
        if not raw:
            return {"servers": []}
        try:
            named = {session_server_name(str(n), sid): e for n, e in raw.items()}
            settings, _ = check_servers(named)
        except McpSettingsError as exc:
            raise RpcError(Codes.INVALID_PARAMS, f"mcp.session_add: {exc}") from None
        mine = self._by_connection.setdefault(id(call.conn), [])
        mine.extend(n for n in settings if n not in mine)
        try:
            names = await self.pool.add_session_servers(sid, settings)
        except TimeoutError:
            names = list(settings)  # still connecting: its tools come when it is up
        log.info("MCP servers %s started for session %s", ", ".join(names), sid)
        rows = [r for r in self.pool.describe() if r["name"] in names]
        return {"servers": rows}

    def connection_closed(self, conn: Connection) -> None:
        """The servers a closed connection started for its sessions stop."""
        names = self._by_connection.pop(id(conn), None)
        if names:
            task = asyncio.ensure_future(self.pool.drop_servers(names))
            self._dropping.add(task)
            task.add_done_callback(self._dropping.discard)

    async def reload_command(self, raw_args: str) -> str:
        """``/reload-mcp``: what changed, in a sentence."""
        try:
            changes = await self.reload_now()
        except RpcError as exc:
            return exc.message
        parts = [f"{what}: {', '.join(names)}" for what, names in changes.items() if names]
        counts = self.pool.status()
        summary = f"{counts['mcp_servers']} MCP servers, {counts['mcp_tools']} tools"
        return "MCP servers reloaded (" + ("; ".join(parts) or "no changes") + f"). {summary}."


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("MCP servers not reloaded", exc_info=task.exception())
