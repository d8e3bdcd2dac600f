#!/usr/bin/env python3
"""Build the folder of plugins the NixOS module hands to hermesd through HERMES_PLUGIN_PATH.

Runs at build time (nix/module.nix, `services.hermes-agent.extraPlugins`): reads a JSON list of
``{"path": ..., "label": ...}`` and makes ``OUT/<name>`` a symlink to each plugin directory,
``<name>`` being the key hermesd will give it: the manifest's ``name``, else the folder's name.
Each directory must hold ``plugin.yaml`` (or ``plugin.yml``) and ``__init__.py``; two plugins
with one name fail the build naming both sources. Needs PyYAML.

    link_plugins.py SOURCES.json OUT
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

MANIFEST_NAMES = ("plugin.yaml", "plugin.yml")  # as hermesd.plugins.manifest looks for them
_STORE_NAME = re.compile(r"^[0-9a-df-np-sv-z]{32}-")  # /nix/store/<hash>-<name>
_FETCHER_DEFAULT = "source"


class PluginError(Exception):
    """A plugin directory cannot be used; the message says why."""


def folder_name(path: Path) -> str:
    """The directory's name as hermesd sees it through the link, without a store hash."""
    return _STORE_NAME.sub("", path.name)


def describe(source: dict[str, Any]) -> str:
    """How a source is named in messages: its path, and where it came from when known."""
    label = source.get("label")
    return f"{source['path']} ({label})" if label and label != source["path"] else source["path"]


def plugin_name(source: dict[str, Any]) -> tuple[str, bool]:
    """(key, taken from the folder name) for one plugin directory; raises PluginError."""
    import yaml

    path = Path(source["path"])
    where = describe(source)
    if not path.is_dir():
        raise PluginError(f"{where} is not a directory")
    manifest = next((path / n for n in MANIFEST_NAMES if (path / n).is_file()), None)
    if manifest is None:
        raise PluginError(f"{where} has no plugin.yaml: not a Hermes plugin directory")
    if not (path / "__init__.py").is_file():
        raise PluginError(f"{where} has no __init__.py: hermesd could not import it")
    try:
        data = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise PluginError(
            f"{where}: {manifest.name} does not parse: {str(exc).splitlines()[0]}"
        ) from None
    if data is not None and not isinstance(data, dict):
        raise PluginError(f"{where}: {manifest.name} must be a mapping")
    declared = (data or {}).get("name")
    key = str(declared) if declared else folder_name(path)
    if "/" in key or key.startswith((".", "__")) or not key.strip():
        raise PluginError(
            f"{where}: the name '{key}' cannot be a plugin folder name "
            "(no '/', no leading '.' or '__')"
        )
    return key, not declared


def duplicate_message(
    key: str, first: dict[str, Any], second: dict[str, Any], from_folder: bool
) -> str:
    """The build error for two plugins with one name."""
    lines = [f"two plugins are named '{key}':", f"  {describe(first)}", f"  {describe(second)}"]
    if from_folder and key == _FETCHER_DEFAULT:
        lines.append(
            "Neither plugin.yaml sets a name, so the folder name is used, and fetchers "
            'call their folder "source". Give each fetcher its own name, e.g. '
            'pkgs.fetchFromGitHub { name = "my-plugin"; owner = ...; }.'
        )
    elif from_folder:
        lines.append(
            "The folder name is used when plugin.yaml sets no name: rename one folder "
            "(a fetcher's `name = ...;`) or drop one of them."
        )
    else:
        lines.append(
            "Drop one of them from services.hermes-agent.extraPlugins, or give one a "
            "different `name:` in its plugin.yaml."
        )
    return "\n".join(lines)


def link_plugins(sources: list[dict[str, Any]], out: Path) -> list[str]:
    """Check every source and link it into ``out``; returns the error messages (none: done)."""
    errors: list[str] = []
    chosen: dict[str, tuple[dict[str, Any], bool]] = {}
    seen_paths: set[str] = set()
    for source in sources:
        if source["path"] in seen_paths:  # the same plugin declared twice is one plugin
            continue
        seen_paths.add(source["path"])
        try:
            key, from_folder = plugin_name(source)
        except PluginError as exc:
            errors.append(str(exc))
            continue
        if key in chosen:
            first, first_from_folder = chosen[key]
            errors.append(duplicate_message(key, first, source, from_folder and first_from_folder))
            continue
        chosen[key] = (source, from_folder)
    if errors:
        return errors
    out.mkdir(parents=True)
    for key, (source, _) in sorted(chosen.items()):
        os.symlink(source["path"], out / key)
    return []


def main(argv: list[str]) -> int:
    """Entry point: ``link_plugins.py SOURCES.json OUT``."""
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    sources = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    errors = link_plugins(sources, Path(argv[2]))
    for message in errors:
        print(f"services.hermes-agent.extraPlugins: {message}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
