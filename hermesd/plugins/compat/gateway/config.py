"""hermesd's ``gateway.config``: ``Platform`` and ``PlatformConfig`` (`hermesd.gateway.base`)."""

from __future__ import annotations

from hermesd.gateway.base import Platform, PlatformConfig

__all__ = ["Platform", "PlatformConfig"]
