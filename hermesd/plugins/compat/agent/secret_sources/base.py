"""hermesd's ``agent.secret_sources.base``: the class secret-manager backends subclass.

A plugin subclasses `SecretSource`, implements ``fetch(cfg, home_path)`` returning a
`FetchResult` (``secrets``: variable name -> value) and hands an instance to
``ctx.register_secret_source``. hermesd asks every enabled source (``secrets.<name>.enabled``)
after its plugins load and on each reload, and puts what they return into its environment, where
its own lookups read credentials (hermesd.plugins.secret_sources, docs/plugins.md "Secret
sources"). The names, defaults and the version number are the reference's, so a source written
for it imports and registers unchanged.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

#: the secret-source contract version; a source built for another one is refused
SECRET_SOURCE_API_VERSION = 1
#: seconds ``fetch`` may take when the source's section has no ``timeout_seconds``
DEFAULT_FETCH_TIMEOUT_SECONDS = 120.0

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ErrorKind(StrEnum):
    """Why a fetch failed, in words a status line can use."""

    NOT_CONFIGURED = "not_configured"
    BINARY_MISSING = "binary_missing"
    AUTH_FAILED = "auth_failed"
    AUTH_EXPIRED = "auth_expired"
    REF_INVALID = "ref_invalid"
    NETWORK = "network"
    EMPTY_VALUE = "empty_value"
    TIMEOUT = "timeout"
    INTERNAL = "internal"


@dataclass
class FetchResult:
    """What one source would supply (``secrets``), or why it could not (``error``)."""

    secrets: dict[str, str] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    error_kind: ErrorKind | None = None
    binary_path: Path | None = None

    @property
    def ok(self) -> bool:
        """True when the fetch did not fail."""
        return self.error is None


class SecretSource(ABC):
    """One external secret manager; ``name`` is its section under ``secrets:``."""

    api_version: int = SECRET_SOURCE_API_VERSION
    name: str = ""
    label: str = ""
    shape: str = "mapped"  # "mapped": the owner binds names; "bulk": the backend brings many
    scheme: str | None = None

    @abstractmethod
    def fetch(self, cfg: dict[str, Any], home_path: Path) -> FetchResult:
        """The secrets of this source for its config section ``cfg``; must not raise or ask."""

    def is_enabled(self, cfg: dict[str, Any]) -> bool:
        """True when ``secrets.<name>.enabled`` is set."""
        return bool(isinstance(cfg, dict) and cfg.get("enabled"))

    def override_existing(self, cfg: dict[str, Any]) -> bool:
        """True when this source may replace a variable the environment or .env already set."""
        return bool(isinstance(cfg, dict) and cfg.get("override_existing", False))

    def protected_env_vars(self, cfg: dict[str, Any]) -> frozenset[str]:
        """Variables no source may set (typically this source's own access token)."""
        return frozenset()

    def fetch_timeout_seconds(self, cfg: dict[str, Any]) -> float:
        """Seconds ``fetch`` may take (``timeout_seconds`` of the section)."""
        try:
            value = float((cfg or {}).get("timeout_seconds", DEFAULT_FETCH_TIMEOUT_SECONDS))
        except (TypeError, ValueError):
            return DEFAULT_FETCH_TIMEOUT_SECONDS
        return value if value > 0 else DEFAULT_FETCH_TIMEOUT_SECONDS

    def config_schema(self) -> dict[str, Any]:
        """``{key: {description, default}}`` of the section, for set-up screens."""
        return {}


def is_valid_env_name(name: str) -> bool:
    """True for a name an environment variable may have."""
    return bool(name) and bool(_ENV_NAME.match(name))
