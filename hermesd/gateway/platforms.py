"""Which platforms exist (built-in and from plugins), how each is configured, and its adapter.

A platform is a `PlatformEntry`: a name, a label, an ``adapter_factory(config)`` and a
``check_fn()`` (its library is importable), as ``ctx.register_platform`` gives them. The built-in
ones (Telegram; Matrix when its module is present) are entries like a plugin's. config.yaml's
``gateway.platforms.<name>`` turns one on; `Platforms.start` builds and connects each adapter,
and a platform that cannot start (unknown name, no token, library missing, connection refused)
is recorded with a sentence saying why (``gateway.status``, ``status``, ``doctor``) while the
others and the daemon go on.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hermesd.gateway.base import PlatformAdapter, PlatformConfig

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 30.0
#: keys the gateway reads itself; the rest of a platform's section is the adapter's (extra)
_OWN_KEYS = {"enabled", "token", "token_file", "owners", "allow", "as_user", "home_channel"}


@dataclass(frozen=True)
class PlatformEntry:
    """A platform one can turn on."""

    name: str
    label: str
    factory: Callable[[PlatformConfig], Any]
    check_fn: Callable[[], Any]
    validate_config: Callable[[PlatformConfig], Any] | None = None
    required_env: tuple[str, ...] = ()
    install_hint: str = ""
    source: str = "built-in"


def _builtin(name: str, label: str, module: str, hint: str) -> PlatformEntry:
    def factory(config: PlatformConfig) -> Any:
        return importlib.import_module(f"hermesd.gateway.{module}").create_adapter(config)

    def check() -> bool:
        return bool(importlib.import_module(f"hermesd.gateway.{module}").check_requirements())

    def validate(config: PlatformConfig) -> str | None:
        return None if config.token else f"{name}: no token (set token_file or token)"

    return PlatformEntry(name, label, factory, check, validate, install_hint=hint)


def _matrix_settings(config: PlatformConfig) -> str | None:
    # a token or a password file: the adapter module says what is missing
    return importlib.import_module("hermesd.gateway.matrix").validate_config(config)  # type: ignore[no-any-return]


BUILTIN = {
    "telegram": _builtin("telegram", "Telegram", "telegram", "python-telegram-bot<23"),
    "matrix": replace(
        _builtin("matrix", "Matrix", "matrix", "matrix-nio<0.27"),
        validate_config=_matrix_settings,
    ),
}


class Platforms:
    """The platforms configured, their adapters and how each one is doing."""

    def __init__(self, plugin_entries: Callable[[], list[PlatformEntry]]) -> None:
        self.plugin_entries = plugin_entries
        self.settings: dict[str, dict[str, Any]] = {}
        self.adapters: dict[str, PlatformAdapter] = {}
        self.states: dict[str, str] = {}

    def available(self) -> dict[str, PlatformEntry]:
        """Every platform one could turn on, by name (a plugin's may not replace a built-in)."""
        found = dict(BUILTIN)
        for entry in self.plugin_entries():
            found.setdefault(entry.name, entry)
        return found

    def configure(self, raw: Any) -> None:
        """Take ``gateway.platforms`` (a mapping of name to settings)."""
        self.settings = {}
        if not isinstance(raw, dict):
            return
        for name, section in raw.items():
            if isinstance(section, dict) and section.get("enabled", True):
                self.settings[str(name)] = dict(section)
            elif not isinstance(section, dict):
                self.states[str(name)] = f"error: gateway.platforms.{name} must be a mapping"

    def home_channel(self, name: str) -> str:
        """The chat ``deliver: <name>`` (no chat id) goes to."""
        return str(self.settings.get(name, {}).get("home_channel") or "")

    def state_of(self, name: str) -> str:
        """How platform ``name`` is doing, in a few words (an adapter that lost its connection
        since says so)."""
        state = self.states.get(name, "not configured")
        adapter = self.adapters.get(name)
        if state == "connected" and adapter is not None and not adapter.is_connected:
            why = adapter.fatal_error_message
            return f"error: {why}" if why else "disconnected"
        return state

    async def start(self, prepare: Callable[[PlatformAdapter], None]) -> None:
        """Build and connect every configured adapter; ``prepare`` sets its handlers."""
        entries = self.available()
        for name, section in self.settings.items():
            await self._start_one(name, section, entries, prepare)

    async def apply(self, raw: Any, prepare: Callable[[PlatformAdapter], None]) -> list[str]:
        """New ``gateway.platforms`` (a reload): a platform no longer configured is stopped;
        one added, one whose adapter settings changed and one not connected (a refused token
        fixed in its file, say) is started again; a change of ``owners``/``allow``/``as_user``
        alone leaves the adapter running. The names started again."""
        before = self.settings
        self.configure(raw)
        for name in before.keys() - self.settings.keys():
            await self._stop_one(name, "stopped: no longer configured")
        entries = self.available()
        restarted = []
        for name, section in self.settings.items():
            same = _adapter_keys(before.get(name)) == _adapter_keys(section)
            if same and self.state_of(name) == "connected":
                continue  # who may talk changed at most: the gateway's lists, not the adapter
            await self._stop_one(name, "restarting")
            await self._start_one(name, section, entries, prepare)
            restarted.append(name)
        return restarted

    async def _start_one(
        self,
        name: str,
        section: dict[str, Any],
        entries: Mapping[str, PlatformEntry],
        prepare: Callable[[PlatformAdapter], None],
    ) -> None:
        try:
            adapter = self._build(name, section, entries)
        except ValueError as exc:
            self.states[name] = f"error: {exc}"
            log.error("gateway: %s", exc)
            return
        prepare(adapter)
        self.adapters[name] = adapter
        await self._connect(name, adapter)

    async def _stop_one(self, name: str, state: str) -> None:
        adapter = self.adapters.pop(name, None)
        if adapter is not None:
            try:
                await asyncio.wait_for(adapter.disconnect(), 10)
            except Exception:
                log.exception("gateway: %s did not disconnect cleanly", name)
        if adapter is not None or name in self.states:
            self.states[name] = state

    def _build(
        self, name: str, section: dict[str, Any], entries: Mapping[str, PlatformEntry]
    ) -> PlatformAdapter:
        entry = entries.get(name)
        if entry is None:
            known = ", ".join(sorted(entries)) or "none"
            raise ValueError(f"unknown platform '{name}' (known: {known})")
        config = platform_config(name, section)
        missing = [v for v in entry.required_env if not os.environ.get(v)]
        if missing:
            raise ValueError(f"{name}: missing environment {', '.join(missing)}")
        if not entry.check_fn():
            raise ValueError(f"{name}: its library is missing ({entry.install_hint or 'see docs'})")
        if entry.validate_config is not None:
            verdict = entry.validate_config(config)
            if verdict is False or isinstance(verdict, str):
                raise ValueError(verdict or f"{name}: its settings are incomplete")
        adapter = entry.factory(config)
        if not isinstance(adapter, PlatformAdapter) and not hasattr(adapter, "connect"):
            raise ValueError(f"{name}: its factory returned {type(adapter).__name__}")
        return adapter  # type: ignore[no-any-return]

    async def _connect(self, name: str, adapter: PlatformAdapter) -> None:
        try:
            ok = await asyncio.wait_for(adapter.connect(), CONNECT_TIMEOUT)
        except Exception as exc:
            log.exception("gateway: %s did not connect", name)
            ok, why = False, f"{type(exc).__name__}: {exc}"
        else:
            why = adapter.fatal_error_message or "connect() returned False"
        self.states[name] = "connected" if ok else f"error: {why}"
        if ok:
            log.info("gateway: %s connected", name)

    async def stop(self) -> None:
        """Disconnect every adapter."""
        for name in list(self.adapters):
            await self._stop_one(name, "stopped")

    def listing(self) -> list[dict[str, Any]]:
        """Every platform: name, label, where it comes from, configured, state."""
        return [
            {
                "name": name,
                "label": entry.label,
                "source": entry.source,
                "configured": name in self.settings,
                "state": self.state_of(name),
            }
            for name, entry in sorted(self.available().items())
        ]


#: a platform's keys that the gateway reads (who may talk), not its adapter
_PEOPLE_KEYS = frozenset({"owners", "allow", "as_user"})


def _adapter_keys(section: dict[str, Any] | None) -> dict[str, Any] | None:
    """What an adapter is built from: the section without the gateway's people keys."""
    if section is None:
        return None
    return {k: v for k, v in section.items() if k not in _PEOPLE_KEYS}


def platform_config(name: str, section: dict[str, Any]) -> PlatformConfig:
    """A `PlatformConfig` from config.yaml's section; ``token_file`` is read (its first
    line), a ``token`` in the file wins over none."""
    token = section.get("token")
    token_file = section.get("token_file")
    if token_file:
        try:
            token = Path(os.path.expanduser(str(token_file))).read_text().strip()
        except OSError as exc:
            raise ValueError(f"{name}: cannot read token_file {token_file}: {exc}") from None
    extra = {k: v for k, v in section.items() if k not in _OWN_KEYS}
    return PlatformConfig(enabled=True, token=str(token) if token else None, extra=extra)


def plugin_platforms(registrations: Any) -> list[PlatformEntry]:
    """The platforms plugins registered (``ctx.register_platform``), as entries."""
    found = []
    for reg in registrations.of_kind("platform"):
        detail = reg.detail
        found.append(
            PlatformEntry(
                reg.name,
                str(detail.get("label") or reg.name),
                reg.obj,
                detail.get("check_fn") or (lambda: True),
                detail.get("validate_config"),
                tuple(detail.get("required_env") or ()),
                str(detail.get("install_hint") or ""),
                f"plugin {reg.owner}",
            )
        )
    return found
