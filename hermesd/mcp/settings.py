"""`mcp_servers.<name>` in config.yaml: checking each server's settings, and ``${VAR}`` expansion.

`check_servers` is what the daemon's schema calls for the ``mcp_servers`` section: it returns
the servers as `ServerSettings` (unchanged text, ``${...}`` still in it) and a list of warnings
(unknown keys), or raises `McpSettingsError` naming the dotted key. `ServerSettings.resolved`
expands ``${VAR}`` and ``${env:VAR}`` from the environment and ``.env`` when the server is about
to be connected, so a changed ``.env`` needs only a restart of the server, not of the daemon.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

DEFAULT_TIMEOUT = 300.0
DEFAULT_CONNECT_TIMEOUT = 60.0
APPROVALS = ("always", "never", "patterns")
TRANSPORTS = ("streamable_http", "http", "sse")
# Settings of the reference that hermesd does not implement: named in a warning, not silently.
_NOT_IMPLEMENTED = {
    "auth",
    "oauth",
    "client_cert",
    "client_key",
    "identity_header",
    "skip_preflight",
    "keepalive_interval",
    "idle_timeout_seconds",
    "max_lifetime_seconds",
    "lifecycle",
    "supports_parallel_tool_calls",
    "sampling",
}
_KNOWN = {
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "transport",
    "timeout",
    "connect_timeout",
    "enabled",
    "tools",
    "approval",
    "approval_patterns",
    "trusted",
    "sandbox",
}
_SANDBOX_KEYS = ("writable", "readable")
_TOOL_FILTER_KEYS = {"include", "exclude", "resources", "prompts"}
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")


def _editor_variables() -> dict[str, str]:
    """The editor-style variables the reference also accepts (Cursor's MCP config)."""
    return {"userHome": os.path.expanduser("~"), "pathSeparator": os.sep}


class McpSettingsError(ValueError):
    """An ``mcp_servers`` entry cannot be used; the message names the key."""


@dataclass(frozen=True)
class ServerSettings:
    """One server's settings, as written (``${VAR}`` not yet expanded)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    transport: str = "streamable_http"
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    enabled: bool = True
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    resources: bool = True
    prompts: bool = True
    approval: str = "always"
    approval_patterns: tuple[str, ...] = ()
    trusted: bool = False
    writable: tuple[str, ...] = ()  # sandbox.writable: more folders a stdio server may write
    readable: tuple[str, ...] = ()  # sandbox.readable: readable_deny paths it may read
    extra: tuple[str, ...] = field(default=(), compare=False)

    @property
    def kind(self) -> str:
        """``stdio``, ``streamable_http`` or ``sse``."""
        if self.command is not None:
            return "stdio"
        return "sse" if self.transport == "sse" else "streamable_http"

    def wants_tool(self, tool: str) -> bool:
        """The include/exclude filter: with ``include`` only matches pass (include wins over
        exclude); otherwise everything but ``exclude`` matches."""
        if self.include:
            return any(fnmatch.fnmatchcase(tool, glob) for glob in self.include)
        return not any(fnmatch.fnmatchcase(tool, glob) for glob in self.exclude)

    def asks_for(self, tool: str) -> bool:
        """Whether a call of ``tool`` (the server's own name) asks a person first."""
        if self.approval == "never":
            return False
        if self.approval == "patterns":
            return any(fnmatch.fnmatchcase(tool, glob) for glob in self.approval_patterns)
        return True

    def resolved(self, values: Mapping[str, str]) -> ServerSettings:
        """A copy with every ``${VAR}``/``${env:VAR}`` replaced from ``values``; raises
        `McpSettingsError` naming a variable that is not set."""

        known = {**_editor_variables(), **values}

        def expand(text: str, where: str) -> str:
            def one(match: re.Match[str]) -> str:
                name = match.group(1)
                if name not in known:
                    raise McpSettingsError(
                        f"mcp_servers.{self.name}.{where}: ${{{name}}} is not set in the "
                        "environment or .env"
                    )
                return known[name]

            return _VARIABLE.sub(one, text.replace("${/}", os.sep))

        return replace(
            self,
            command=None if self.command is None else expand(self.command, "command"),
            args=tuple(expand(a, "args") for a in self.args),
            env=tuple((k, expand(v, f"env.{k}")) for k, v in self.env),
            cwd=None if self.cwd is None else expand(self.cwd, "cwd"),
            url=None if self.url is None else expand(self.url, "url"),
            headers=tuple((k, expand(v, f"headers.{k}")) for k, v in self.headers),
            writable=tuple(expand(p, "sandbox.writable") for p in self.writable),
            readable=tuple(expand(p, "sandbox.readable") for p in self.readable),
        )


def check_servers(raw: Any) -> tuple[dict[str, ServerSettings], list[str]]:
    """Every server of the ``mcp_servers`` mapping, checked; raises `McpSettingsError`."""
    if raw is None:
        return {}, []
    if not isinstance(raw, dict):
        raise McpSettingsError(f"'mcp_servers' must be a mapping, got {type(raw).__name__}")
    servers: dict[str, ServerSettings] = {}
    warnings: list[str] = []
    for name, entry in raw.items():
        if not isinstance(name, str) or not _SERVER_NAME.match(name):
            raise McpSettingsError(
                f"'mcp_servers.{name}': a server name is 1-64 letters, digits, '_', '-' or '.'"
            )
        server = check_server(name, entry)
        servers[name] = server
        warnings.extend(
            f"'mcp_servers.{name}.{key}' is not implemented by hermesd and is ignored"
            if key in _NOT_IMPLEMENTED
            else f"unknown setting 'mcp_servers.{name}.{key}' ignored"
            for key in server.extra
        )
    return servers, warnings


def check_server(name: str, entry: Any) -> ServerSettings:
    """One ``mcp_servers.<name>`` entry; raises `McpSettingsError`."""
    where = f"mcp_servers.{name}"
    if not isinstance(entry, dict):
        raise McpSettingsError(f"'{where}' must be a mapping, got {type(entry).__name__}")
    command = _opt_str(entry, "command", where)
    url = _opt_str(entry, "url", where)
    if (command is None) == (url is None):
        raise McpSettingsError(
            f"'{where}' needs exactly one of 'command' (a stdio server) or 'url' (HTTP)"
        )
    if url is not None and not re.match(r"^(https?://|\$\{)", url):
        raise McpSettingsError(f"'{where}.url' must be an http:// or https:// URL")
    transport = _opt_str(entry, "transport", where) or "streamable_http"
    if transport not in TRANSPORTS:
        raise McpSettingsError(f"'{where}.transport' must be one of {', '.join(TRANSPORTS)}")
    if command is not None and "transport" in entry and transport != "streamable_http":
        raise McpSettingsError(f"'{where}.transport' applies only to a server with 'url'")
    tools = entry.get("tools") or {}
    if not isinstance(tools, dict):
        raise McpSettingsError(f"'{where}.tools' must be a mapping with include/exclude")
    unknown_tools = set(tools) - _TOOL_FILTER_KEYS
    if unknown_tools:
        raise McpSettingsError(
            f"'{where}.tools' accepts include, exclude, resources and prompts, not "
            + ", ".join(sorted(map(str, unknown_tools)))
        )
    trusted = _bool(entry, "trusted", where, False)
    approval = _opt_str(entry, "approval", where) or ("never" if trusted else "always")
    if approval not in APPROVALS:
        raise McpSettingsError(f"'{where}.approval' must be one of {', '.join(APPROVALS)}")
    patterns = _str_list(entry, "approval_patterns", where)
    if approval == "patterns" and not patterns:
        raise McpSettingsError(
            f"'{where}.approval: patterns' needs 'approval_patterns' (tool name globs that ask)"
        )
    writable, readable = _sandbox(entry, where, command is not None)
    return ServerSettings(
        name=name,
        command=command,
        args=_str_list(entry, "args", where),
        env=_str_map(entry, "env", where),
        cwd=_opt_str(entry, "cwd", where),
        url=url,
        headers=_str_map(entry, "headers", where),
        transport="sse" if transport == "sse" else "streamable_http",
        timeout=_seconds(entry, "timeout", where, DEFAULT_TIMEOUT),
        connect_timeout=_seconds(entry, "connect_timeout", where, DEFAULT_CONNECT_TIMEOUT),
        enabled=_bool(entry, "enabled", where, True),
        include=_str_list(tools, "include", f"{where}.tools"),
        exclude=_str_list(tools, "exclude", f"{where}.tools"),
        resources=_bool(tools, "resources", f"{where}.tools", True),
        prompts=_bool(tools, "prompts", f"{where}.tools", True),
        approval=approval,
        approval_patterns=patterns,
        trusted=trusted,
        writable=writable,
        readable=readable,
        extra=tuple(sorted(str(k) for k in entry if k not in _KNOWN)),
    )


def _sandbox(
    entry: Mapping[str, Any], where: str, stdio: bool
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``sandbox: {writable, readable}`` of a stdio server: absolute paths (``~`` and
    ``${VAR}`` allowed at the start)."""
    value = entry.get("sandbox")
    if value is None:
        return (), ()
    if not stdio:
        raise McpSettingsError(f"'{where}.sandbox' applies only to a stdio server (command)")
    if not isinstance(value, dict):
        raise McpSettingsError(f"'{where}.sandbox' must be a mapping with writable/readable")
    unknown = sorted(str(k) for k in value if k not in _SANDBOX_KEYS)
    if unknown:
        raise McpSettingsError(
            f"'{where}.sandbox' accepts writable and readable, not {', '.join(unknown)}"
        )
    found = []
    for key in _SANDBOX_KEYS:
        paths = _str_list(value, key, f"{where}.sandbox")
        for path in paths:
            if not path.startswith(("/", "~", "${")) or "\0" in path:
                raise McpSettingsError(
                    f"'{where}.sandbox.{key}' entries must be absolute paths (or start with "
                    f"~ or ${{VAR}}), not {path!r}"
                )
        found.append(paths)
    return found[0], found[1]


def _opt_str(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise McpSettingsError(f"'{where}.{key}' must be a non-empty string")
    return value


def _str_list(entry: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(
        isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value
    ):
        raise McpSettingsError(f"'{where}.{key}' must be a list of strings")
    return tuple(str(v) for v in value)


def _str_map(entry: Mapping[str, Any], key: str, where: str) -> tuple[tuple[str, str], ...]:
    value = entry.get(key)
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise McpSettingsError(f"'{where}.{key}' must be a mapping of names to strings")
    pairs = []
    for k, v in value.items():
        if not isinstance(k, str) or not k or isinstance(v, (dict, list)) or v is None:
            raise McpSettingsError(f"'{where}.{key}.{k}' must be a string")
        text = ("true" if v else "false") if isinstance(v, bool) else str(v)
        if "\0" in k or "\0" in text or (key == "env" and "=" in k):
            raise McpSettingsError(f"'{where}.{key}.{k}' is not a usable name or value")
        pairs.append((k, text))
    return tuple(pairs)


def _seconds(entry: Mapping[str, Any], key: str, where: str, default: float) -> float:
    value = entry.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise McpSettingsError(f"'{where}.{key}' must be a positive number of seconds")
    return float(value)


def _bool(entry: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = entry.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise McpSettingsError(f"'{where}.{key}' must be true or false")
    return value


def check_allowlists(entries: Any) -> dict[str, tuple[str, ...]]:
    """``plugins.entries.<key>.mcp_allowlist`` of every plugin (server globs, or
    ``server:tool`` globs); raises `McpSettingsError`."""
    if entries is None:
        return {}
    if not isinstance(entries, dict):
        raise McpSettingsError("'plugins.entries' must be a mapping of plugin keys")
    found: dict[str, tuple[str, ...]] = {}
    for key, entry in entries.items():
        if entry is None:
            continue
        if not isinstance(entry, dict):
            raise McpSettingsError(f"'plugins.entries.{key}' must be a mapping")
        found[str(key)] = _str_list(entry, "mcp_allowlist", f"plugins.entries.{key}")
    return found
