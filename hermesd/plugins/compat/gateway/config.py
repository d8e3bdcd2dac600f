"""hermesd's ``gateway.config``: ``Platform``, ``PlatformConfig`` and ``load_gateway_config()``
(the platforms of config.yaml's ``gateway.platforms``, tokens read from their files)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from hermesd.gateway.base import Platform, PlatformConfig
from hermesd.gateway.platforms import platform_config
from hermesd.plugins import hostapi

__all__ = ["GatewayConfig", "Platform", "PlatformConfig", "load_gateway_config"]

log = logging.getLogger(__name__)


@dataclass
class GatewayConfig:
    """The configured platforms, by `Platform`."""

    platforms: dict[Platform, PlatformConfig] = field(default_factory=dict)


def load_gateway_config() -> GatewayConfig:
    """The platforms config.yaml turns on (a platform whose settings cannot be read is left
    out, with a warning)."""
    gateway = hostapi.read_config().get("gateway") or {}
    sections = gateway.get("platforms") if isinstance(gateway, dict) else None
    found: dict[Platform, PlatformConfig] = {}
    for name, section in (sections or {}).items():
        if not isinstance(section, dict) or not section.get("enabled", True):
            continue
        try:
            found[Platform(str(name))] = platform_config(str(name), section)
        except ValueError as exc:
            log.warning("gateway.config: %s", exc)
    return GatewayConfig(found)
