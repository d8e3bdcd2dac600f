"""Where hermesd keeps its files and listens, resolved the same way by daemon and client.

Standard library only (``hermesctl`` imports it on its hot path). Reading ``config.yaml`` is
only done when the file mentions a socket, so the common case never imports yaml.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SYSTEM_SOCKET = Path("/run/hermes/hermesd.sock")
_SOCKET_KEY = re.compile(r"^socket\s*:", re.MULTILINE)


def hermes_home(override: str | os.PathLike[str] | None = None) -> Path:
    """``--home``, else ``$HERMES_HOME``, else ``~/.hermes``."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get("HERMES_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".hermes"


def configured_socket(home: Path) -> Path | None:
    """``socket.path`` from config.yaml, read only when the file mentions a socket."""
    cfg = home / "config.yaml"
    try:
        text = cfg.read_text(encoding="utf-8")
    except OSError:
        return None
    if not _SOCKET_KEY.search(text):
        return None
    import yaml  # deferred: only configs that set a socket pay for it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    sock = data.get("socket") if isinstance(data, dict) else None
    path = sock.get("path") if isinstance(sock, dict) else None
    return Path(path).expanduser() if isinstance(path, str) and path else None


def default_socket(home: Path) -> Path:
    """``$XDG_RUNTIME_DIR/hermes/hermesd.sock``, else ``$HERMES_HOME/hermesd.sock``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "hermes" / "hermesd.sock"
    return home / "hermesd.sock"


def daemon_socket(home: Path, cli: str | None, config_path: str | None) -> Path:
    """The path the daemon listens on: ``--socket``, ``HERMES_SOCKET``, config, default."""
    if cli:
        return Path(cli).expanduser()
    env = os.environ.get("HERMES_SOCKET")
    if env:
        return Path(env).expanduser()
    if config_path:
        return Path(config_path).expanduser()
    return default_socket(home)


def client_socket(home: Path, cli: str | None = None) -> Path:
    """The path a client connects to; falls back to the system socket when it exists."""
    if cli:
        return Path(cli).expanduser()
    env = os.environ.get("HERMES_SOCKET")
    if env:
        return Path(env).expanduser()
    path = configured_socket(home) or default_socket(home)
    if not path.exists() and SYSTEM_SOCKET.exists():
        return SYSTEM_SOCKET
    return path
