"""What a plugin declares (its manifest) and what became of it (its record).

`parse_manifest` reads ``plugin.yaml``/``plugin.yml`` (docs/hermes-compat.md §1, §3) through
`hermesd.runtime.plain_yaml` (no anchors or aliases, at most 64 KiB): version coerced to str,
``requires_env`` in the simple (``- NAME``) and rich (``{name, description, url, secret}``,
``password:`` meaning ``secret:``) forms, unknown fields ignored with a debug log. The manifest
is written by whoever wrote the plugin, so its fields are held to rules before anything reads
them (docs/plugins.md, "Manifest rules"): ``name``, ``version``, ``description``, ``author``
and ``kind`` are scalars read as strings, with length caps and no control characters; a name is
a short identifier; ``requires_env`` names plain variables and never one that changes how
programs are loaded or run (`refused_env_name`). A broken rule is a `ManifestError` naming the
field. `PluginRecord` is one row of the plugin listing: identity, where it came from, its
state and reason, and what it registered. Nothing here imports plugin code or touches a
registry.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hermesd.runtime.plain_yaml import PlainYamlError, load_plain, read_capped
from hermesd.tools.schema import Finding

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

State = Literal["loaded", "disabled", "not-enabled", "error", "missing-env", "memory-provider"]
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
    kind_declared: bool = False  # plugin.yaml names a kind (else a memory provider is sniffed)
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


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Length caps of the scalar fields, in characters.
FIELD_LIMITS = {"name": 64, "version": 64, "description": 1000, "author": 200, "kind": 64}
MAX_LIST_ITEMS = 256  # provides_tools, provides_hooks, requires_env
MAX_ITEM_CHARS = 1000  # one list item; a requires_env description or url
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # tab and newline are not in it
_CONTROL_OR_NEWLINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# Variables a plugin may not ask the owner to set: whoever sets them decides what code runs
# (the dynamic loader, an interpreter, the shell, git) or whom TLS trusts, in the daemon and
# every program it starts. Names are compared in upper case.
_LOADER = "the dynamic loader and the C library read it"
_INTERPRETER = "an interpreter reads it when it starts"
_SHELL = "the shell and the programs the daemon starts depend on it"
_TRUST = "it decides where the daemon's connections go or whom they trust"
REFUSED_ENV_PREFIXES: tuple[tuple[str, str], ...] = (
    ("LD_", _LOADER),
    ("DYLD_", _LOADER),
    ("MALLOC_", _LOADER),
    ("PYTHON", _INTERPRETER),
    ("PERL", _INTERPRETER),
    ("RUBY", _INTERPRETER),
    ("NODE_", _INTERPRETER),
    ("GIT_", "git reads it when plugins are installed"),
    ("HERMES_", "it configures hermesd itself"),
)
REFUSED_ENV_NAMES: dict[str, str] = {
    **dict.fromkeys(
        ("GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH", "HOSTALIASES", "RESOLV_HOST_CONF"),
        _LOADER,
    ),
    **dict.fromkeys(
        ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "LUA_INIT"),
        _INTERPRETER,
    ),
    **dict.fromkeys(
        (
            "PATH",
            "HOME",
            "SHELL",
            "TMPDIR",
            "IFS",
            "ENV",
            "BASH_ENV",
            "SHELLOPTS",
            "BASHOPTS",
            "PS4",
            "PROMPT_COMMAND",
            "CDPATH",
            "ZDOTDIR",
            "EDITOR",
            "VISUAL",
            "PAGER",
        ),
        _SHELL,
    ),
    **dict.fromkeys(
        (
            "OPENSSL_CONF",
            "OPENSSL_ENGINES",
            "OPENSSL_MODULES",
            "SSL_CERT_FILE",
            "SSL_CERT_DIR",
            "SSLKEYLOGFILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "NO_PROXY",
        ),
        _TRUST,
    ),
}


def refused_env_name(name: str) -> str | None:
    """Why a plugin may not have the variable ``name`` set for it, or None when it may."""
    upper = name.upper()
    reason = REFUSED_ENV_NAMES.get(upper)
    if reason is None:
        reason = next(
            (why for prefix, why in REFUSED_ENV_PREFIXES if upper.startswith(prefix)), None
        )
    if reason is None:
        return None
    return f"{name} may not be set for a plugin: {reason}"


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple, set)):
        return "a list"
    return f"a {type(value).__name__}"


def _text(value: Any, field_name: str, limit: int, *, multiline: bool = False) -> str:
    """A scalar field as a string; ManifestError naming the field when it is not one."""
    if isinstance(value, (dict, list, tuple, set, bytes)):
        raise ManifestError(f"'{field_name}' must be a string, not {_shape(value)}")
    text = str(value)
    if len(text) > limit:
        raise ManifestError(f"'{field_name}' is {len(text)} characters long; the limit is {limit}")
    if (_CONTROL if multiline else _CONTROL_OR_NEWLINE).search(text):
        raise ManifestError(f"'{field_name}' contains control characters")
    return text


def _optional_text(data: dict[Any, Any], field_name: str, **kw: bool) -> str | None:
    value = data.get(field_name)
    if value is None or value == "":
        return None
    return _text(value, field_name, FIELD_LIMITS[field_name], **kw)


def _str_list(value: Any, field_name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"'{field_name}' must be a list")
    if len(value) > MAX_LIST_ITEMS:
        raise ManifestError(
            f"'{field_name}' has {len(value)} entries; the limit is {MAX_LIST_ITEMS}"
        )
    return [_text(item, f"{field_name}[{i}]", MAX_ITEM_CHARS) for i, item in enumerate(value)]


def _env_name(value: str) -> str:
    name = value.strip()
    if not ENV_NAME_RE.match(name):
        raise ManifestError(
            f"'requires_env' entry {name[:80]!r} is not an environment variable name "
            "(letters, digits and '_', not starting with a digit, at most 128)"
        )
    refused = refused_env_name(name)
    if refused:
        raise ManifestError(f"'requires_env': {refused}")
    return name


def parse_env_requirements(value: Any) -> list[EnvRequirement]:
    """``requires_env`` in simple and rich form (mixed freely)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ManifestError("'requires_env' must be a list")
    if len(value) > MAX_LIST_ITEMS:
        raise ManifestError(
            f"'requires_env' has {len(value)} entries; the limit is {MAX_LIST_ITEMS}"
        )
    result: list[EnvRequirement] = []
    for item in value:
        if isinstance(item, str) and item.strip():
            result.append(EnvRequirement(_env_name(item)))
        elif isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"]:
            secret = item.get("secret", item.get("password", False))
            name = _env_name(item["name"])
            result.append(
                EnvRequirement(
                    name=name,
                    description=_text(
                        item.get("description") or "",
                        f"requires_env {name} description",
                        MAX_ITEM_CHARS,
                        multiline=True,
                    ),
                    url=_text(item.get("url") or "", f"requires_env {name} url", MAX_ITEM_CHARS),
                    secret=bool(secret),
                )
            )
        else:
            raise ManifestError(f"'requires_env' entry {str(item)[:80]!r} has no variable name")
    return result


def parse_manifest(path: Path, default_name: str) -> Manifest:
    """Parse one manifest file; raises `ManifestError` (or OSError) when it cannot."""
    try:
        data = load_plain(read_capped(path))
    except PlainYamlError as exc:
        raise ManifestError(str(exc)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ManifestError("the manifest must be a mapping")
    unknown = sorted(str(k)[:80] for k in data if k not in KNOWN_FIELDS)
    if unknown:
        log.debug("%s: ignoring unknown fields %s", path, ", ".join(unknown[:20]))
    name = _optional_text(data, "name")
    if name is not None and not NAME_RE.match(name):
        raise ManifestError(
            f"plugin name {name!r} must be 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return Manifest(
        name=name or default_name,
        version=_optional_text(data, "version"),
        description=_optional_text(data, "description", multiline=True) or "",
        author=_optional_text(data, "author") or "",
        requires_env=parse_env_requirements(data.get("requires_env")),
        provides_tools=_str_list(data.get("provides_tools"), "provides_tools"),
        provides_hooks=_str_list(data.get("provides_hooks"), "provides_hooks"),
        kind=_optional_text(data, "kind") or "standalone",
        kind_declared="kind" in data,
    )


@dataclass(frozen=True)
class Shadowed:
    """A plugin with the same key from an earlier source, not loaded because of this one."""

    source: str
    location: str

    @property
    def warning(self) -> Finding:
        """The listing's warning about it."""
        return Finding(
            "warning",
            "",
            "",
            f"shadows the plugin of the same key from the {self.source} source "
            f"({self.location}), which is therefore not loaded",
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
    middleware: list[str] = field(default_factory=list)
    rejected_tools: list[RejectedTool] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    missing_env: list[str] = field(default_factory=list)
    shadows: list[Shadowed] = field(default_factory=list)
    #: memory providers: handed to ctx.register_memory_provider (a loaded plugin), or, for a
    #: provider plugin (state ``memory-provider``), {active, available, reason}
    memory_providers: list[str] = field(default_factory=list)
    provider_status: dict[str, Any] | None = None

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
        self.middleware.clear()
