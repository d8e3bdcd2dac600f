"""The ``plugins.*``, ``tools.*`` and ``skills.*`` methods over the plugin host.

Owns loading plugins at start-up and exposing the host's registries to clients. Plugins load in
the background, behind the reload gate: the daemon listens and answers ``status`` (which says
``plugins_loading``) at once, while requests that need plugins wait at the gate as they do
during a reload. Loading rules, the tool pipeline and skills live in ``hermesd.plugins.host``,
``hermesd.tools`` and ``hermesd.tools.skill_catalog``; this module only translates to and from RPC.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

from hermesd import redact
from hermesd.plugins.host import PluginHost, ReloadGate
from hermesd.rpc.connection import Call, Router
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.tools.listing import tool_rows
from hermesd.tools.toolsets import ToolSelection

log = logging.getLogger(__name__)


class PluginService:
    """Plugin host over RPC."""

    def __init__(self, host: PluginHost) -> None:
        """A ``tools.call``'s ``session_id`` is checked before it runs (``Access.SESSION``)."""
        self.host = host
        self._loading: asyncio.Task[None] | None = None

    def bind(self, router: Router) -> None:
        guard = self.host.gate.guard  # each waits while a plugin reload runs
        router.bind("plugins.list", guard(self.rpc_plugins_list))
        router.bind("tools.list", guard(self.rpc_tools_list))
        router.bind("tools.call", guard(self.rpc_tools_call))
        router.bind("skills.list", guard(self.rpc_skills_list))
        router.bind("skills.view", guard(self.rpc_skills_view))

    async def start(self) -> None:
        self.host.tools.attach_loop(asyncio.get_running_loop())
        gate = self.host.gate
        gate.__enter__()  # closed until the first load ends: plugin requests wait for it
        self._loading = asyncio.get_running_loop().create_task(self._load(gate))

    async def _load(self, gate: ReloadGate) -> None:
        try:
            manager = self.host.plugins
            records = await asyncio.to_thread(manager.load_all)
            redact.configure(os.environ, manager.dotenv, manager.secret_env_names())
            loaded = sum(1 for r in records if r.state == "loaded")
            log.info("plugins: %d loaded, %d not loaded", loaded, len(records) - loaded)
        except Exception:
            log.exception("loading plugins failed")
        finally:
            gate.__exit__(None, None, None)

    async def stop(self) -> None:
        if self._loading is not None:
            await asyncio.shield(self._loading)  # a thread cannot be cancelled: let it end
        await asyncio.to_thread(self.host.plugins.unload_all)

    def status(self) -> dict[str, Any]:
        records = self.host.plugins.records()
        return {
            "plugins": sum(1 for r in records if r.state == "loaded"),
            "plugins_not_loaded": sum(1 for r in records if r.state != "loaded"),
            "plugins_loading": self._loading is not None and not self._loading.done(),
            "safe_mode": self.host.plugins.safe_mode,
            "tools": len(self.host.tools.entries()),
        }

    def reload(self, cfg: Any) -> None:
        self.host.tools.selection = ToolSelection.from_config(cfg)

    # --- methods -----------------------------------------------------------------------------

    def rpc_plugins_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        manager = self.host.plugins
        return {
            "plugins": manager.listing(),
            "text": manager.listing_text(),
            "safe_mode": manager.safe_mode,
        }

    async def rpc_tools_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self.host.tools.refresh_checks()
        return {"tools": tool_rows(self.host.tools, p.get("toolset") or None)}

    async def rpc_tools_call(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        args = p.get("args")
        if args is None:
            args = {}
        if not isinstance(args, (dict, str)):
            raise RpcError(
                Codes.INVALID_PARAMS, "tools.call: args must be a map or a JSON object string"
            )
        if isinstance(args, str):
            try:
                parsed = json.loads(args) if args.strip() else {}
            except ValueError as exc:
                raise RpcError(
                    Codes.INVALID_PARAMS, f"tools.call: args is not JSON: {exc}"
                ) from None
            if not isinstance(parsed, dict):
                raise RpcError(Codes.INVALID_PARAMS, "tools.call: args must be a JSON object")
            args = parsed
        if self.host.tools.get(p["name"]) is None:
            await self.host.tools.start_pending()  # an MCP server not started yet
        if self.host.tools.get(p["name"]) is None:
            raise RpcError(Codes.NOT_FOUND, f"Unknown tool: {p['name']}", {"name": p["name"]})
        if self.host.tools.config_hides(p["name"]):  # toolsets / disabled_toolsets bind clients too
            raise RpcError(
                Codes.INVALID_PARAMS,
                f"tools.call: {p['name']} is turned off by config "
                f"({self.host.tools.hidden_because(p['name'])})",
                {"name": p["name"]},
            )
        result = await self.host.tools.call(
            p["name"], args, session_id=p.get("session_id") or "", source="client"
        )
        return {"result": result}

    def rpc_skills_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return {"skills": self.host.skills.describe()}

    def rpc_skills_view(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return self.host.skills.view_result(p["name"], p.get("file_path"))
