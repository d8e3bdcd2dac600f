"""Finding and loading memory provider plugins (docs/memory.md, "Memory providers").

A memory provider is a plugin the general loader leaves alone: `discover_providers` enumerates
them without importing anything — bundled ``<bundled>/memory/<name>/``, then
``$HERMES_HOME/plugins/<name>/`` whose ``__init__.py`` names ``register_memory_provider`` or
``MemoryProvider`` in its first 8 KB (no plugin.yaml needed), then ``./.hermes/plugins/<name>/``
with ``HERMES_ENABLE_PROJECT_PLUGINS``, then the entry point group
``hermes_agent.memory_providers``; the first source to name a provider wins. `ProviderFactory`
imports the one ``memory.provider`` names, once, and makes a fresh provider instance per session:
``register(collector)``, else the first ``MemoryProvider`` subclass of the module. Providers that
a general plugin hands to ``ctx.register_memory_provider`` are kept in `ProviderRegistrations`.
Nothing here runs the provider's own methods; `hermesd.memory.providers` does, per session.
"""

from __future__ import annotations

import importlib.metadata
import logging
import sys
import threading
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hermesd.plugins import hostapi
from hermesd.plugins.loader import _import_folder, bundled_dir, env_flag

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "hermes_agent.memory_providers"
MARKERS = ("register_memory_provider", "MemoryProvider")
SNIFF_CHARS = 8192


@dataclass(frozen=True)
class ProviderCandidate:
    """A discovered memory provider, not imported."""

    name: str
    source: str  # bundled | user | project | entrypoint | plugin (ctx.register_memory_provider)
    folder: Path | None = None
    entry_point: importlib.metadata.EntryPoint | None = None
    description: str = ""

    @property
    def location(self) -> str:
        """Its folder or entry point, for log lines and the listing."""
        if self.folder is not None:
            return str(self.folder)
        return self.entry_point.value if self.entry_point is not None else self.source


def looks_like_provider(folder: Path) -> bool:
    """Whether ``folder/__init__.py`` names a provider marker in its first 8 KB."""
    try:
        with open(folder / "__init__.py", encoding="utf-8", errors="replace") as f:
            head = f.read(SNIFF_CHARS)
    except OSError:
        return False
    return any(marker in head for marker in MARKERS)


def description_of(folder: Path) -> str:
    """The ``description:`` line of the folder's plugin.yaml ("" without one)."""
    for name in ("plugin.yaml", "plugin.yml"):
        try:
            text = (folder / name).read_text(encoding="utf-8-sig", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():  # one plain key: no YAML parser for a listing line
            if line.startswith("description:"):
                return line.partition(":")[2].strip().strip("'\"")
    return ""


def _scan(root: Path, source: str, sniff: bool) -> list[ProviderCandidate]:
    try:
        children = sorted(c for c in root.iterdir() if c.is_dir())
    except OSError:
        return []
    found = []
    for child in children:
        if child.name.startswith(("_", ".")) or not (child / "__init__.py").is_file():
            continue
        if sniff and not looks_like_provider(child):
            continue
        found.append(ProviderCandidate(child.name, source, folder=child, description=""))
    return found


def discover_providers(
    home: Path, env: Mapping[str, str], cwd: Path | None = None
) -> list[ProviderCandidate]:
    """Every memory provider of every source, first source winning a name; nothing imported."""
    scanned: list[ProviderCandidate] = []
    bundled = bundled_dir(env)
    if bundled is not None:
        scanned += _scan(bundled / "memory", "bundled", sniff=False)
    scanned += _scan(Path(home) / "plugins", "user", sniff=True)
    if env_flag(env, "HERMES_ENABLE_PROJECT_PLUGINS"):
        scanned += _scan((cwd or Path.cwd()) / ".hermes" / "plugins", "project", sniff=True)
    try:
        for ep in sorted(
            importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name
        ):
            meta: Any = ep.dist.metadata if ep.dist is not None else {}
            summary = str(meta.get("Summary") or "")
            scanned.append(ProviderCandidate(ep.name, "entrypoint", None, ep, summary))
    except Exception as exc:  # a broken installed distribution must not stop the daemon
        log.warning("Scanning entry points of group %s failed: %s", ENTRY_POINT_GROUP, exc)
    winners: dict[str, ProviderCandidate] = {}
    for candidate in scanned:
        if candidate.folder is not None:
            candidate = ProviderCandidate(
                candidate.name,
                candidate.source,
                candidate.folder,
                None,
                description_of(candidate.folder),
            )
        winners.setdefault(candidate.name, candidate)
    return list(winners.values())


class ProviderCollector:
    """The ``ctx`` a provider's ``register()`` gets: it keeps the provider; tools, hooks and
    CLI commands registered there are ignored, as the reference's collector does."""

    def __init__(self) -> None:
        self.provider: Any = None

    def register_memory_provider(self, provider: Any) -> None:
        """Keep ``provider`` (the last one wins)."""
        self.provider = provider

    def register_tool(self, *args: Any, **kwargs: Any) -> None:
        """Ignored: a provider's tools come from its get_tool_schemas()."""

    def register_hook(self, *args: Any, **kwargs: Any) -> None:
        """Ignored."""

    def register_cli_command(self, *args: Any, **kwargs: Any) -> None:
        """Ignored."""


def _is_provider_class(value: object) -> bool:
    if not isinstance(value, type):
        return False
    base = getattr(sys.modules.get("agent.memory_provider"), "MemoryProvider", None)
    if base is not None and value is not base and issubclass(value, base):
        return True
    return any(
        k.__name__ == "MemoryProvider" and k.__module__.endswith("memory_provider")
        for k in value.__mro__[1:]
    )


class ProviderFactory:
    """Makes instances of one discovered provider: imported once, instantiated per session."""

    def __init__(self, candidate: ProviderCandidate) -> None:
        self.candidate = candidate
        self._loaded: Any = None
        self._lock = threading.Lock()

    def module(self) -> Any:
        """The provider's module (imported once; blocking, plugin code)."""
        with self._lock:
            if self._loaded is None:
                hostapi.enable_reference_modules()  # providers import agent.memory_provider
                if self.candidate.entry_point is not None:
                    self._loaded = self.candidate.entry_point.load()
                elif self.candidate.folder is not None:
                    self._loaded = _import_folder(
                        f"memory/{self.candidate.name}", self.candidate.folder
                    )
            return self._loaded

    def create(self) -> Any:
        """A new provider instance, or None when the module yields none (blocking, plugin code)."""
        loaded = self.module()
        register = getattr(loaded, "register", None)
        if register is None and not isinstance(loaded, types.ModuleType) and callable(loaded):
            register = loaded  # an entry point naming register() itself
        if callable(register):
            collector = ProviderCollector()
            register(collector)
            if collector.provider is not None:
                return collector.provider
        if isinstance(loaded, types.ModuleType):
            classes = [getattr(loaded, attr, None) for attr in dir(loaded)]
            classes = [c for c in classes if _is_provider_class(c)]
            own = [c for c in classes if getattr(c, "__module__", "") == loaded.__name__]
            concrete = [c for c in classes if not getattr(c, "__abstractmethods__", None)]
            for cls in own or concrete[:1]:  # own classes first, then one from a submodule
                return cast(Callable[[], Any], cls)()
        return None


REJECTED = (
    "Rejected memory provider '%s' — external provider '%s' is already registered. "
    "Only one external memory provider is allowed at a time. Configure which one via "
    "memory.provider in config.yaml."
)


class ProviderRegistrations:
    """Providers handed to ``ctx.register_memory_provider`` by general plugins: at most one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.provider: Any = None
        self.owner = ""  # the plugin key that registered it
        self.listeners: list[Callable[[], None]] = []

    def register(self, provider: Any, owner: str) -> bool:
        """Keep ``provider``; False (with the reference's warning) when one is already kept."""
        name = provider_name(provider)
        with self._lock:
            if self.provider is not None:
                log.warning(REJECTED, name, provider_name(self.provider))
                return False
            self.provider, self.owner = provider, owner
        log.info("Memory provider '%s' registered by plugin '%s'", name, owner)
        return True

    def drop_owner(self, owner: str) -> None:
        """Forget the provider of an unloaded plugin."""
        with self._lock:
            if self.owner == owner:
                self.provider, self.owner = None, ""


def provider_name(provider: Any) -> str:
    """A provider's ``name`` (a property in the ABC), or its class name when that fails."""
    try:
        return str(provider.name)
    except Exception:
        return type(provider).__name__
