"""hermesd's ``hermes_constants``: where the home is."""

from __future__ import annotations

import contextvars
from pathlib import Path

from hermesd.plugins import hostapi


def get_hermes_home() -> Path:
    """The home of this session: its override, else the daemon's ``HERMES_HOME``."""
    return hostapi.hermes_home()


def get_default_hermes_root() -> Path:
    """The daemon's home, whatever a session overrides (hermesd has one profile per home)."""
    state = hostapi.state()
    return state.home if state is not None else hostapi.hermes_home()


def display_hermes_home() -> str:
    """The home for messages, with the user's home directory written ``~``."""
    home = get_hermes_home()
    try:
        return "~/" + str(home.relative_to(Path.home()))
    except ValueError:
        return str(home)


def set_hermes_home_override(path: str | Path | None) -> contextvars.Token[Path | None]:
    """Use ``path`` as the home for the current context (None: back to the daemon's)."""
    return hostapi.home_override.set(None if path is None else Path(path).expanduser())


def reset_hermes_home_override(token: contextvars.Token[Path | None]) -> None:
    """Undo `set_hermes_home_override`."""
    hostapi.home_override.reset(token)
