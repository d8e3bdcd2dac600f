"""The ``ctx`` members of the plugin API after 0.19 (docs/hermes-compat.md §4, "Newer ctx").

Followed from the upstream hermes-agent source (the commit is recorded in the compat doc):
``set_config``, ``state``, ``emit``/``subscribe``, ``spawn_task``, ``has_capability``,
``register_system_prompt_section``, ``register_redaction_patterns``,
``register_approval_transport``, ``register_context_reference``, ``platform_actions`` and
``subagent_lifecycle``. `NewerContext`
is mixed into `PluginContext`; what a plugin adds lives on the hook bus's `PluginSurfaces`, so
unloading the plugin removes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd import redact
from hermesd.plugins.platform_actions import PlatformActions
from hermesd.runtime.hooks_surfaces import (
    HOST_EVENT_NAMESPACE,
    SECTION_MAX_CHARS,
    SECTION_POSITIONS,
    ApprovalTransport,
    PromptSection,
    valid_section_id,
    valid_transport_name,
)

if TYPE_CHECKING:
    from hermesd.plugins.registrar import PluginServices

log = logging.getLogger(__name__)

_SETTING_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
_RESERVED_ROOTS = frozenset({"model", "plugins", "security", "settings"})
_STATE_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
STATE_QUOTA_BYTES = 10 * 1024 * 1024
#: capability ids and the older ``plugins.entries.<id>.allow_*`` key that also grants each
_LEGACY_GRANTS = {
    "tools.override": "allow_tool_override",
    "gateway.injection": "allow_gateway_injection",
    "gateway.platform_actions": "allow_platform_actions",
    "gateway.plugin_status": "allow_plugin_status",
}
_state_locks: dict[str, threading.Lock] = {}
_state_locks_guard = threading.Lock()


def setting_segments(key: Any) -> tuple[str, ...]:
    """``a.b`` as ``("a", "b")``; a global, cross-plugin or traversal path is a ValueError."""
    parts = tuple(key.split(".")) if isinstance(key, str) else ()
    if (
        not parts
        or parts[0].lower() in _RESERVED_ROOTS
        or not all(_SETTING_SEGMENT.fullmatch(p) for p in parts)
    ):
        raise ValueError(
            f"{key!r} is not a plugin-relative setting such as 'endpoint' or 'retry.policy'"
        )
    return parts


class PluginState:
    """A plugin's durable JSON key/value store: ``$HERMES_HOME/plugin-data/<id>/state.json``."""

    def __init__(self, home: Path, plugin_id: str) -> None:
        safe = re.sub(r"[^A-Za-z0-9_-]", "_", plugin_id)
        self.data_dir = home / "plugin-data" / safe
        self.path = self.data_dir / "state.json"
        self.quota_bytes = STATE_QUOTA_BYTES
        with _state_locks_guard:
            self._lock = _state_locks.setdefault(str(self.path), threading.Lock())

    @staticmethod
    def _check(key: Any) -> None:
        if not isinstance(key, str) or not _STATE_KEY.fullmatch(key) or ".." in key:
            raise ValueError(
                "Plugin state keys are 1-128 letters, digits, '_', '-', '.' or ':' "
                f"(without '..'), not {key!r}"
            )

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"Cannot parse plugin state {self.path}: {exc}") from exc
        if not isinstance(data, dict):
            raise RuntimeError(f"Cannot parse plugin state {self.path}: not an object")
        return data

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, else ``default``."""
        self._check(key)
        with self._lock:
            return self._read().get(key, default)

    def set(self, key: str, value: Any) -> None:
        """Store ``value`` (JSON) under ``key``, atomically, within the quota."""
        self._check(key)
        with self._lock:
            data = {**self._read(), key: value}
            try:
                encoded = json.dumps(data, ensure_ascii=False, indent=2)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"Plugin state value for {key!r} is not JSON") from exc
            if len(encoded.encode()) > self.quota_bytes:
                raise ValueError(
                    f"Plugin state quota exceeded: {len(encoded)} bytes is over {self.quota_bytes}"
                )
            self._write(encoded)

    def delete(self, key: str) -> bool:
        """Remove ``key``; whether it was there."""
        self._check(key)
        with self._lock:
            data = self._read()
            if key not in data:
                return False
            del data[key]
            self._write(json.dumps(data, ensure_ascii=False, indent=2))
        return True

    def _write(self, encoded: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(encoded)
        os.replace(tmp, self.path)


class SubagentLifecycle:
    """``ctx.subagent_lifecycle``: snapshots of the running sub-agents (delegate_task's
    children), read when asked."""

    def __init__(self, source: Callable[[], list[dict[str, Any]]] | None) -> None:
        self._source = source

    def list(self) -> list[dict[str, Any]]:
        """One dict per live child: its session, parent, goal, role, status and start time."""
        return [] if self._source is None else [dict(s) for s in self._source()]

    snapshots = list


class NewerContext:
    """The post-0.19 ``ctx`` members, mixed into `PluginContext`."""

    plugin_name: str
    _services: PluginServices
    _keep: Callable[..., None]  # ProviderRegistrars'

    if TYPE_CHECKING:

        @property
        def config(self) -> dict[str, Any]:
            """PluginContext's: this plugin's config section."""

    # -- configuration and state ------------------------------------------------------------

    def set_config(self, key: str, value: Any) -> None:
        """Write ``plugins.entries.<plugin>.settings.<key>`` in config.yaml (comments kept)."""
        parts = setting_segments(key)
        setter = self._services.config_setter
        if setter is None:
            raise RuntimeError("this process cannot change config.yaml")
        setter(".".join(("plugins", "entries", self.plugin_name, "settings", *parts)), value)

    @cached_property
    def state(self) -> PluginState:
        """This plugin's durable key/value store."""
        return PluginState(self._services.home, self.plugin_name)

    def has_capability(self, capability: str) -> bool:
        """Whether the owner granted ``capability`` (``granted_capabilities``, or the older
        ``allow_*`` key for it); anything unknown or unreadable is False."""
        section = self.config
        granted = section.get("granted_capabilities")
        if isinstance(granted, list) and capability in granted:
            return True
        legacy = _LEGACY_GRANTS.get(capability)
        return legacy is not None and section.get(legacy) is True

    # -- events and tasks -------------------------------------------------------------------

    def emit(self, event: str, payload: Mapping[str, Any] | None = None) -> int:
        """Publish ``<plugin>:<event>`` to its subscribers; how many will receive it."""
        if not event or not isinstance(event, str):
            raise ValueError(f"Plugin '{self.plugin_name}' emit() needs an event name")
        if ":" in event:
            raise ValueError(
                f"Plugin '{self.plugin_name}' may not emit '{event}': emit the bare name; the "
                f"namespace is '{self.plugin_name}:' and '{HOST_EVENT_NAMESPACE}:' is the host's"
            )
        if payload is not None and not isinstance(payload, Mapping):
            raise TypeError(f"Plugin '{self.plugin_name}' emit() payload must be a dict")
        surfaces = self._services.hooks.surfaces
        return surfaces.emit(f"{self.plugin_name}:{event}", dict(payload or {}))

    def subscribe(self, event: str, callback: Callable[..., Any]) -> None:
        """Call ``callback(**payload)`` on a worker thread for each ``<plugin>:<event>``."""
        if not event or not isinstance(event, str):
            raise ValueError(f"Plugin '{self.plugin_name}' subscribe() needs an event name")
        self._services.hooks.surfaces.subscribe(self.plugin_name, event, callback)

    def spawn_task(self, coro: Any, *, name: str | None = None) -> Any:
        """Run ``coro`` on the daemon's loop; it is cancelled when this plugin unloads."""
        if not asyncio.iscoroutine(coro):
            raise TypeError("spawn_task expects a coroutine")
        task_name = name or f"plugin:{self.plugin_name}:task"
        return self._services.hooks.surfaces.spawn(self.plugin_name, coro, task_name)

    # -- what turns see ---------------------------------------------------------------------

    def register_system_prompt_section(
        self,
        id: str,  # the reference's parameter name
        content: str | Callable[[Mapping[str, Any]], str],
        *,
        position: str = "after_memory",
        max_chars: int = SECTION_MAX_CHARS,
    ) -> None:
        """Add a block to the system prompt of every turn: text, or ``fn(session_info)``."""
        if not valid_section_id(id):
            raise ValueError(
                "system prompt section id must be 1-128 lowercase letters, digits, '.', '_' or '-'"
            )
        if not isinstance(content, str) and not callable(content):
            raise TypeError("system prompt section content must be a string or callable")
        if position not in SECTION_POSITIONS:
            raise ValueError(f"system prompt section position must be one of: {position!r}")
        if isinstance(max_chars, bool) or not isinstance(max_chars, int):
            raise ValueError("system prompt section max_chars must be an int")
        if not 0 < max_chars <= SECTION_MAX_CHARS:
            raise ValueError(f"system prompt section max_chars must be 1..{SECTION_MAX_CHARS}")
        section = PromptSection(self.plugin_name, id, content, max_chars)
        self._services.hooks.surfaces.add_section(section)

    def register_context_reference(self, provider: Any) -> None:
        """Expand ``@<provider.prefix>:<value>`` in a user's message with ``provider.expand``
        (hermesd.runtime.context_refs); a refused provider is a warning, as in the reference."""
        try:
            kind = self._services.hooks.surfaces.references.add(self.plugin_name, provider)
        except ValueError as exc:
            log.warning(
                "Plugin '%s' context reference registration failed: %s", self.plugin_name, exc
            )
            return
        log.info("Plugin '%s' registered context reference @%s:", self.plugin_name, kind)

    def register_redaction_patterns(self, patterns: Any) -> int:
        """Add secret-shaped regexes to the daemon's redactor; how many were taken."""
        try:
            return redact.add_patterns(patterns, source=f"plugin:{self.plugin_name}")
        except Exception as exc:
            log.warning("Plugin '%s' redaction patterns refused: %s", self.plugin_name, exc)
            return 0

    def register_approval_transport(self, name: str, present_fn: Callable[..., Any]) -> None:
        """Another way approvals reach a person, used when ``security.approval.transport``
        names it: ``present_fn(request)`` returns the person's choice."""
        clean = str(name).strip().lower()
        if not valid_transport_name(clean):
            raise ValueError(
                "approval transport name must match [a-z0-9][a-z0-9_-]{0,63} and not be 'builtin'"
            )
        if not callable(present_fn):
            raise TypeError("approval transport present_fn must be callable")
        surfaces = self._services.hooks.surfaces
        surfaces.add_transport(ApprovalTransport(self.plugin_name, clean, present_fn))

    @cached_property
    def platform_actions(self) -> PlatformActions:
        """Verbs on the messaging platforms the gateway runs (``add_reaction``,
        ``set_thread_title``, ``send_status``, …), gated by the plugin's capabilities; listed
        in ``plugins info``."""
        services = self._services
        actions = PlatformActions(
            self.plugin_name, self.has_capability, lambda: services.platform_actions
        )
        self._keep("platform_actions", "platform_actions", actions)
        return actions

    @cached_property
    def subagent_lifecycle(self) -> SubagentLifecycle:
        """Snapshots of running sub-agents."""
        return SubagentLifecycle(self._services.subagents)


#: Characters of an MCP result ``call_mcp(..., arguments=)`` returns before truncating.
MCP_RESULT_CHAR_CAP = 65536


def mcp_envelope(raw: Any) -> dict[str, Any]:
    """An MCP result string as the newer API's envelope: ``{"ok": True, "result": ...}`` or
    ``{"ok": False, "error": ...}``, with ``"truncated": True`` when it was cut."""
    text = raw if isinstance(raw, str) else "" if raw is None else str(raw)
    truncated = len(text) > MCP_RESULT_CHAR_CAP
    if truncated:
        text = text[:MCP_RESULT_CHAR_CAP] + "… [truncated]"
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = None
    envelope: dict[str, Any]
    if isinstance(parsed, dict) and "error" in parsed:
        envelope = {"ok": False, "error": parsed["error"]}
    elif isinstance(parsed, dict) and "result" in parsed:
        envelope = {"ok": True, "result": parsed["result"]}
        if "structuredContent" in parsed:
            envelope["structuredContent"] = parsed["structuredContent"]
    else:
        envelope = {"ok": True, "result": parsed if parsed is not None else text}
    return {**envelope, "truncated": True} if truncated else envelope
