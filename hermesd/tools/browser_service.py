"""The browser pool as a daemon service: its browsers close when the daemon stops, and
``status`` says which backend the open ones run on (`hermesd.tools.browser_pool`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermesd.rpc.service import RpcService
from hermesd.tools.browser_pool import BrowserPool

if TYPE_CHECKING:
    from hermesd.rpc.connection import Router


class BrowserService(RpcService):
    """The pool's life with the daemon: its browsers close when the daemon stops."""

    def __init__(self, pool: BrowserPool) -> None:
        self.pool = pool

    def bind(self, router: Router) -> None:
        """No methods of its own."""

    async def stop(self) -> None:
        await self.pool.close_all()

    def status(self) -> dict[str, Any]:
        """``browser: {backend, open}`` once a browser is open or a plugin's is selected."""
        chosen = self.pool.provider()
        if chosen is None and not self.pool.count():
            return {}
        if chosen is None:
            backend = "local"
        elif isinstance(chosen, str):  # named, but no loaded plugin registered it
            backend = f"{self.pool.config().get('browser.cloud_provider')} (not registered)"
        else:
            backend = str(chosen.name)
        return {"browser": {"backend": backend, "open": self.pool.count()}}
