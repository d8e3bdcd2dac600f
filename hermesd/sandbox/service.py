"""The sandbox as a daemon service: its ``status`` field and its reload.

It serves no RPC method of its own; ``status`` shows ``sandbox: {mode, mechanism[, reason]}``
and a configuration reload chooses the mechanism again with the new ``sandbox.*`` keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hermesd.sandbox.confine import Sandbox
from hermesd.sandbox.policy import SandboxSettings


class SandboxService:
    """Reports and reloads the daemon's `Sandbox`."""

    def __init__(self, sandbox: Sandbox, dotenv: Callable[[], Mapping[str, str]]) -> None:
        self.sandbox = sandbox
        self.dotenv = dotenv

    def bind(self, router: Any) -> None:
        """No methods of its own."""

    async def start(self) -> None:
        """Nothing to start: the mechanism was chosen when the sandbox was built."""

    async def stop(self) -> None:
        """Nothing to stop."""

    def status(self) -> dict[str, Any]:
        return {"sandbox": self.sandbox.status()}

    def reload(self, cfg: Any) -> None:
        """New ``sandbox.*`` keys and ``.env`` values."""
        self.sandbox.reload(SandboxSettings.from_config(cfg), self.dotenv())
