"""What one tool call may see and touch, and the environment it gets.

A policy is a list of rules ``(path, level)`` with level ``none`` (hidden), ``read``,
``write`` or ``dev`` (a device file that may be written); the deepest rule over a path wins,
and ``/`` is readable. Hidden: ``$HERMES_HOME`` (config, ``.env``, ``state.db``, plugins,
skills, memories), the socket's directory, the other calls' private directories, the
credential stores of `hermesd.sandbox.protected` under ``$HOME`` (less ``sandbox.readable_allow``),
``sandbox.readable_deny``, and where other same-uid services keep their sockets
(``$XDG_RUNTIME_DIR``, ``/run/user``, ``/run/screen``, ``/run/dbus``). ``/tmp`` and
``/var/tmp`` are private: an empty tmpfs per call under bubblewrap, hidden under Landlock
(the call's ``TMPDIR`` is its own either way). Read-only: the daemon's install, and inside
every writable root its ``.git/hooks`` and ``.git/config``. Writable: the workspace
(`hermesd.tools.workspace` decides it; not in ``read-only`` mode), ``sandbox.writable`` and the
call's private tmp. Both mechanisms (`hermesd.sandbox.confine`) read the same rules.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermesd import redact
from hermesd.sandbox import protected
from hermesd.sandbox.limits import Limits

MODES = ("read-only", "workspace-write", "off")
MECHANISMS = ("auto", "bwrap", "landlock")
#: ``sandbox.network``: no network, only through the egress proxy, the machine's network
NETWORK_MODES = ("off", "allowlist", "on")
#: variables a tool's shell gets (when set), besides ``LC_*`` and ``terminal.env_passthrough``
ENV_ALLOWED = ("PATH", "HOME", "LANG", "LANGUAGE", "TERM", "USER", "LOGNAME", "SHELL", "TZ")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: other same-uid services' sockets and state (screen, the user bus, systemd --user)
RUNTIME_HIDDEN = ("/run/user", "/run/screen", "/run/dbus")
#: a private tmpfs per call under bubblewrap, hidden under Landlock (tmux's sockets are here)
PRIVATE_TMP = ("/tmp", "/var/tmp")


@dataclass(frozen=True)
class SandboxSettings:
    """The ``sandbox.*`` keys and ``terminal.env_passthrough``."""

    mode: str = "workspace-write"
    mechanism: str = "auto"
    writable: tuple[str, ...] = ()
    readable_deny: tuple[str, ...] = ()
    readable_allow: tuple[str, ...] = ()
    env_passthrough: tuple[str, ...] = ()
    bwrap: str = "bwrap"
    network: str = "on"  # NETWORK_MODES
    allowed_domains: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    unix_sockets: tuple[str, ...] = ()  # Unix sockets a call may connect to (docs/sandbox.md)

    @classmethod
    def from_config(cls, config: Any) -> SandboxSettings:
        """From a configuration with ``get(dotted, default)``."""

        def strings(key: str) -> tuple[str, ...]:
            return tuple(str(v) for v in config.get(key) or [])

        return cls(
            mode=str(config.get("sandbox.mode") or "workspace-write"),
            mechanism=str(config.get("sandbox.mechanism") or "auto"),
            writable=strings("sandbox.writable"),
            readable_deny=strings("sandbox.readable_deny"),
            readable_allow=strings("sandbox.readable_allow"),
            env_passthrough=strings("terminal.env_passthrough"),
            bwrap=str(config.get("sandbox.bwrap") or "bwrap"),
            network=network_mode(config.get("sandbox.network")),
            allowed_domains=strings("sandbox.allowed_domains"),
            limits=Limits.from_config(config),
            unix_sockets=strings("sandbox.unix_sockets"),
        )


def network_mode(value: Any) -> str:
    """``sandbox.network`` as one of `NETWORK_MODES` (YAML reads bare on/off as booleans)."""
    if value is None or value is True:
        return "on"
    if value is False:
        return "off"
    return str(value).lower()


@dataclass(frozen=True)
class DaemonPlaces:
    """Where the daemon keeps what no tool may touch."""

    home: Path
    socket: Path | None
    scratch: Path  # the parent of every call's private tmp ($HERMES_HOME/sandbox-tmp)
    install: tuple[Path, ...] = field(default_factory=tuple)
    runtime: tuple[Path, ...] = ()  # $XDG_RUNTIME_DIR and RUNTIME_HIDDEN

    @classmethod
    def of_this_process(cls, home: Path, socket: Path | None, scratch: Path) -> DaemonPlaces:
        """The places of the running daemon; its install is its interpreter's prefix and the
        folder the ``hermesd`` package is imported from."""
        package = Path(__file__).resolve().parents[1]
        prefixes = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), package}
        user = os.environ.get("XDG_RUNTIME_DIR", "")
        runtime = [Path(p) for p in RUNTIME_HIDDEN] + ([Path(user)] if user.startswith("/") else [])
        return cls(
            _real(home),
            _real(socket) if socket else None,
            _real(scratch),
            tuple(prefixes),
            tuple(dict.fromkeys(_real(p) for p in runtime)),
        )


def user_home() -> Path:
    """The home whose credential stores are hidden: the daemon's ``$HOME``."""
    return _real(Path(os.environ.get("HOME") or Path.home()))


def denied_paths(settings: SandboxSettings, home: Path | None = None) -> list[Path]:
    """Every resolved path no tool may read: the credential stores under ``home`` (default
    `user_home`) but those ``sandbox.readable_allow`` lifts, and ``sandbox.readable_deny``."""
    return protected.hidden_paths(
        home or user_home(), settings.readable_deny, settings.readable_allow
    )


def _real(path: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(path))))


def rules(
    settings: SandboxSettings,
    places: DaemonPlaces,
    workspace: Path,
    private_tmp: Path | None,
    writable: Sequence[str] = (),
    readable: Sequence[str] = (),
    protect_git: bool = True,
    cwd: Path | None = None,
) -> list[tuple[str, str]]:
    """The (path, level) rules of one call (the deepest rule over a path wins). ``writable``
    and ``readable`` widen one program's policy (an MCP server's ``sandbox`` setting), in
    either mode, and lift hidden entries (`denied_paths`) at or below them; check them with
    `check_widening` first. ``protect_git``: keep ``.git/hooks`` and ``.git/config`` of every
    writable root read-only. ``cwd``: the call's directory, kept readable when it lies in a
    private tmp (unless it is hidden)."""
    out: list[tuple[str, str]] = [("/", "read")]
    out += [(dev, "dev") for dev in DEVICES]
    out += [(str(p), "read") for p in places.install]
    roots: list[Path] = []
    if settings.mode == "workspace-write":
        roots = [_real(workspace), *(_real(Path(p)) for p in settings.writable)]
    else:  # read-only: the workspace may sit in a hidden folder ($HERMES_HOME/workspace)
        out.append((str(_real(workspace)), "read"))
    granted = [(_real(Path(p)), "write") for p in writable]
    roots += [p for p, _ in granted]
    out += [(str(p), "write") for p in roots]
    granted += [(_real(Path(p)), "read") for p in readable]
    out += [(str(p), level) for p, level in granted if level == "read"]
    if protect_git:
        out += [(str(p), "read") for root in roots for p in protected.read_only_in(root)]
    denied = denied_paths(settings)
    denied = [p for p in denied if not any(_within(p, g) for g, _ in granted)]
    hidden = [places.home, places.scratch, *denied]
    if places.socket is not None:
        hidden.append(places.socket.parent)
    out += [(str(p), "none") for p in hidden]
    home = _real(user_home())  # readable as the rest of the machine, even in a private tmp
    if any(_within(home, _real(Path(t))) and home != _real(Path(t)) for t in PRIVATE_TMP):
        out.append((str(home), "read"))
    if cwd is not None:  # a directory the command was started in stays what it was: readable
        real = _real(cwd)
        in_tmp = any(_within(real, _real(Path(t))) and real != _real(Path(t)) for t in PRIVATE_TMP)
        granted_here = any(
            _within(real, Path(path))
            for path, level in out
            if level in ("read", "write") and path != "/"
        )
        if in_tmp and not granted_here and not any(_within(real, _real(Path(h))) for h in hidden):
            out.append((str(real), "read"))
    named = {path for path, _ in out}  # a workspace that is /tmp itself stays the workspace
    out += [(str(p), "none") for p in places.runtime if str(p) not in named]
    out += [(str(_real(Path(p))), "none") for p in PRIVATE_TMP if str(_real(Path(p))) not in named]
    if private_tmp is not None:
        out.append((str(_real(private_tmp)), "write"))
    # the daemon's own places win over a workspace or writable entry that contains them
    order = {"write": 0, "dev": 0, "read": 1, "none": 2}
    return _deduplicate(out, order)


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_widening(places: DaemonPlaces, writable: Sequence[str], readable: Sequence[str]) -> None:
    """Refuse (`ValueError`) a widening path that is, or is inside, ``$HERMES_HOME`` or the
    socket's folder, or a writable one inside the daemon's install: those stay out of every
    tool's reach."""
    hidden = [places.home, places.scratch]
    if places.socket is not None:
        hidden.append(places.socket.parent)
    for text, write in [*((p, True) for p in writable), *((p, False) for p in readable)]:
        if not os.path.isabs(os.path.expanduser(text)):
            raise ValueError(f"{text!r} is not an absolute path")
        path = _real(Path(text))
        for place in [*hidden, *(places.install if write else ())]:
            if _within(path, place):
                raise ValueError(
                    f"{text} is inside {place}, hermesd's own state or install, which no "
                    "tool's process may reach"
                )


def _deduplicate(out: list[tuple[str, str]], order: Mapping[str, int]) -> list[tuple[str, str]]:
    """One level per path (the strongest protection wins), without rules that change nothing
    (a rule as strong as the one above it would cost a mount or a Landlock rule per call)."""
    chosen: dict[str, str] = {}
    for path, level in out:
        if path not in chosen or order[level] > order[chosen[path]]:
            chosen[path] = level

    def above(path: str) -> str:
        parent = os.path.dirname(path)
        while parent not in chosen and parent != path:
            path, parent = parent, os.path.dirname(parent)
        return chosen.get(parent, "read")

    return [(p, lv) for p, lv in chosen.items() if p == "/" or lv != above(p)]


def tool_environment(
    environ: Mapping[str, str], settings: SandboxSettings, dotenv: Mapping[str, str]
) -> dict[str, str]:
    """The allow-listed environment of a tool's process: never a ``.env`` value or a
    secret-named variable, even when ``terminal.env_passthrough`` names it."""
    wanted = set(ENV_ALLOWED) | set(settings.env_passthrough)
    secrets = {v for v in dotenv.values() if len(v) >= 4}
    out = {}
    for name, value in environ.items():
        if name not in wanted and not name.startswith("LC_"):
            continue
        if name in dotenv or redact.is_secret_name(name) or value in secrets:
            continue
        out[name] = value
    return out
