"""Waiting in tests for what a check means, not for a guessed length of time."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Call ``check`` every 50 ms until it is true; fail naming ``what`` after ``timeout``
    seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
