"""The sandbox as a daemon service: its ``status`` field, its reload and its egress proxy.

It serves no RPC method of its own; ``status`` shows ``sandbox: {mode, mechanism, network[,
allowed_domains][, reason]}``, a configuration reload chooses the mechanism again with the new
``sandbox.*`` keys, and the egress proxy (`hermesd.sandbox.egress`) listens unless
``sandbox.network`` is ``off`` (commands use it under ``allowlist``, the web tools always).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from hermesd.sandbox.confine import Sandbox
from hermesd.sandbox.policy import SandboxSettings

log = logging.getLogger(__name__)


class SandboxService:
    """Reports and reloads the daemon's `Sandbox` and runs its egress proxy."""

    def __init__(self, sandbox: Sandbox, dotenv: Callable[[], Mapping[str, str]]) -> None:
        self.sandbox = sandbox
        self.dotenv = dotenv
        self._switching: asyncio.Task[None] | None = None

    def bind(self, router: Any) -> None:
        """No methods of its own."""

    async def start(self) -> None:
        """Start the egress proxy unless ``sandbox.network`` is ``off`` (the web tools fetch
        through it under ``on`` too; commands get its credentials only under ``allowlist``)."""
        await self._follow_network()

    async def stop(self) -> None:
        """Stop the egress proxy."""
        if self._switching is not None:
            await asyncio.gather(self._switching, return_exceptions=True)
        await self.sandbox.egress.stop()

    def status(self) -> dict[str, Any]:
        return {"sandbox": self.sandbox.status()}

    def reload(self, cfg: Any) -> None:
        """New ``sandbox.*`` keys and ``.env`` values; the proxy starts or stops with them."""
        self.sandbox.reload(SandboxSettings.from_config(cfg), self.dotenv())
        if self.sandbox.settings.network != "off":
            try:  # bound now, so the next call finds it; served by the task below
                self.sandbox.egress.listen()
            except OSError:
                log.exception("the egress proxy could not listen")
        self._switching = asyncio.get_running_loop().create_task(self._follow_network())

    async def _follow_network(self) -> None:
        egress = self.sandbox.egress
        try:
            if self.sandbox.settings.network != "off":
                await egress.start()
            elif egress.running:
                await egress.stop()
        except OSError:  # calls are then refused with a sentence naming the proxy
            log.exception("the egress proxy could not start")
