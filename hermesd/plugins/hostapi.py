"""hermesd's state as the reference modules plugins import see it (`hermesd/plugins/compat/`).

Plugins written for the reference import some of its internals (``hermes_constants``,
``hermes_cli.config``, ``hermes_state``, ``agent.memory_provider``, …; docs/hermes-compat.md
§11.2). hermesd provides modules under those names in ``hermesd/plugins/compat/``, a folder put
at the **end** of ``sys.path`` by `enable_reference_modules` when plugins load, and only when
the real hermes-agent is not importable, so it never shadows a real install. Those modules
read the daemon through this one: the plugin host registers itself with `install`. Each
function either does what the reference's does or raises `not_in_hermesd`'s
``NotImplementedError``. Importing any of them has no side effects and touches no network.
"""

from __future__ import annotations

import contextvars
import importlib.util
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from hermesd.runtime.session import current_session

if TYPE_CHECKING:
    from hermesd.plugins.host import PluginManager

log = logging.getLogger(__name__)

COMPAT_DIR = Path(__file__).resolve().parent / "compat"

#: A per-session ``HERMES_HOME`` override (the reference's ``set_hermes_home_override``).
home_override: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "hermesd_home_override", default=None
)
#: The ``ctx`` of the plugin whose ``register()`` runs on this thread, so what it registers
#: through a reference module (``tools.registry.registry.register``) is its own, rolled back
#: with it.
loading: contextvars.ContextVar[Any] = contextvars.ContextVar("hermesd_loading", default=None)
#: ``HERMES_SESSION_*`` values set for the current turn (``gateway.session_context``).
session_vars: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "hermesd_session_vars", default=None
)


@dataclass
class HostState:
    """What the reference modules read: the home, the plugin host, the model."""

    home: Path
    manager: PluginManager | None = None
    #: ``(prompt or messages, **options) -> text``: a completion owned by the host (ctx.llm)
    complete: Callable[..., Any] | None = None


_state: HostState | None = None


def install(state: HostState) -> None:
    """Make ``state`` what the reference modules read (the plugin host does this)."""
    global _state
    _state = state


def state() -> HostState | None:
    """The installed state, or None outside a daemon (the modules then fall back to the env)."""
    return _state


def not_in_hermesd(what: str, why: str = "") -> NotImplementedError:
    """The error a reference function hermesd does not provide raises."""
    tail = f": {why}" if why else ""
    return NotImplementedError(f"{what} is not available in hermesd{tail}")


def hermes_home() -> Path:
    """The override for this session, else the daemon's home, else ``$HERMES_HOME``."""
    override = home_override.get()
    if override is not None:
        return override
    if _state is not None:
        return _state.home
    return Path(os.environ.get("HERMES_HOME") or Path.home() / ".hermes").expanduser()


def read_config() -> dict[str, Any]:
    """``config.yaml`` of the home as a mapping (empty when missing or not a mapping)."""
    path = hermes_home() / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, yaml.YAMLError) as exc:
        log.warning("load_config: cannot read %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def session_env(name: str) -> str | None:
    """A ``HERMES_SESSION_*`` value for the current turn, or None when not set."""
    values = session_vars.get() or {}
    if name in values:
        return values[name]
    if name == "HERMES_SESSION_ID":
        return current_session.get() or None
    if name in ("HERMES_SESSION_PLATFORM", "HERMES_SESSION_SOURCE") and current_session.get():
        return "cli"
    return None


def reference_installed() -> bool:
    """Whether the real hermes-agent is importable (then hermesd provides nothing)."""
    if str(COMPAT_DIR) in sys.path:
        return False
    try:
        return importlib.util.find_spec("hermes_cli") is not None
    except (ImportError, ValueError):
        return False


def enable_reference_modules() -> bool:
    """Put the reference modules at the end of ``sys.path`` unless hermes-agent is installed;
    True when hermesd's are in use."""
    if str(COMPAT_DIR) in sys.path:
        return True
    if reference_installed():
        log.info("hermes-agent is installed: plugins import its modules, not hermesd's")
        return False
    sys.path.append(str(COMPAT_DIR))
    return True
