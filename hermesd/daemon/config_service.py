"""``config.show``, ``config.get``, ``config.set`` and ``config.check``: config.yaml over RPC.

Every method reads the file anew. ``config.set`` parses the value as YAML (``3``, ``true``,
``[a, b]``; a string where the setting takes strings), changes that one key with the round-trip
editor (comments kept, `hermesd.daemon.config_edit`), validates the whole result against the
schema — nothing is written when any problem is found, and every problem is reported — then
writes it and reloads (`hermesd.daemon.reloads`). What is shown is redacted: the API key never
leaves the daemon.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import yaml

from hermesd import redact
from hermesd.daemon import config
from hermesd.rpc.connection import Call, Router
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.rpc.service import RpcService

if TYPE_CHECKING:
    from hermesd.daemon.config import SettingsFiles
    from hermesd.daemon.main import Daemon
    from hermesd.daemon.reloads import ReloadService

SECRET_SETTINGS = frozenset({"model.api_key"})
# Read once at start-up (the socket, its limits): a reload does not apply them.
AT_START = ("socket.", "limits.")


def schema_node(dotted: str) -> Any:
    """The schema's Setting or section at ``dotted``; None when there is none."""
    node: Any = config.SCHEMA
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def leaves(schema: dict[str, Any] | None = None, prefix: str = "") -> list[str]:
    """Every setting's dotted name, in schema order."""
    out: list[str] = []
    for key, node in (schema or config.SCHEMA).items():
        if isinstance(node, dict):
            out += leaves(node, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}")
    return out


def parse_value(dotted: str, text: str) -> Any:
    """``text`` as the value of ``dotted``: YAML, or the plain string where strings fit."""
    spec = schema_node(dotted)
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    takes_text = isinstance(spec, config.Setting) and str in spec.types
    if takes_text and value is not None and not isinstance(value, spec.types):
        return text  # model.default: 7 is the model named "7"
    return value


def _did_you_mean(dotted: str) -> str:
    guess = config.closest_key(dotted, leaves())
    return f" (did you mean '{guess}'?)" if guess and guess != dotted else ""


def _shown(dotted: str, value: Any) -> Any:
    if dotted in SECRET_SETTINGS and value:
        return redact.REDACTED
    return redact.redact_obj(value)


class ConfigService(RpcService):
    """config.yaml for hermesctl: read, checked, edited and reloaded."""

    def __init__(self, daemon: Daemon, files: SettingsFiles, reloads: ReloadService) -> None:
        self.daemon = daemon
        self.files = files
        self.reloads = reloads

    def bind(self, router: Router) -> None:
        for name in ("show", "get", "set", "check"):
            router.bind(f"config.{name}", getattr(self, f"rpc_{name}"))

    def _read(self) -> tuple[str, config.Config | None, list[str]]:
        """The file's text, its settings (None when broken) and its problems."""
        path = self.files.config_path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            return "", None, [f"cannot read {path}: {exc}"]
        try:
            return text, config.parse(text, path, config.plugin_sections(self.files.home)), []
        except config.ConfigError as exc:
            return text, None, list(exc.problems)

    async def rpc_show(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        text, cfg, problems = await asyncio.to_thread(self._read)
        running = self.daemon.config
        shown = text
        for dotted in SECRET_SETTINGS:
            secret = running.get(dotted) or (cfg.get(dotted) if cfg else None)
            if isinstance(secret, str) and secret:
                shown = shown.replace(secret, redact.REDACTED)
        return {
            "path": str(self.files.config_path),
            "exists": self.files.config_path.exists(),
            "text": redact.redact(shown),
            "settings": {d: _shown(d, running.get(d)) for d in leaves()},
            "problems": problems,
        }

    def rpc_get(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        dotted = p["key"]
        node = schema_node(dotted)
        if node is None:
            raise RpcError(
                Codes.NOT_FOUND,
                f"unknown setting '{dotted}'{_did_you_mean(dotted)} "
                "(hermesctl config show lists them)",
                {"key": dotted},
            )
        running = self.daemon.config
        if isinstance(node, dict):
            names = [d for d in leaves() if d.startswith(dotted + ".")]
            return {"key": dotted, "value": {d: _shown(d, running.get(d)) for d in names}}
        return {
            "key": dotted,
            "value": _shown(dotted, running.get(dotted)),
            "default": node.default,
            "doc": node.doc,
        }

    async def rpc_set(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        dotted, raw = p["key"], p["value"]
        node = schema_node(dotted)
        if not isinstance(node, config.Setting):
            what = "a section" if isinstance(node, dict) else "an unknown setting"
            raise RpcError(
                Codes.INVALID_PARAMS,
                f"'{dotted}' is {what}{_did_you_mean(dotted)}; "
                "hermesctl config show lists the settings",
                {"key": dotted},
            )
        value = parse_value(dotted, raw)
        try:
            text = await asyncio.to_thread(self.files.edited_text, dotted, value)
        except ValueError as exc:  # an EditError: the file cannot be edited
            raise RpcError(Codes.CONFLICT, f"config.yaml not changed: {exc}") from None
        try:
            config.parse(text, self.files.config_path)
        except config.ConfigError as exc:
            raise RpcError(
                Codes.INVALID_PARAMS,
                f"config.yaml not changed: {exc}",
                {"key": dotted, "problems": exc.problems},
            ) from None
        try:
            await asyncio.to_thread(self.files.write_config, text)
        except OSError as exc:
            raise RpcError(Codes.CONFLICT, f"config.yaml not changed: {exc}") from None
        outcome = await self.reloads.reload_all("hermesctl config set")
        return {
            "key": dotted,
            "value": _shown(dotted, value),
            "path": str(self.files.config_path),
            "reload": outcome,
            "restart_needed": dotted.startswith(AT_START),
        }

    async def rpc_check(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        text, cfg, problems = await asyncio.to_thread(self._read)
        warnings = list(cfg.warnings) if cfg else []
        if cfg is None:  # the problems hide the warnings: parse again for them
            try:
                config.parse(text, None, config.plugin_sections(self.files.home))
            except config.ConfigError as exc:
                warnings = list(exc.warnings)
        return {
            "path": str(self.files.config_path),
            "ok": not problems,
            "problems": problems,
            "warnings": warnings,
        }
