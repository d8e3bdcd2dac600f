"""The text of ``hermesctl chat``'s bottom toolbar, kept current while the prompt waits.

What a turn changes (the model, context use, session cost, the last turn's time) is set by the
REPL after each turn (`StatusBar.update`). The count of approvals waiting can change at any
time (a tool in another session asks), so a background thread asks ``approvals.pending`` every
`POLL_SECONDS` on a connection of its own: the REPL's connection carries approval requests
and is read only by the REPL's thread. The toolbar reads `StatusBar.text` at each redraw; it
never waits for the daemon.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from hermesctl.chat_ui import status_line
from hermesctl.client import Client, ConnectionClosed, DaemonNotRunning
from hermesd.rpc.protocol import RpcError

POLL_SECONDS = 2.0


class StatusBar:
    """The toolbar's fields, and the thread that keeps the approval count current."""

    def __init__(self, socket_path: str | None, model: str | None) -> None:
        self.socket_path = socket_path
        self.model = model
        self.context: dict[str, Any] | None = None
        self.cost: float | None = None
        self.took_s: float | None = None
        self.pending = 0
        self.reachable = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def update(
        self,
        model: str | None,
        context: dict[str, Any] | None,
        cost: float | None,
        took_s: float | None,
        pending: int,
    ) -> None:
        """What the REPL learned after a turn (or at start)."""
        self.model, self.context, self.cost, self.pending = model, context, cost, pending
        if took_s is not None:
            self.took_s = took_s

    def text(self) -> str:
        """The toolbar's line."""
        line = status_line(self.model, self.context, self.cost, self.took_s, self.pending)
        return line if self.reachable else f"{line} · hermesd not reachable"

    def start(self) -> None:
        """Start counting pending approvals in the background (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="status-bar", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the background thread (it ends within one poll)."""
        self._stop.set()

    def _poll(self) -> None:
        client: Client | None = None
        while not self._stop.wait(POLL_SECONDS):
            try:
                if client is None:
                    client = Client.connect(self.socket_path, timeout=5.0)
                    client.hello("hermesctl chat (status)")
                self.pending = len(client.call("approvals.pending", timeout=5.0)["pending"])
                self.reachable = True
            except (DaemonNotRunning, ConnectionClosed, OSError):  # restarting: try again
                self.reachable = False
                if client is not None:
                    client.close()
                client = None
            except RpcError:  # a daemon that refuses the method: the count stays per turn
                break
        if client is not None:
            with contextlib.suppress(OSError):
                client.close()
