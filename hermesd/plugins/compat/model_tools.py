"""hermesd's ``model_tools``: ``_run_async`` for plugin code that has a coroutine to run."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any


def _run_async(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` to completion from sync code: here when no loop runs in this thread,
    else on a helper thread with its own loop (plugin code runs on worker threads)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
