"""hermesd's ``hermes_cli.config``: config.yaml as plugins read it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermesd.plugins import hostapi


def get_hermes_home() -> Path:
    """The home of this session (see ``hermes_constants``)."""
    return hostapi.hermes_home()


def get_config_path() -> Path:
    """``$HERMES_HOME/config.yaml``."""
    return hostapi.hermes_home() / "config.yaml"


def load_config() -> dict[str, Any]:
    """The whole of config.yaml, plugin sections included (a fresh copy each call)."""
    return hostapi.read_config()


def load_config_readonly() -> dict[str, Any]:
    """The same as `load_config`: hermesd never writes config.yaml when it is read."""
    return hostapi.read_config()


def cfg_get(cfg: Any, *keys: str, default: Any = None) -> Any:
    """``cfg[k1][k2]…``, or ``default`` where a key is missing or a value is not a mapping."""
    node = cfg
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return default if node is None else node


def is_provider_enabled(name: str, cfg: dict[str, Any] | None = None) -> bool:
    """Whether model provider ``name`` is the configured one (hermesd has one endpoint)."""
    cfg = load_config() if cfg is None else cfg
    provider = cfg_get(cfg, "model", "provider", default="custom")
    return str(name).strip().lower() == str(provider).strip().lower()


def save_config(config: dict[str, Any], *args: Any, **kwargs: Any) -> None:
    """Not available: hermesd keeps config.yaml as its owner wrote it (comments included)."""
    raise hostapi.not_in_hermesd(
        "hermes_cli.config.save_config",
        "edit $HERMES_HOME/config.yaml, or use hermesctl plugins enable/disable",
    )
