"""Where hermesd keeps its files and listens, resolved the same way by daemon and client.

The lookups work on strings with ``os.path`` only: ``hermesctl`` runs them on its start-up
path, where importing pathlib (or yaml) costs milliseconds. ``config.yaml`` is only parsed when
it mentions a socket. The daemon-side helpers wrap the results in ``pathlib.Path``.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

SYSTEM_SOCKET = "/run/hermes/hermesd.sock"


def home_dir(override: str | None = None) -> str:
    """``--home``, else ``$HERMES_HOME``, else ``~/.hermes``."""
    return os.path.expanduser(override or os.environ.get("HERMES_HOME") or "~/.hermes")


def configured_socket_path(home: str) -> str | None:
    """``socket.path`` from config.yaml, read only when the file mentions a socket."""
    try:
        with open(os.path.join(home, "config.yaml"), encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    if not any(
        line.startswith("socket") and line[6:].lstrip().startswith(":")
        for line in text.splitlines()
    ):
        return None
    import yaml  # deferred: only configs that set a socket pay for it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    sock = data.get("socket") if isinstance(data, dict) else None
    path = sock.get("path") if isinstance(sock, dict) else None
    return os.path.expanduser(path) if isinstance(path, str) and path else None


def default_socket_path(home: str) -> str:
    """``$XDG_RUNTIME_DIR/hermes/hermesd.sock``, else ``$HERMES_HOME/hermesd.sock``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "hermes", "hermesd.sock")
    return os.path.join(home, "hermesd.sock")


def client_socket_candidates(cli: str | None = None) -> list[str]:
    """The paths a client tries, in order: ``--socket`` or ``HERMES_SOCKET`` alone; else
    config's ``socket.path``, then every place a daemon may have chosen by default (its
    ``XDG_RUNTIME_DIR`` may differ from ours, or be unset: under sudo, su or ssh), then the
    system socket."""
    if cli:
        return [os.path.expanduser(cli)]
    env = os.environ.get("HERMES_SOCKET")
    if env:
        return [os.path.expanduser(env)]
    home = home_dir()
    configured = configured_socket_path(home)
    if configured:
        return [configured, SYSTEM_SOCKET]
    found = [default_socket_path(home)]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        found.append(os.path.join(runtime, "hermes", "hermesd.sock"))
    found.append(f"/run/user/{os.getuid()}/hermes/hermesd.sock")
    found.append(os.path.join(home, "hermesd.sock"))
    found.append(SYSTEM_SOCKET)
    return list(dict.fromkeys(found))


def client_socket_path(cli: str | None = None) -> str:
    """The first candidate whose socket exists (else the first): what a client connects to."""
    candidates = client_socket_candidates(cli)
    return next((p for p in candidates if os.path.exists(p)), candidates[0])


# --- daemon side (Path objects) -------------------------------------------------------------


def hermes_home(override: str | os.PathLike[str] | None = None) -> Path:
    """``home_dir`` as a Path."""
    from pathlib import Path

    return Path(home_dir(os.fspath(override) if override else None))


def daemon_socket(home: Path, cli: str | None, config_path: str | None) -> Path:
    """The path the daemon listens on: ``--socket``, ``HERMES_SOCKET``, config, default."""
    from pathlib import Path

    chosen = cli or os.environ.get("HERMES_SOCKET") or config_path
    if chosen:
        return Path(chosen).expanduser()
    return Path(default_socket_path(str(home)))
