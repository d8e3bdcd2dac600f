"""`RpcService`: the base of a service that only answers RPC methods.

The daemon starts, stops, asks the status of and reloads every service it wires in
(`hermesd.daemon.main.Service`). A service with nothing to do at those moments inherits this
class instead of writing the four methods out empty; it still binds its own methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermesd.rpc.connection import Router


class RpcService:
    """No start-up, shutdown, status fields or reload of its own; ``bind`` is the subclass's."""

    def bind(self, router: Router) -> None:
        raise NotImplementedError(f"{type(self).__name__} binds no methods")

    async def start(self) -> None:
        """Nothing to start."""

    async def stop(self) -> None:
        """Nothing to stop."""

    def status(self) -> dict[str, Any]:
        """No fields for ``status``."""
        return {}

    def reload(self, cfg: Any) -> None:
        """Nothing read from the configuration."""
