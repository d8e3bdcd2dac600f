"""What the Matrix adapter is told: ``gateway.platforms.matrix`` read into `MatrixSettings`.

The gateway reads ``token_file`` into the config's token and keeps the allow-lists itself; the
rest of the section (homeserver, user id, password file, encryption, directories, backoff) is
the adapter's, checked here so a missing key is a sentence in ``gateway status``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hermesd.gateway.base import PlatformConfig
from hermesd.rpc.paths import hermes_home


@dataclass(frozen=True)
class MatrixSettings:
    """What the adapter needs from ``gateway.platforms.matrix`` (secrets already read; the
    gateway reads ``token_file`` into ``token`` and keeps the allow-lists itself)."""

    homeserver: str
    user_id: str
    access_token: str | None
    password: str | None
    device_id: str | None
    direct_from_anyone: bool = True
    require_mention: bool = True
    encryption: bool = False
    store_dir: Path | None = None
    backoff_initial: float = 1.0
    backoff_max: float = 30.0

    @classmethod
    def from_config(cls, config: PlatformConfig) -> MatrixSettings:
        """Read the settings; a missing homeserver, user id or credential is a ValueError."""
        extra = config.extra
        homeserver = str(extra.get("homeserver") or "").rstrip("/")
        user_id = str(extra.get("user_id") or "")
        password = _read_secret(extra.get("password_file")) or extra.get("password")
        if not homeserver or not user_id:
            raise ValueError("matrix: set homeserver and user_id")
        if not config.token and not password:
            raise ValueError("matrix: set token_file (an access token) or password_file")
        return cls(
            homeserver=homeserver,
            user_id=user_id,
            access_token=config.token,
            password=str(password) if password else None,
            device_id=str(extra["device_id"]) if extra.get("device_id") else None,
            direct_from_anyone=bool(extra.get("pairing_by_direct_invite", True)),
            require_mention=bool(extra.get("require_mention", True)),
            encryption=bool(extra.get("encryption", False)),
            store_dir=Path(os.path.expanduser(str(extra.get("store_dir") or "")))
            if extra.get("store_dir")
            else hermes_home() / "gateway" / "matrix",
            backoff_initial=float(extra.get("reconnect_initial_seconds", 1.0)),
            backoff_max=float(extra.get("reconnect_max_seconds", 30.0)),
        )


def _read_secret(path: object) -> str | None:
    if not path:
        return None
    try:
        return Path(os.path.expanduser(str(path))).read_text().strip() or None
    except OSError as exc:
        raise ValueError(f"matrix: cannot read {path}: {exc.strerror}") from None
