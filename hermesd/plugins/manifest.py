"""What a plugin declares (its manifest) and what became of it (its record).

`parse_manifest` reads ``plugin.yaml``/``plugin.yml`` (docs/hermes-compat.md §1, §3): version
coerced to str, ``requires_env`` in the simple (``- NAME``) and rich (``{name, description, url,
secret}``, ``password:`` meaning ``secret:``) forms, unknown fields ignored with a debug log.
`PluginRecord` is one row of the plugin listing: identity, where it came from, its state and
reason, and what it registered. Nothing here imports plugin code or touches a registry.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from hermesd.plugins.tool_schema import Finding

log = logging.getLogger(__name__)

MANIFEST_NAMES = ("plugin.yaml", "plugin.yml")
KNOWN_FIELDS = {
    "name",
    "version",
    "description",
    "author",
    "requires_env",
    "provides_tools",
    "provides_hooks",
    "kind",
}

State = Literal["loaded", "disabled", "not-enabled", "error", "missing-env"]
Source = Literal["bundled", "path", "user", "project", "entrypoint"]


class ManifestError(ValueError):
    """A manifest file that does not parse or has the wrong shape."""


@dataclass(frozen=True)
class EnvRequirement:
    """One variable from ``requires_env``."""

    name: str
    description: str = ""
    url: str = ""
    secret: bool = False


@dataclass
class Manifest:
    """A parsed ``plugin.yaml`` (or the metadata of an entry-point distribution)."""

    name: str
    version: str | None = None
    description: str = ""
    author: str = ""
    requires_env: list[EnvRequirement] = field(default_factory=list)
    provides_tools: list[str] = field(default_factory=list)
    provides_hooks: list[str] = field(default_factory=list)
    kind: str = "standalone"
    key: str = ""
    source: str = ""
    path: str | None = None


def find_manifest(folder: Path) -> Path | None:
    """The manifest file of ``folder``, if it has one."""
    for name in MANIFEST_NAMES:
        candidate = folder / name
        if candidate.is_file():
            return candidate
    return None


def _str_list(value: Any, field_name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"'{field_name}' must be a list")
    return [str(item) for item in value]


def parse_env_requirements(value: Any) -> list[EnvRequirement]:
    """``requires_env`` in simple and rich form (mixed freely)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ManifestError("'requires_env' must be a list")
    result: list[EnvRequirement] = []
    for item in value:
        if isinstance(item, str) and item.strip():
            result.append(EnvRequirement(item.strip()))
        elif isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"]:
            secret = item.get("secret", item.get("password", False))
            result.append(
                EnvRequirement(
                    name=item["name"].strip(),
                    description=str(item.get("description") or ""),
                    url=str(item.get("url") or ""),
                    secret=bool(secret),
                )
            )
        else:
            raise ManifestError(f"'requires_env' entry {item!r} has no variable name")
    return result


def parse_manifest(path: Path, default_name: str) -> Manifest:
    """Parse one manifest file; raises `ManifestError` (or OSError) when it cannot."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ManifestError(" ".join(str(exc).split())) from exc  # one listing line
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ManifestError("the manifest must be a mapping")
    unknown = sorted(str(k) for k in data if k not in KNOWN_FIELDS)
    if unknown:
        log.debug("%s: ignoring unknown fields %s", path, ", ".join(unknown))
    version = data.get("version")
    return Manifest(
        name=str(data.get("name") or default_name),
        version=None if version is None or version == "" else str(version),
        description=str(data.get("description") or ""),
        author=str(data.get("author") or ""),
        requires_env=parse_env_requirements(data.get("requires_env")),
        provides_tools=_str_list(data.get("provides_tools"), "provides_tools"),
        provides_hooks=_str_list(data.get("provides_hooks"), "provides_hooks"),
        kind=str(data.get("kind") or "standalone"),
    )


@dataclass
class RejectedTool:
    """A tool the plugin tried to register and why it was refused."""

    name: str
    reason: str


@dataclass
class PluginRecord:
    """One discovered plugin: identity, origin, state, and what it registered."""

    key: str
    name: str
    source: Source
    path: str | None
    version: str | None = None
    description: str = ""
    author: str = ""
    state: State = "not-enabled"
    reason: str = ""
    manifest: Manifest | None = None
    tools: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    cli_commands: list[str] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)
    rejected_tools: list[RejectedTool] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    missing_env: list[str] = field(default_factory=list)

    @property
    def loaded(self) -> bool:
        """True when the plugin's register() ran to completion."""
        return self.state == "loaded"

    def clear_registrations(self) -> None:
        """Forget what the plugin registered (after a rollback or unload)."""
        self.tools.clear()
        self.hooks.clear()
        self.commands.clear()
        self.cli_commands.clear()
        self.skills.clear()
