"""Helpers for approval tests: clients that answer ``approval.request`` in a scripted way."""

from __future__ import annotations

import json
import threading
from typing import Any

from hermesctl.client import Client
from tests.support.daemon import DaemonProcess


class Answering:
    """``Client.on_request`` that records every request and answers ``choice`` (None: error)."""

    def __init__(self, choice: str | None, reason: str | None = None) -> None:
        self.choice = choice
        self.reason = reason
        self.requests: list[dict[str, Any]] = []

    def __call__(self, method: str, params: list[Any]) -> Any:
        self.requests.append({"method": method, **(params[0] if params else {})})
        if self.choice is None:
            raise RuntimeError("this client does not answer")
        answer: dict[str, Any] = {"choice": self.choice}
        if self.reason:
            answer["reason"] = self.reason
        return answer


def client_answering(
    daemon: DaemonProcess, choice: str | None, reason: str | None = None
) -> tuple[Client, Answering]:
    """A connected client whose approval answer is ``choice``."""
    client = daemon.client()
    handler = Answering(choice, reason)
    client.on_request = handler
    return client, handler


def tool(
    client: Client,
    name: str,
    args: dict[str, Any],
    session_id: str | None = None,
    timeout: float = 30.0,
) -> Any:
    """``tools.call``; the tool's parsed JSON result."""
    params: dict[str, Any] = {"name": name, "args": args}
    if session_id:
        params["session_id"] = session_id
    result = client.call("tools.call", params, timeout=timeout)["result"]
    try:
        return json.loads(result)
    except ValueError:
        return result


def terminal(
    client: Client, command: str, session_id: str | None = None, timeout: float = 30.0
) -> Any:
    """Run ``command`` with the terminal tool through ``tools.call``."""
    return tool(client, "terminal", {"command": command}, session_id, timeout)


class Background:
    """Run ``fn`` on a thread; ``result()`` waits for it (re-raising its exception)."""

    def __init__(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        self._box: list[Any] = []
        self._error: list[BaseException] = []

        def run() -> None:
            try:
                self._box.append(fn(*args, **kwargs))
            except BaseException as exc:
                self._error.append(exc)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self, timeout: float = 30.0) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("background call did not finish")
        if self._error:
            raise self._error[0]
        return self._box[0]

    def done(self) -> bool:
        return not self._thread.is_alive()


def wait_pending(
    daemon: DaemonProcess, count: int = 1, timeout: float = 10.0
) -> list[dict[str, Any]]:
    """Poll ``approvals.pending`` until ``count`` approvals wait; return them."""
    import time

    deadline = time.monotonic() + timeout
    with daemon.client() as c:
        while True:
            pending: list[dict[str, Any]] = c.call("approvals.pending")["pending"]
            if len(pending) >= count:
                return pending
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} pending approval(s) expected, got {pending}")
            time.sleep(0.02)
