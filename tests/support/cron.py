"""Helpers for cron tests: a daemon on the test clock, and moving that clock.

The daemon's scheduler clock starts at `T0` (``HERMESD_TEST_CLOCK``) and moves only through
the ``cron.clock`` test hook, so no test waits for a schedule in real time.
"""

from __future__ import annotations

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
    env = {"HERMESD_TEST_CLOCK": str(clock), **kwargs.pop("env", {})}
    return start(config=cron_config(model, extra, tz), env=env, **kwargs)


def advance(daemon: DaemonProcess, seconds: float, wait: bool = True) -> dict[str, Any]:
    """Move the daemon's clock and tick; with ``wait``, return after the runs finished."""
    result: dict[str, Any] = daemon.call("cron.clock", {"advance": seconds, "wait": wait})
    return result


def prompts_seen(model: ScriptedModelServer, marker: str) -> int:
    """How many model requests carried ``marker`` in their last user message."""
    count = 0
    for request in model.requests:
        users = [m for m in request.get("messages", []) if m.get("role") == "user"]
        if users and marker in str(users[-1].get("content")):
            count += 1
    return count
