"""Helpers for cron tests: a daemon on the test clock, and moving that clock.

The daemon's scheduler clock starts at `T0` (``HERMESD_TEST_CLOCK``) and moves only when the
test says so, through a socket pair whose other end the daemon inherits at start
(``HERMESD_TEST_CLOCK_FD``, docs/cron.md): no test waits for a schedule in real time, and no
RPC method can move the clock.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

from tests.support.daemon import DaemonProcess
from tests.support.modelserver import ScriptedModelServer, model_config

T0 = 1772438400  # 2026-03-02 08:00:00 UTC, a Monday
MINUTE = 60.0
HOUR = 3600.0


def cron_config(model: ScriptedModelServer, extra: str = "", tz: str = "UTC") -> str:
    """config.yaml: the scripted model, cron in ``tz``, plus ``extra`` (more top-level keys,
    or more ``cron`` keys indented by two spaces)."""
    return model_config(model.url) + f"cron:\n  timezone: {tz}\n" + extra


def start_cron(
    start: Callable[..., DaemonProcess],
    model: ScriptedModelServer,
    extra: str = "",
    *,
    clock: float = T0,
    tz: str = "UTC",
    **kwargs: Any,
) -> DaemonProcess:
    """A daemon whose scheduler runs on the test clock, starting at ``clock``."""
    ours, theirs = socket.socketpair()
    env = {
        "HERMESD_TEST_CLOCK": str(clock),
        "HERMESD_TEST_CLOCK_FD": str(theirs.fileno()),
        **kwargs.pop("env", {}),
    }
    try:
        daemon = start(
            config=cron_config(model, extra, tz), env=env, pass_fds=(theirs.fileno(),), **kwargs
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()  # the daemon has its copy
    daemon.test_clock = ours
    return daemon


def advance(daemon: DaemonProcess, seconds: float, wait: bool = True) -> dict[str, Any]:
    """Move the daemon's clock and tick; with ``wait``, return after the runs finished."""
    channel = daemon.test_clock
    assert channel is not None, "not started by start_cron: the daemon has no test clock"
    channel.settimeout(120)
    channel.sendall(json.dumps({"advance": seconds, "wait": wait}).encode() + b"\n")
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = channel.recv(65536)
        if not chunk:
            raise AssertionError(f"the daemon closed the test clock:\n{daemon.log()}")
        reply += chunk
    result: dict[str, Any] = json.loads(reply)
    assert "error" not in result, result
    return result


def prompts_seen(model: ScriptedModelServer, marker: str) -> int:
    """How many model requests carried ``marker`` in their last user message."""
    count = 0
    for request in model.requests:
        users = [m for m in request.get("messages", []) if m.get("role") == "user"]
        if users and marker in str(users[-1].get("content")):
            count += 1
    return count
