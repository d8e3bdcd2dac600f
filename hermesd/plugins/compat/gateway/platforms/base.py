"""hermesd's ``gateway.platforms.base``: the adapter interface of `hermesd.gateway.base`.

``BasePlatformAdapter`` is hermesd's `PlatformAdapter`: a plugin's adapter subclasses it, and
the gateway drives it like a built-in one (docs/gateway.md).
"""

from __future__ import annotations

from hermesd.gateway.base import (
    Button,
    MessageEvent,
    MessageType,
    Platform,
    PlatformConfig,
    SendResult,
    SessionSource,
)
from hermesd.gateway.base import PlatformAdapter as BasePlatformAdapter
from hermesd.gateway.split import utf16_len

__all__ = [
    "BasePlatformAdapter",
    "Button",
    "MessageEvent",
    "MessageType",
    "Platform",
    "PlatformConfig",
    "SendResult",
    "SessionSource",
    "utf16_len",
]
