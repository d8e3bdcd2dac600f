"""``memory.setup_schema`` and ``memory.setup``: a memory provider configured the reference's way.

`hermesctl memory setup PROVIDER` asks the daemon for the provider's ``get_config_schema()``
fields (made from a fresh provider instance that is never initialized), prompts for them on its
terminal (or takes ``--set key=value``), and sends the answers back. The daemon then does what
the reference's ``hermes memory setup`` does: secrets go to ``$HERMES_HOME/.env`` under their
``env_var`` (``<PROVIDER>_<KEY>`` when the field names none), the other values to config.yaml
under ``memory.<provider>.<key>`` (also to ``.env`` when the field names an ``env_var``, as the
reference writes them) through the comment-keeping editor, ``memory.provider`` is set to the
provider, its ``save_config(values, hermes_home)`` is called with the non-secret values on a
worker thread, and everything is reloaded. Owner only (the methods are declared so); secrets
never reach the log or the answer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from typing import TYPE_CHECKING, Any

from hermesd.daemon import config
from hermesd.daemon.config import SettingsFiles
from hermesd.daemon.config_edit import EditError, check_env_value, edited_config_text
from hermesd.memory.provider_calls import CALL_TIMEOUT
from hermesd.memory.providers import MemoryProviders
from hermesd.rpc.connection import Call, Router
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.rpc.service import RpcService
from hermesd.runtime.workers import WorkTimeout, call_bounded

if TYPE_CHECKING:
    from hermesd.daemon.reloads import ReloadService

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def normalize_schema(raw: Any) -> list[dict[str, Any]]:
    """The provider's fields, each ``{key, description, secret, required, default, choices,
    url, env_var}``; entries that are not a mapping with a usable ``key`` are skipped."""
    fields: list[dict[str, Any]] = []
    for entry in raw if isinstance(raw, list) else []:
        key = entry.get("key") if isinstance(entry, dict) else None
        if not isinstance(key, str) or not _KEY.match(key):
            continue
        choices = entry.get("choices")
        env_var = entry.get("env_var")
        fields.append(
            {
                "key": key,
                "description": str(entry.get("description") or key),
                "secret": bool(entry.get("secret", False)),
                "required": bool(entry.get("required", False)),
                "default": entry.get("default"),
                "choices": [str(c) for c in choices] if isinstance(choices, list) else None,
                "url": str(entry.get("url") or ""),
                "env_var": str(env_var) if isinstance(env_var, str) and env_var else "",
            }
        )
    return fields


def _typed(value: str, default: Any) -> Any:
    """A prompted string as the default's type (a boolean or a number stays one in YAML)."""
    if isinstance(default, bool):
        low = value.strip().lower()
        if low in _TRUE | _FALSE:
            return low in _TRUE
        raise ValueError("must be true or false")
    if isinstance(default, int):
        return int(value)
    if isinstance(default, float):
        return float(value)
    return value


class MemorySetupService(RpcService):
    """memory.setup_schema, memory.setup."""

    def __init__(
        self, providers: MemoryProviders, files: SettingsFiles, reloads: ReloadService
    ) -> None:
        self.providers = providers
        self.files = files
        self.reloads = reloads

    def bind(self, router: Router) -> None:
        router.bind("memory.setup_schema", self.rpc_setup_schema)
        router.bind("memory.setup", self.rpc_setup)

    async def _fields(self, name: str) -> tuple[Any, list[dict[str, Any]]]:
        if not _NAME.match(name):
            raise RpcError(
                Codes.INVALID_PARAMS, f"'{name}' is not a memory provider name", {"provider": name}
            )
        provider = await self.providers.instance_of(name)
        if provider is None:
            known = await self.providers.known_names()
            raise RpcError(
                Codes.NOT_FOUND,
                f"Memory provider '{name}' not found. Known providers: "
                + (", ".join(known) or "none"),
                {"provider": name, "known": known},
            )
        answered, raw = await self.providers.calls.invoke(provider, "get_config_schema")
        if not answered:
            raise RpcError(
                Codes.TIMEOUT, f"Memory provider '{name}' get_config_schema() did not return"
            )
        return provider, normalize_schema(raw)

    async def rpc_setup_schema(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        name = p["provider"]
        _, fields = await self._fields(name)
        section = self.files.load().get(f"memory.{name}") if fields else None
        current = dict(section) if isinstance(section, dict) else {}
        env = {**self.files.dotenv(), **os.environ}
        shown = []
        for f in fields:
            var = f["env_var"] or _env_name(name, f["key"])
            row = {**f, "is_set": bool(env.get(var))}
            if not f["secret"] and f["key"] in current:
                row["current"] = current[f["key"]]
            shown.append(row)
        return {"provider": name, "fields": shown}

    async def rpc_setup(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        name, values = p["provider"], p.get("values") or {}
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in values.items()
        ):
            raise RpcError(Codes.INVALID_PARAMS, "memory.setup: values must map keys to strings")
        provider, fields = await self._fields(name)
        by_key = {f["key"]: f for f in fields}
        unknown = sorted(set(values) - set(by_key))
        if unknown:
            raise RpcError(
                Codes.INVALID_PARAMS,
                f"Memory provider '{name}' has no setting {', '.join(map(repr, unknown))}; "
                f"its settings: {', '.join(by_key) or 'none'}",
                {"unknown": unknown},
            )
        env = {**self.files.dotenv(), **os.environ}
        plain, env_writes = self._split(name, fields, values, env)
        if env_writes:
            try:
                await asyncio.to_thread(_write_env, self.files, env_writes)
            except (EditError, OSError) as exc:
                raise RpcError(Codes.INVALID_PARAMS, f".env not changed: {exc}") from None
        await asyncio.to_thread(self._write_config, name, plain)
        saved_error = await self._save_config(name, provider, plain)
        outcome = await self.reloads.reload_all("hermesctl memory setup")
        log.info(
            "memory provider '%s' set up: %d setting(s) in config.yaml, %d in .env",
            name,
            len(plain),
            len(env_writes),
        )
        return {
            "provider": name,
            "config_keys": sorted(plain),
            "env_vars": sorted(env_writes),
            "save_config_error": saved_error,
            "reload": outcome,
        }

    async def _save_config(self, name: str, provider: Any, plain: dict[str, Any]) -> str:
        """The provider's ``save_config(values, hermes_home)``: "" or why it failed."""
        save = getattr(provider, "save_config", None)
        if not callable(save) or not plain:
            return ""
        try:
            await call_bounded(
                self.providers.pool,
                save,
                (dict(plain), str(self.files.home)),
                {},
                CALL_TIMEOUT,
                key=f"memory-provider:{name}",
            )
        except WorkTimeout:
            log.warning("Memory provider '%s' save_config() did not return; abandoned", name)
            return f"save_config() did not return within {CALL_TIMEOUT:g}s"
        except Exception as exc:
            log.warning("Memory provider '%s' save_config() failed", name, exc_info=True)
            return f"{type(exc).__name__}: {exc}"
        return ""

    def _split(
        self,
        name: str,
        fields: list[dict[str, Any]],
        values: dict[str, str],
        env: dict[str, str],
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """(non-secret values for config.yaml and save_config, variables for .env)."""
        plain: dict[str, Any] = {}
        env_writes: dict[str, str] = {}
        missing = []
        for f in fields:
            key = f["key"]
            value = values.get(key, "")
            var = f["env_var"] or (_env_name(name, key) if f["secret"] else "")
            if not value:
                kept = bool(env.get(var)) if f["secret"] else f["default"] not in (None, "")
                if f["required"] and not kept:
                    missing.append(key)
                continue
            if f["choices"] and not f["secret"] and value not in f["choices"]:
                raise RpcError(
                    Codes.INVALID_PARAMS,
                    f"'{key}' must be one of {', '.join(f['choices'])}, not {value!r}",
                    {"key": key},
                )
            if var:
                problem = check_env_value(var, value)
                if problem:
                    raise RpcError(Codes.INVALID_PARAMS, f"'{key}': {problem}", {"key": key})
                env_writes[var] = value
            if not f["secret"]:
                try:
                    plain[key] = _typed(value, f["default"])
                except ValueError as exc:
                    raise RpcError(
                        Codes.INVALID_PARAMS, f"'{key}' {exc}: {value!r}", {"key": key}
                    ) from None
        if missing:
            raise RpcError(
                Codes.INVALID_PARAMS,
                f"Memory provider '{name}' needs {', '.join(missing)}",
                {"missing": missing},
            )
        return plain, env_writes

    def _write_config(self, name: str, plain: dict[str, Any]) -> None:
        path = self.files.config_path
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        try:
            text = edited_config_text(text, "memory.provider", name)
            for key, value in plain.items():
                text = edited_config_text(text, f"memory.{name}.{key}", value)
            config.parse(text, path)
        except (EditError, config.ConfigError) as exc:
            raise RpcError(Codes.CONFLICT, f"config.yaml not changed: {exc}") from None
        self.files.write_config(text)


def _env_name(provider: str, key: str) -> str:
    return re.sub(r"\W", "_", f"{provider}_{key}").upper()


def _write_env(files: SettingsFiles, values: dict[str, str]) -> None:
    from hermesd.daemon.config_edit import set_env_values

    set_env_values(files.dotenv_path, values)
