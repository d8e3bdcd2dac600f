"""hermesd's ``gateway.session``: ``SessionSource`` and ``build_session_key``."""

from __future__ import annotations

from hermesd.gateway.base import SessionSource
from hermesd.gateway.sessions import session_key as build_session_key

__all__ = ["SessionSource", "build_session_key"]
