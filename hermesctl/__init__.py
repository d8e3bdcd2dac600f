"""hermesctl: command-line client and Python client library for hermesd.

``from hermesctl import Client`` gives the synchronous client; see ``hermesctl.client``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up
    from typing import Any


__all__ = ["Client", "ConnectionClosed", "DaemonNotRunning", "RpcError"]


def __getattr__(name: str) -> Any:
    # Lazy, so `hermesctl --help` and friends do not pay for the socket layer.
    if name in ("Client", "DaemonNotRunning", "ConnectionClosed"):
        from hermesctl import client

        return getattr(client, name)
    if name == "RpcError":
        from hermesd.rpc.protocol import RpcError

        return RpcError
    raise AttributeError(name)
