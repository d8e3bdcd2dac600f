"""Finding context engine plugins (docs/hermes-compat.md §11.5): the one-engine slot general
plugins fill with ``ctx.register_context_engine``, and engine folders
``$HERMES_HOME/plugins/context_engine/<name>/`` (then the bundled ``context_engine/<name>/``)
whose ``__init__.py`` has a ``register(ctx)`` or a ``ContextEngine`` subclass.

Nothing here decides which engine a session uses or calls an engine's methods beyond ``name``:
``hermesd.context.host`` reads ``context.engine``, asks `find_engine` and copies the engine
for each session.
"""

from __future__ import annotations

import logging
import threading
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hermesd.plugins import hostapi
from hermesd.plugins.loader import _import_folder, bundled_dir

log = logging.getLogger(__name__)

REJECTED_SECOND = (
    "Plugin '%s' tried to register a context engine, but one is already registered. "
    "Only one context engine plugin is allowed."
)
REJECTED_TYPE = (
    "Plugin '%s' tried to register a context engine that is not an "
    "agent.context_engine.ContextEngine; ignored."
)


def _is_engine_base(klass: type) -> bool:
    """hermesd's interface (``hermesd.context.engine``, also seen as ``agent.context_engine``) or
    the reference's own when hermes-agent itself is installed."""
    module = klass.__module__
    return klass.__name__ == "ContextEngine" and (
        module.endswith("context_engine") or module == "hermesd.context.engine"
    )


def is_context_engine(value: object) -> bool:
    """Whether ``value`` is an instance of a ``ContextEngine`` subclass."""
    return any(_is_engine_base(klass) for klass in type(value).__mro__[1:])


def engine_name(engine: Any) -> str:
    """An engine's ``name`` (a property in the ABC), or its class name when that fails."""
    try:
        return str(engine.name)
    except Exception:
        return type(engine).__name__


class EngineRegistrations:
    """The engine handed to ``ctx.register_context_engine`` by a general plugin: at most one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.engine: Any = None
        self.owner = ""  # the plugin key that registered it

    def register(self, engine: Any, owner: str) -> bool:
        """Keep ``engine``; False (with the reference's warning) when it is refused."""
        with self._lock:
            if self.engine is not None:
                log.warning(REJECTED_SECOND, owner)
                return False
            if not is_context_engine(engine):
                log.warning(REJECTED_TYPE, owner)
                return False
            self.engine, self.owner = engine, owner
        log.info("Plugin '%s' registered context engine: %s", owner, engine_name(engine))
        return True

    def drop_owner(self, owner: str) -> None:
        """Forget the engine of an unloaded plugin."""
        with self._lock:
            if self.owner == owner:
                self.engine, self.owner = None, ""


class _Collector:
    """The ``ctx`` an engine folder's ``register()`` gets: it keeps the engine."""

    def __init__(self) -> None:
        self.engine: Any = None

    def register_context_engine(self, engine: Any) -> None:
        self.engine = engine

    def __getattr__(self, name: str) -> Any:
        if name.startswith("register_"):
            return lambda *args, **kwargs: None  # tools, hooks: not an engine folder's business
        raise AttributeError(name)


def engine_folder(name: str, home: Path, env: Mapping[str, str]) -> Path | None:
    """The folder of engine ``name``: the user's, then the bundled one; None when neither."""
    if not name or name.startswith((".", "_")) or "/" in name or "\\" in name:
        return None
    roots = [Path(home) / "plugins" / "context_engine"]
    bundled = bundled_dir(env)
    if bundled is not None:
        roots.append(bundled / "context_engine")
    for root in roots:
        if (root / name / "__init__.py").is_file():
            return root / name
    return None


def _is_engine_class(value: object) -> bool:
    if not isinstance(value, type) or getattr(value, "__abstractmethods__", None):
        return False
    return any(_is_engine_base(k) for k in value.__mro__[1:])


def load_folder_engine(name: str, folder: Path) -> Any:
    """A new engine from ``folder`` (``register(ctx)``, else its first ``ContextEngine``
    subclass); None when it has none. Blocking: runs plugin code."""
    hostapi.enable_reference_modules()  # engines import agent.context_engine
    module = _import_folder(f"context_engine/{name}", folder)
    register = getattr(module, "register", None)
    if callable(register):
        collector = _Collector()
        register(collector)
        if collector.engine is not None:
            return collector.engine
    if isinstance(module, types.ModuleType):
        own = [
            value
            for value in vars(module).values()
            if _is_engine_class(value) and getattr(value, "__module__", "") == module.__name__
        ]
        others = [value for value in vars(module).values() if _is_engine_class(value)]
        for klass in own or others[:1]:
            return klass()
    return None


def find_engine(
    name: str, home: Path, env: Mapping[str, str], registered: EngineRegistrations
) -> tuple[Any, str]:
    """The engine named ``name`` and where it came from (``folder`` or ``plugin``); (None, why)
    when there is none. The plugin slot's engine is the shared original: copy it."""
    folder = engine_folder(name, home, env)
    if folder is not None:
        try:
            engine = load_folder_engine(name, folder)
        except Exception:
            log.exception("Loading context engine '%s' from %s failed", name, folder)
            engine = None
        if engine is not None:
            return engine, "folder"
    candidate = registered.engine
    if candidate is not None and engine_name(candidate) == name:
        return candidate, "plugin"
    return None, "not found"
