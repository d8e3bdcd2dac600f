"""One reload of everything (config.yaml, .env and plugins), its outcome, and when it ran.

``hermesctl reload`` (the ``reload`` method), ``hermesctl config set`` and SIGHUP all come here:
the daemon re-reads its configuration (services take the new settings), then the plugins are
unloaded and loaded again, and the outcome — configuration problems, plugins that failed, the
plugin summary — is kept as ``last_reload`` for ``status``. A broken config.yaml keeps the
running configuration; plugins are reloaded all the same (their .env values may have changed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from hermesd.daemon import config
from hermesd.rpc.connection import Call, Router
from hermesd.rpc.service import RpcService

if TYPE_CHECKING:
    from hermesd.daemon.main import Daemon
    from hermesd.plugins.admin_service import PluginAdminService

log = logging.getLogger(__name__)


class ReloadService(RpcService):
    """``reload``, and the record of the last reload for ``status``."""

    def __init__(self, daemon: Daemon, admin: PluginAdminService) -> None:
        self.daemon = daemon
        self.admin = admin
        self.last: dict[str, Any] | None = None
        self._sighup: asyncio.Task[dict[str, Any]] | None = None

    def bind(self, router: Router) -> None:
        router.bind("reload", self.rpc_reload)

    def status(self) -> dict[str, Any]:
        return {"last_reload": self.last}

    def on_sighup(self) -> None:
        """SIGHUP: reload everything in the background (the signal handler returns)."""
        self._sighup = asyncio.get_running_loop().create_task(self.reload_all("SIGHUP"))

    async def reload_all(self, source: str) -> dict[str, Any]:
        """Reload configuration and plugins; the outcome (also kept as ``last``)."""
        started = time.time()
        problems: list[str] = []
        warnings: list[str] = []
        self.admin.forget_scheduled()  # one a config.reload left behind is not this one's
        try:
            warnings = self.daemon.reload()  # schedules the plugin reload (admin.reload)
        except config.ConfigError as exc:
            problems = list(exc.problems)
            log.error("config not reloaded, keeping the running one: %s", exc)
        plugins = await self.admin.scheduled_or_new_reload()
        failed = plugins["failed"] if plugins else []
        outcome = {
            "time": started,
            "source": source,
            "ok": not problems and plugins is not None and not failed,
            "config_problems": problems,
            "config_warnings": warnings,
            "plugins": plugins["summary"] if plugins else "plugin reload failed (see the log)",
            "plugins_failed": failed,
        }
        self.last = outcome
        return outcome

    async def rpc_reload(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        log.info("reload requested by uid %d", call.conn.peer.uid)
        return await self.reload_all("hermesctl reload")
