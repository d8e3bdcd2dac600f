"""Gateway event hooks: ``$HERMES_HOME/hooks/<name>/HOOK.yaml`` + ``handler.py``, as the
reference loads them.

Each folder with a ``HOOK.yaml`` (``name``, ``events``: a list) and a ``handler.py`` defining
``handle(event_type, context)`` (sync or async) is loaded when the gateway starts. Events:
``gateway:startup``, ``session:start`` (a chat's first message in a new session),
``session:reset`` (``/new``, ``/reset``), ``agent:start`` / ``agent:end`` (around a chat's turn:
``platform``, ``user_id``, ``chat_id``, ``thread_id``, ``chat_type``, ``session_id``,
``message``, and for ``agent:end`` ``response``, each cut to 500 characters) and
``command:<name>`` (``command:*`` matches every command). A handler that raises or takes longer
than `HANDLER_TIMEOUT` is logged and skipped; sync handlers run on a worker thread, never on the
event loop. Like a plugin in ``$HERMES_HOME/plugins``, a hook is code the owner put there.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

HANDLER_TIMEOUT = 30.0
CONTEXT_TEXT = 500


class GatewayHooks:
    """The HOOK.yaml hooks of one HERMES_HOME, by event."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.handlers: dict[str, list[tuple[str, Callable[..., Any]]]] = {}
        self.loaded: list[dict[str, Any]] = []

    def load(self) -> None:
        """Find and import every hook (blocking: call it on a worker thread)."""
        if not self.folder.is_dir():
            return
        for folder in sorted(self.folder.iterdir()):
            if (folder / "HOOK.yaml").is_file() and (folder / "handler.py").is_file():
                try:
                    self._load_one(folder)
                except Exception:
                    log.exception("gateway hook %s could not be loaded", folder.name)

    def _load_one(self, folder: Path) -> None:
        manifest = yaml.safe_load((folder / "HOOK.yaml").read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or not manifest.get("events"):
            log.warning("gateway hook %s: HOOK.yaml declares no events; skipped", folder.name)
            return
        name = str(manifest.get("name") or folder.name)
        module_name = f"hermes_hook_{name}"
        spec = importlib.util.spec_from_file_location(module_name, folder / "handler.py")
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception:
            sys.modules.pop(module_name, None)
            raise
        handle = getattr(module, "handle", None)
        if not callable(handle):
            log.warning("gateway hook %s: handler.py has no handle(); skipped", name)
            return
        events = [str(e) for e in manifest["events"]]
        for event in events:
            self.handlers.setdefault(event, []).append((name, handle))
        self.loaded.append({"name": name, "events": events, "path": str(folder)})
        log.info("gateway hook %s loaded for %s", name, ", ".join(events))

    def has(self, event_type: str) -> bool:
        """Whether any hook listens for ``event_type``."""
        return bool(self._for(event_type))

    def _for(self, event_type: str) -> list[tuple[str, Callable[..., Any]]]:
        found = list(self.handlers.get(event_type, []))
        if ":" in event_type:
            found += self.handlers.get(event_type.split(":", 1)[0] + ":*", [])
        return found

    async def emit(self, event_type: str, context: dict[str, Any] | None = None) -> None:
        """Call every handler of ``event_type`` with ``context``; failures are logged."""
        context = dict(context or {})
        for name, handle in self._for(event_type):
            try:
                if inspect.iscoroutinefunction(handle):
                    await asyncio.wait_for(handle(event_type, context), HANDLER_TIMEOUT)
                else:
                    result = await asyncio.wait_for(
                        asyncio.to_thread(handle, event_type, context), HANDLER_TIMEOUT
                    )
                    if inspect.isawaitable(result):
                        await asyncio.wait_for(result, HANDLER_TIMEOUT)
            except Exception:
                log.exception("gateway hook %s failed on %s", name, event_type)


def cut(text: Any) -> str:
    """A context value cut to `CONTEXT_TEXT` characters."""
    return str(text or "")[:CONTEXT_TEXT]
