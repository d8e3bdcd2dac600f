"""Finding plugins and importing them (docs/hermes-compat.md §1).

`discover` walks the sources in scan order — bundled (``HERMES_BUNDLED_PLUGINS``, else the
repo's ``plugins/``, else ``hermesd/bundled_plugins``) → each folder of ``HERMES_PLUGIN_PATH``
(one plugin, or a folder of plugins) → ``$HERMES_HOME/plugins`` → ``./.hermes/plugins`` (only
with ``HERMES_ENABLE_PROJECT_PLUGINS``) → entry points of group ``hermes_agent.plugins`` — and
returns one `Candidate` per key, later sources winning a key collision; the winner keeps the
list of the plugins it shadows (`Shadowed`), which the log and the listing warn about. Within a
folder plugins are taken alphabetically by folder name (entry points by name), one category
level deep (``<category>/<dir>`` keys). The resulting order is the load order, hence the hook order.

`import_plugin` imports a folder plugin as the package ``hermes_plugins.<slug>`` (relative
imports and ``Path(__file__)`` work) or loads an entry point, and returns its ``register``
callable. Neither function calls plugin code other than the import itself. `plugin_names` is
discovery without its log lines, for the configuration check (a plugin's top-level section of
config.yaml is a setting, not an unknown key).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import re
import sys
import types
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hermesd
from hermesd.plugins.manifest import (
    Manifest,
    ManifestError,
    Shadowed,
    Source,
    find_manifest,
    parse_manifest,
)

log = logging.getLogger(__name__)
# Set while `plugin_names` discovers: the plugin host logs what discovery finds when it loads,
# so the configuration check must not log it a second time. Per thread and task, so a discovery
# running elsewhere at the same moment keeps its lines.
_quiet: ContextVar[bool] = ContextVar("hermesd_quiet_discovery", default=False)


def _unless_quiet(record: logging.LogRecord) -> bool:
    return not _quiet.get()


for _logger in (log, logging.getLogger("hermesd.plugins.manifest")):
    _logger.addFilter(_unless_quiet)

ENTRY_POINT_GROUP = "hermes_agent.plugins"
#: A group some published plugins declare by mistake: read too, with a warning.
MISTAKEN_ENTRY_POINT_GROUP = "hermes.plugins"
NAMESPACE = "hermes_plugins"
_TRUTHY = {"1", "true", "yes", "on"}


class PluginLoadError(Exception):
    """A plugin could not be imported or has no ``register``."""


@dataclass
class Candidate:
    """A discovered plugin, not yet loaded."""

    key: str
    source: Source
    folder: Path | None
    manifest: Manifest | None
    error: str | None = None
    entry_point: importlib.metadata.EntryPoint | None = None
    declared: bool = False  # handed in through HERMES_PLUGIN_PATH: enabled by being declared
    shadows: list[Shadowed] = field(default_factory=list)  # same key, earlier: not loaded

    @property
    def location(self) -> str:
        """Where the plugin is: its folder, or its entry point."""
        if self.folder is not None:
            return str(self.folder)
        if self.entry_point is not None:
            dist = self.entry_point.dist
            return f"entry point {self.entry_point.value}" + (f" of {dist.name}" if dist else "")
        return "?"


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """True when ``env[name]`` is 1/true/yes/on."""
    return env.get(name, "").strip().lower() in _TRUTHY


def bundled_dir(env: Mapping[str, str]) -> Path | None:
    """Where bundled plugins live, if anywhere."""
    override = env.get("HERMES_BUNDLED_PLUGINS")
    if override:
        return Path(override)
    package = Path(hermesd.__file__).resolve().parent
    shipped = package / "bundled_plugins"  # inside an installed wheel
    if shipped.is_dir():
        return shipped
    checkout = package.parent  # a source checkout (editable install, PYTHONPATH)
    if (checkout / "pyproject.toml").is_file() and (checkout / "plugins").is_dir():
        return checkout / "plugins"
    return None


def _candidate(folder: Path, manifest_file: Path, source: Source, prefix: str) -> Candidate:
    fallback_key = f"{prefix}/{folder.name}" if prefix else folder.name
    try:
        manifest = parse_manifest(manifest_file, default_name=folder.name)
    except (ManifestError, OSError, UnicodeDecodeError) as exc:
        log.warning("Failed to parse %s: %s", manifest_file, exc)
        return Candidate(
            fallback_key, source, folder, None, error=f"Failed to parse {manifest_file.name}: {exc}"
        )
    key = fallback_key if prefix else manifest.name
    manifest.key, manifest.source, manifest.path = key, source, str(folder)
    return Candidate(key, source, folder, manifest)


def scan_folder(root: Path, source: Source, *, prefix: str = "") -> list[Candidate]:
    """Plugins under ``root``: ``<dir>/plugin.yaml`` and ``<category>/<dir>/plugin.yaml``."""
    found: list[Candidate] = []
    try:
        children = sorted(c for c in root.iterdir() if c.is_dir())
    except OSError as exc:
        if root.exists():
            log.warning("Cannot scan plugin folder %s: %s", root, exc)
        return found
    for child in children:
        if child.name.startswith((".", "__")):
            continue
        manifest_file = find_manifest(child)
        if manifest_file is not None:
            found.append(_candidate(child, manifest_file, source, prefix))
        elif not prefix:
            found.extend(scan_folder(child, source, prefix=child.name))
    return found


def entry_point_candidates() -> list[Candidate]:
    """Plugins installed as distributions with a ``hermes_agent.plugins`` entry point."""
    found: dict[str, Candidate] = {}
    right = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    mistaken = [
        ep
        for ep in importlib.metadata.entry_points(group=MISTAKEN_ENTRY_POINT_GROUP)
        if ep.name not in {r.name for r in right}
    ]
    for ep in mistaken:
        log.warning(
            "Plugin '%s' (%s) declares its entry point in group '%s'; the group is '%s'. "
            "Loaded all the same",
            ep.name,
            ep.dist.name if ep.dist is not None else ep.value,
            MISTAKEN_ENTRY_POINT_GROUP,
            ENTRY_POINT_GROUP,
        )
    for ep in sorted([*right, *mistaken], key=lambda e: e.name):
        if ep.name in found:
            continue
        meta: Any = ep.dist.metadata if ep.dist is not None else {}
        manifest = Manifest(
            name=ep.name,
            version=ep.dist.version if ep.dist is not None else None,
            description=str(meta.get("Summary") or ""),
            author=str(meta.get("Author") or meta.get("Author-email") or ""),
            key=ep.name,
            source="entrypoint",
            path=ep.value,
        )
        found[ep.name] = Candidate(ep.name, "entrypoint", None, manifest, entry_point=ep)
    return list(found.values())


def discover(home: Path, env: Mapping[str, str], cwd: Path | None = None) -> list[Candidate]:
    """Every plugin of every source, one per key (later source wins), in load order."""
    scanned: list[Candidate] = []
    bundled = bundled_dir(env)
    if bundled is not None:
        scanned += scan_folder(bundled, "bundled")
    for entry in env.get("HERMES_PLUGIN_PATH", "").split(os.pathsep):
        if not entry.strip():
            continue
        folder = Path(entry).expanduser()
        manifest_file = find_manifest(folder)
        declared = (
            [_candidate(folder, manifest_file, "path", "")]
            if manifest_file
            else scan_folder(folder, "path")
        )
        for candidate in declared:
            candidate.declared = True
        scanned += declared
    scanned += scan_folder(Path(home) / "plugins", "user")
    if env_flag(env, "HERMES_ENABLE_PROJECT_PLUGINS"):
        scanned += scan_folder((cwd or Path.cwd()) / ".hermes" / "plugins", "project")
    try:
        scanned += entry_point_candidates()
    except Exception as exc:  # a broken installed distribution must not stop the daemon
        log.warning(
            "Scanning entry points of group %s failed: %s", ENTRY_POINT_GROUP, exc, exc_info=True
        )
    winners: dict[str, Candidate] = {}
    for candidate in scanned:
        previous = winners.pop(candidate.key, None)
        if previous is not None:
            # A plugin named like another takes its place silently otherwise: a user plugin
            # called "calculator" would replace the bundled one, tools and hooks included.
            log.warning(
                "Plugin '%s' from the %s source overrides the one from the %s source "
                "(%s is loaded, %s is not)",
                candidate.key,
                candidate.source,
                previous.source,
                candidate.location,
                previous.location,
            )
            candidate.shadows = [
                *previous.shadows,
                Shadowed(previous.source, previous.location),
                *candidate.shadows,
            ]
        winners[candidate.key] = candidate  # re-inserted: it loads at its own source's place
    return list(winners.values())


def plugin_names(home: Path, env: Mapping[str, str], cwd: Path | None = None) -> set[str]:
    """The key and manifest name of every plugin `discover` finds (enabled or not), found
    without logging anything."""
    token = _quiet.set(True)
    try:
        found = discover(home, env, cwd)
    finally:
        _quiet.reset(token)
    return {c.key for c in found} | {c.manifest.name for c in found if c.manifest is not None}


def module_name(key: str) -> str:
    """The private module name a folder plugin is imported under."""
    slug = re.sub(r"\W", "_", key.replace("-", "_").replace("/", "__"))
    return f"{NAMESPACE}.{'_' + slug if slug[:1].isdigit() else slug}"


def drop_modules(name: str = NAMESPACE) -> list[str]:
    """Forget ``name`` and its submodules from sys.modules (``hermes_plugins`` itself stays)."""
    gone = [
        m
        for m in list(sys.modules)
        if m.startswith(name + ".") or (m == name and name != NAMESPACE)
    ]
    for module in gone:
        sys.modules.pop(module, None)
    return gone


def _import_folder(key: str, folder: Path) -> types.ModuleType:
    init = folder / "__init__.py"
    if not init.is_file():
        raise PluginLoadError(f"no __init__.py in {folder}")
    if NAMESPACE not in sys.modules:
        parent = types.ModuleType(NAMESPACE, "Namespace of plugins loaded by hermesd.")
        parent.__path__ = []
        sys.modules[NAMESPACE] = parent
    name = module_name(key)
    drop_modules(name)
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise PluginLoadError(f"cannot import {init}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        drop_modules(name)
        raise
    return module


def import_plugin(candidate: Candidate) -> Callable[[Any], Any]:
    """Import ``candidate`` and return its ``register`` callable (may raise anything)."""
    if candidate.entry_point is not None:
        loaded: Any = candidate.entry_point.load()
    elif candidate.folder is not None:
        loaded = _import_folder(candidate.key, candidate.folder)
    else:
        raise PluginLoadError("nothing to import")
    register = getattr(loaded, "register", None)
    if callable(register):
        return register  # type: ignore[no-any-return]
    if not isinstance(loaded, types.ModuleType) and callable(loaded):
        return loaded  # type: ignore[no-any-return]  # entry point naming the function itself
    raise PluginLoadError("no register() function")
