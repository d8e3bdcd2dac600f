"""hermesd's ``hermes_cli.plugins``: the hook table and a read-only view of the plugin host."""

from __future__ import annotations

import asyncio
from typing import Any

from hermesd.plugins import hostapi
from hermesd.runtime.hooks import HOOKS

VALID_HOOKS: set[str] = set(HOOKS)


class _LoadedPlugin:
    """What the reference's ``LoadedPlugin`` offers that plugins read."""

    def __init__(self, record: Any) -> None:
        self.name = record.key
        self.enabled = record.loaded
        self.error = record.reason or None
        self.tools_registered = list(record.tools)
        self.hooks_registered = list(record.hooks)
        self.middleware_registered = list(record.middleware)
        self.commands_registered = list(record.commands)
        self.module = None
        self.manifest = record.manifest


class PluginManagerView:
    """The parts of the reference's plugin manager plugins read; read-only."""

    _cli_ref = None  # hermesd has no in-process CLI

    @property
    def _plugins(self) -> dict[str, _LoadedPlugin]:
        state = hostapi.state()
        if state is None or state.manager is None:
            return {}
        return {r.key: _LoadedPlugin(r) for r in state.manager.records()}

    @property
    def _middleware(self) -> dict[str, list[Any]]:
        state = hostapi.state()
        if state is None or state.manager is None:
            return {}
        bus = state.manager.services.hooks.middleware
        return {kind: [e.fn for e in entries] for kind, entries in bus.entries().items()}

    def list_plugins(self) -> list[dict[str, Any]]:
        """One dict per plugin, as the reference's ``list_plugins``."""
        return [
            {
                "name": p.name,
                "key": p.name,
                "enabled": p.enabled,
                "tools": len(p.tools_registered),
                "hooks": len(p.hooks_registered),
                "middleware": len(p.middleware_registered),
                "commands": len(p.commands_registered),
                "error": p.error,
            }
            for p in self._plugins.values()
        ]

    def has_hook(self, hook_name: str) -> bool:
        state = hostapi.state()
        return bool(state and state.manager and state.manager.services.hooks.has(hook_name))

    def has_middleware(self, kind: str) -> bool:
        state = hostapi.state()
        return bool(state and state.manager and state.manager.services.hooks.middleware.has(kind))


_view = PluginManagerView()


def get_plugin_manager() -> PluginManagerView:
    """The read-only view of hermesd's plugin host."""
    return _view


def discover_plugins(force: bool = False) -> None:
    """Not available: plugins load with the daemon; ``hermesctl plugins reload`` reloads them."""
    if force:
        raise hostapi.not_in_hermesd(
            "hermes_cli.plugins.discover_plugins(force=True)",
            "reload plugins with hermesctl plugins reload",
        )


def has_hook(hook_name: str) -> bool:
    """True when a callback is registered for ``hook_name``."""
    return _view.has_hook(hook_name)


def has_middleware(kind: str) -> bool:
    """True when middleware of ``kind`` is registered."""
    return _view.has_middleware(kind)


def invoke_hook(hook_name: str, **kwargs: Any) -> list[Any]:
    """Call every callback of ``hook_name`` (from a plugin's thread); their non-None returns."""
    state = hostapi.state()
    if state is None or state.manager is None:
        return []
    hooks = state.manager.services.hooks
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise hostapi.not_in_hermesd(
            "invoke_hook from the event loop", "call it from plugin code (a worker thread)"
        )
    loop = state.manager.services.tools.loop
    if loop is None or not loop.is_running():
        return asyncio.run(hooks.invoke(hook_name, **kwargs))
    return asyncio.run_coroutine_threadsafe(hooks.invoke(hook_name, **kwargs), loop).result()
