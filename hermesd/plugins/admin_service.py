"""Plugin management over RPC: ``plugins.info|enable|disable|install|set_env|update|remove|
reload|lint``, and the hot reload behind ``/reload-plugins`` and SIGHUP.

Owns the order of each operation (edit a file, then reload the plugin host) and one lock so
reloads never overlap. A reload re-reads ``plugins.enabled``/``disabled`` from config.yaml and
the values of ``.env``, unloads every plugin's registrations, forgets its modules and loads
everything again on a worker thread while the loop keeps serving: sessions and connections
stay, and a turn already running keeps the tool entries it started with (the agent pins them).
File formats are `hermesd.daemon.config_edit`'s job, sources and git `hermesd.plugins.install`'s,
the checks `hermesd.plugins.lint`'s. State-changing methods are owner only (declared so).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd import redact
from hermesd.plugins import install as installer
from hermesd.plugins.host import PluginHost, PluginRecord
from hermesd.plugins.lint import format_findings, lint_folder
from hermesd.plugins.listing import plugin_dict
from hermesd.rpc.connection import Call, Router
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.store.dbfile import storage_error

if TYPE_CHECKING:
    from hermesd.daemon.config import SettingsFiles

log = logging.getLogger(__name__)


_STATE_WORDS = {
    "loaded": "loaded",
    "error": "failed",
    "missing-env": "missing env",
    "disabled": "disabled",
    "not-enabled": "not enabled",
}


def state_counts(records: list[PluginRecord]) -> dict[str, int]:
    """How many plugins are in each state."""
    counts: dict[str, int] = {}
    for record in records:
        counts[record.state] = counts.get(record.state, 0) + 1
    return counts


def reload_summary(records: list[PluginRecord]) -> str:
    """``Reloaded plugins: 4 found — 2 loaded, 1 failed, 1 missing env``: every plugin counted."""
    counts = state_counts(records)
    if not records:
        return "Reloaded plugins: none found"
    parts = [f"{counts.pop(s)} {word}" for s, word in _STATE_WORDS.items() if s in counts]
    parts += [f"{n} {state}" for state, n in counts.items()]
    return f"Reloaded plugins: {len(records)} found — {', '.join(parts)}"


class PluginAdminService:
    """Enable, disable, install, update, remove and reload plugins."""

    def __init__(self, host: PluginHost, files: SettingsFiles) -> None:
        self.host = host
        self.files = files
        self.home = files.home
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled: asyncio.Task[dict[str, Any] | None] | None = None

    # --- service protocol --------------------------------------------------------------------

    def bind(self, router: Router) -> None:
        for name in (
            "info",
            "enable",
            "disable",
            "install",
            "set_env",
            "unset_env",
            "update",
            "remove",
            "reload",
            "lint",
        ):
            # each waits while plugins load or reload, as plugins.list does (info would
            # otherwise find a plugin missing)
            router.bind(f"plugins.{name}", self.host.gate.guard(getattr(self, f"rpc_{name}")))

    async def start(self) -> None:
        self._lock = asyncio.Lock()
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {}

    def reload(self, cfg: Any) -> None:
        """SIGHUP / config.reload: reload plugins too (scheduled; the signal handler returns)."""
        if self._loop is not None:
            self._scheduled = self._loop.create_task(self._reload_logged())

    async def _reload_logged(self) -> dict[str, Any] | None:
        try:
            result = await self.reload_plugins()
            log.info("plugins reloaded: %s", result["summary"].replace("\n", "; "))
            return result
        except Exception:
            log.exception("plugin reload failed")
            return None

    def forget_scheduled(self) -> None:
        """Drop the record of an earlier scheduled reload (it runs on regardless)."""
        self._scheduled = None

    async def scheduled_or_new_reload(self) -> dict[str, Any] | None:
        """The outcome of the plugin reload a config reload scheduled, or of a new one."""
        task, self._scheduled = self._scheduled, None
        if task is None:
            return await self._reload_logged()
        return await task

    # --- the reload --------------------------------------------------------------------------

    def _refresh_settings(self) -> None:
        manager = self.host.plugins
        try:
            cfg = self.files.load()
        except ValueError as exc:
            log.warning("config.yaml not re-read for the plugin reload: %s", exc)
        else:
            manager.settings = {
                "enabled": cfg.get("plugins.enabled"),
                "disabled": cfg.get("plugins.disabled") or [],
                "load_timeout": cfg.get("plugins.load_timeout"),
            }
            manager.load_timeout = float(cfg.get("plugins.load_timeout"))
        dotenv = self.files.apply_env()  # a key removed from .env is unset from the process
        manager.dotenv = dotenv
        self.host.tools.env = {**dotenv, **os.environ}

    async def reload_plugins(self) -> dict[str, Any]:
        """Unload and load every plugin again; the new listing and a summary."""
        assert self._lock is not None, "service not started"
        async with self._lock:
            await self.host.gate.wait()  # the start-up load, which holds the gate, not the lock
            self._refresh_settings()
            with self.host.gate:  # requests for plugins wait instead of finding them gone
                records = await asyncio.to_thread(self.host.plugins.reload)
            manager = self.host.plugins
            redact.configure(os.environ, manager.dotenv, manager.secret_env_names())
        loaded = [r for r in records if r.loaded]
        failed = [r for r in records if r.state == "error"]
        summary = reload_summary(records) + registered_summary(loaded)
        if failed:
            summary += "".join(f"\n  ✗ {r.key} — {r.reason}" for r in failed)
        return {
            "summary": summary,
            "loaded": [r.key for r in loaded],
            "failed": [{"key": r.key, "reason": r.reason} for r in failed],
            "counts": state_counts(records),
            "plugins": self.host.plugins.listing(),
            "text": self.host.plugins.listing_text(),
        }

    # --- helpers -----------------------------------------------------------------------------

    def _record(self, name: str) -> PluginRecord:
        manager = self.host.plugins
        record = manager.get(name) or next((r for r in manager.records() if r.name == name), None)
        if record is None:
            raise RpcError(
                Codes.NOT_FOUND,
                f"Plugin '{name}' not found. See hermesctl plugins list.",
                {"name": name},
            )
        return record

    def _present_env(self) -> set[str]:
        return {k for k, v in os.environ.items() if v} | {
            k for k, v in self.files.dotenv().items() if v
        }

    def _missing_rows(self, record: PluginRecord) -> list[dict[str, object]]:
        requirements = record.manifest.requires_env if record.manifest else []
        return installer.env_rows(requirements, self._present_env())

    def _user_folder(self, record: PluginRecord) -> Path:
        plugins_dir = (self.home / "plugins").resolve()
        path = Path(record.path).resolve() if record.path else None
        if record.source != "user" or path is None or path.parent != plugins_dir:
            raise RpcError(
                Codes.CONFLICT,
                f"plugin '{record.key}' comes from the {record.source} "
                f"source ({record.path}); only plugins installed in {plugins_dir} can "
                "be updated or removed here",
                {"source": record.source},
            )
        return Path(record.path or "")

    # --- methods -----------------------------------------------------------------------------

    def rpc_info(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        record = self._record(p["name"])
        info = plugin_dict(record)
        present = self._present_env()
        requirements = record.manifest.requires_env if record.manifest else []
        info["requires_env"] = [
            {
                "name": r.name,
                "description": r.description,
                "url": r.url,
                "secret": r.secret,
                "present": r.name in present,
            }
            for r in requirements
        ]
        info["git"] = bool(record.path and (Path(record.path) / ".git").exists())
        return info

    async def _set_enabled(self, name: str, enable: bool) -> dict[str, Any]:
        record = self._record(name)
        try:
            cfg = self.files.load()
        except ValueError as exc:
            raise RpcError(Codes.CONFLICT, f"config.yaml cannot be edited: {exc}") from None
        enabled = cfg.get("plugins.enabled")
        disabled = [
            k for k in cfg.get("plugins.disabled") or [] if k not in (record.key, record.name)
        ]
        new_enabled: list[str] | bool | None = False
        if enable and enabled is not None and record.key not in enabled:
            new_enabled = [*enabled, record.key]
        elif not enable:
            if enabled is not None:
                new_enabled = [k for k in enabled if k not in (record.key, record.name)]
            disabled.append(record.key)
        try:
            kept = await asyncio.to_thread(self.files.set_plugin_lists, new_enabled, disabled)
        except (ValueError, OSError) as exc:
            raise RpcError(Codes.CONFLICT, f"config.yaml not changed: {exc}") from None
        if not kept:
            log.warning(
                "config.yaml was re-written without its comments (its plugins section "
                "could not be edited line by line)"
            )
        await self.reload_plugins()
        after = self.host.plugins.get(record.key)
        message = (
            f"✓ Plugin {record.key} enabled." if enable else f"⊘ Plugin {record.key} disabled."
        )
        return {
            "message": message,
            "comments_kept": kept,
            "state": after.state if after else None,
            "reason": after.reason if after else "",
            "missing_env": self._missing_rows(after) if after else [],
        }

    async def rpc_enable(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return await self._set_enabled(p["name"], True)

    async def rpc_disable(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return await self._set_enabled(p["name"], False)

    async def rpc_install(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        try:
            done = await asyncio.to_thread(
                installer.install, self.home / "plugins", p["source"], force=bool(p.get("force"))
            )
        except installer.InstallError as exc:
            code = Codes.CONFLICT if exc.kind == "conflict" else Codes.INVALID_PARAMS
            raise RpcError(code, f"Install failed: {exc}", {"param": "source"}) from None
        log.info(
            "installed plugin '%s' into %s%s",
            done.name,
            done.path,
            " (replaced)" if done.replaced else "",
        )
        await self.reload_plugins()
        record = self.host.plugins.get(done.name)
        return {
            "name": done.name,
            "path": str(done.path),
            "replaced": done.replaced,
            "missing_env": installer.env_rows(done.manifest.requires_env, self._present_env()),
            "plugin": plugin_dict(record) if record else None,
        }

    async def rpc_set_env(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        values = p["values"]
        for name, value in values.items():
            problem = self.files.check_env_value(name, value)
            if problem:
                raise RpcError(
                    Codes.INVALID_PARAMS,
                    f"plugins.set_env: {problem}",
                    {"param": "values", "name": name if isinstance(name, str) else None},
                )
        try:
            await asyncio.to_thread(self.files.set_env, values)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):  # as the store says it
                raise storage_error(exc, self.home / ".env") or exc from None
            raise RpcError(Codes.CONFLICT, f".env not changed: {exc}") from None
        except ValueError as exc:  # an EditError
            raise RpcError(Codes.CONFLICT, f".env not changed: {exc}") from None
        # Into the environment (unless set outside .env), and new secrets are redacted from
        # tool results at once, not only after a reload.
        redact.configure(os.environ, await asyncio.to_thread(self.files.apply_env))
        log.info(
            "set %d variable(s) in %s: %s",
            len(values),
            self.home / ".env",
            ", ".join(sorted(values)),
        )
        return {"written": sorted(values), "path": str(self.home / ".env")}

    async def rpc_unset_env(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        names = p["names"]
        if not all(isinstance(n, str) for n in names):
            raise RpcError(Codes.INVALID_PARAMS, "plugins.unset_env: names must be strings")
        try:
            removed = await asyncio.to_thread(self.files.unset_env, list(names))
        except OSError as exc:
            raise RpcError(Codes.CONFLICT, f".env not changed: {exc}") from None
        # unset from the environment too, unless it was set outside .env
        redact.configure(os.environ, await asyncio.to_thread(self.files.apply_env))
        log.info(
            "removed %d variable(s) from %s: %s",
            len(removed),
            self.files.dotenv_path,
            ", ".join(removed),
        )
        return {"removed": removed, "path": str(self.files.dotenv_path)}

    async def rpc_update(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        folder = self._user_folder(self._record(p["name"]))
        try:
            output = await asyncio.to_thread(installer.update, folder)
        except installer.InstallError as exc:
            if exc.kind == "conflict":  # the sentence says it all (a folder install)
                raise RpcError(Codes.CONFLICT, str(exc)) from None
            raise RpcError(Codes.INVALID_PARAMS, f"Update failed: {exc}") from None
        await self.reload_plugins()
        record = self.host.plugins.get(p["name"])
        return {"output": output, "plugin": plugin_dict(record) if record else None}

    async def rpc_remove(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        record = self._record(p["name"])
        folder = self._user_folder(record)
        assert self._lock is not None
        async with self._lock:
            await asyncio.to_thread(self.host.plugins.unload, record.key)
            await asyncio.to_thread(installer.remove, folder)
        await self.reload_plugins()
        return {"removed": record.key, "path": str(folder)}

    async def rpc_reload(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return await self.reload_plugins()

    async def rpc_lint(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        try:
            findings = await asyncio.to_thread(lint_folder, Path(p["path"]))
        except (OSError, ValueError) as exc:  # too long, NUL bytes, unreadable, ...
            raise RpcError(
                Codes.INVALID_PARAMS, f"plugins.lint: cannot read {p['path']!r}: {exc}"
            ) from None
        return {
            "findings": [f.as_dict() for f in findings],
            "text": format_findings(findings),
            "errors": sum(f.severity == "error" for f in findings),
        }


def registered_summary(records: list[PluginRecord]) -> str:
    """`` (3 tools, 2 hooks, 1 skills)``: what the plugins registered together, non-zero
    counts only ("" when nothing)."""
    counts = [
        f"{sum(len(getattr(r, kind)) for r in records)} {label}"
        for kind, label in (
            ("tools", "tools"),
            ("hooks", "hooks"),
            ("middleware", "middleware"),
            ("commands", "commands"),
            ("cli_commands", "CLI commands"),
            ("skills", "skills"),
        )
    ]
    shown = [c for c in counts if not c.startswith("0 ")]
    return f" ({', '.join(shown)})" if shown else ""
