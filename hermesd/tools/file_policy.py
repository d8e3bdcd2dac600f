"""Which paths the file tools may read and write on their own, which need a person, which never.

Decisions are made on a resolved path (absolute, no symlinks, no ``..``) and on nothing else,
so the same path always gets the same answer; `hermesd.tools.safeopen` then opens exactly that
path. Three answers:

- **refused** — reads of credential stores (`hermesd.sandbox.protected.CREDENTIAL_STORES`,
  the list the sandbox hides too, less ``sandbox.readable_allow``), ``sandbox.readable_deny``,
  ``/etc/shadow``, ``.env*`` files and ``/proc/PID``; writes of ``.git/hooks`` and
  ``.git/config`` (read-only to every tool); reads or writes of hermesd's own ``config.yaml``,
  ``.env`` and ``state.db*``. Credential rules match anywhere in a path (``/home/alice/.ssh``
  as well as ``~/.ssh``).
- **asked** (writes only) — anything outside the workspace, and anywhere, targets that run code
  or change who gets in: shell start-up files, ``~/.ssh``, ``/etc``, cron, systemd and autostart
  units, files that run when a folder is entered or opened (``.envrc``, ``.vscode/tasks.json``
  and ``settings.json``, ``.devcontainer``, ``.github/workflows``), git configuration,
  ``*.pth``, ``sitecustomize.py``, ``usercustomize.py``, ``site-packages``, project plugin
  folders (``.hermes/plugins``), every ``HERMES_PLUGIN_PATH`` folder, ``$HERMES_HOME`` (its
  workspace excepted), hermesd's own installation and the directories on ``PATH``.
- **allowed** — everything else: reads anywhere, writes inside the workspace.

The list is in docs/approvals.md ("File tools"); a rule added here goes there too.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import hermesd
from hermesd.sandbox import protected
from hermesd.sandbox.protected import (
    STARTUP_DIRS,
    STARTUP_FILES,
    UNIT_DIRS,
    contains,
    credential_reason,
    within,
)

OWN_FILES = ("config.yaml", ".env", "state.db", "state.db-wal", "state.db-shm", "state.db-journal")

_PASSWORD_HASHES = {"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-"}
#: ``.env*`` names that are templates by convention (no values), so reading them is fine.
ENV_TEMPLATES = {".env.example", ".env.sample", ".env.template", ".env.dist"}

_SYSTEM_UNIT_ROOTS = ("/etc/systemd", "/usr/lib/systemd", "/lib/systemd", "/run/systemd")
_CRON_ROOTS = ("/var/spool/cron", "/etc/crontab", "/etc/anacrontab")
_PY_STARTUP = {"sitecustomize.py", "usercustomize.py"}


@dataclass(frozen=True)
class Verdict:
    """A refusal (``refuse``) or a question for a person (``ask``); ``key`` names the rule."""

    reason: str
    key: str
    refuse: bool = False


@dataclass(frozen=True)
class Places:
    """The directories the rules are about, resolved once per daemon (workspace per call)."""

    hermes_home: Path
    user_home: Path
    plugin_path: tuple[Path, ...]
    install: tuple[Path, ...]
    exec_path: tuple[Path, ...]

    @classmethod
    def of_daemon(cls, hermes_home: Path, env: Mapping[str, str] | None = None) -> Places:
        """The places for this process: its ``HOME``, ``HERMES_PLUGIN_PATH``, ``PATH``."""
        env = os.environ if env is None else env
        package = Path(hermesd.__file__).parent
        return cls(
            hermes_home=_real(hermes_home),
            user_home=_real(Path(env.get("HOME") or Path.home())),
            plugin_path=_path_list(env.get("HERMES_PLUGIN_PATH", "")),
            install=tuple(dict.fromkeys(_real(p) for p in (Path(sys.prefix), package))),
            exec_path=_path_list(env.get("PATH", "")),
        )

    def own_files(self) -> list[Path]:
        """hermesd's own config, secrets and database."""
        return [self.hermes_home / name for name in OWN_FILES]


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path.expanduser()))


def _path_list(value: str) -> tuple[Path, ...]:
    return tuple(
        dict.fromkeys(_real(Path(p)) for p in value.split(os.pathsep) if p and os.path.isabs(p))
    )


def _under(path: Path, roots: Iterable[Path | str]) -> Path | None:
    for root in roots:
        root = Path(root)
        if path == root or path.is_relative_to(root):
            return root
    return None


def own_file(path: Path, places: Places) -> str | None:
    """The name of hermesd's own file ``path`` is (by its resolved path), or None."""
    if path.parent == places.hermes_home and (
        path.name in ("config.yaml", ".env") or path.name.startswith("state.db")
    ):
        return path.name
    return None


def read_refusal(
    path: Path, places: Places, deny: Sequence[Path] = (), allow: Sequence[Path] = ()
) -> Verdict | None:
    """Why reading resolved ``path`` is refused, or None when it may be read. ``deny`` and
    ``allow``: ``sandbox.readable_deny`` and ``sandbox.readable_allow``, resolved (the
    terminal's sandbox hides the same paths: one read policy)."""
    own = own_file(path, places)
    if own is not None:
        return _own(own)
    parts = path.parts
    if any(within(path, d) for d in deny):
        return Verdict("listed in sandbox.readable_deny", "secret", refuse=True)
    reason = credential_reason(path)
    if reason is not None and not any(within(path, a) for a in allow):
        return Verdict(reason, "secret", refuse=True)
    if str(path) in _PASSWORD_HASHES:
        return Verdict("the system's password hashes", "secret", refuse=True)
    if path.name.startswith(".env") and path.name not in ENV_TEMPLATES:
        return Verdict("a .env file (secrets by convention)", "secret", refuse=True)
    if len(parts) >= 3 and parts[1] == "proc" and (parts[2].isdigit() or "self" in parts[2]):
        return Verdict("a process's memory, environment or files (/proc/PID)", "secret", True)
    return None


def write_verdict(path: Path, places: Places, workspace: Path) -> Verdict | None:
    """Whether writing resolved ``path`` is refused, asked, or (None) allowed."""
    own = own_file(path, places)
    if own is not None:
        return _own(own)
    for run in protected.READ_ONLY_IN_WRITABLE:
        if contains(path.parts, run):
            return Verdict(
                f"{'/'.join(run)}, which tools may not write (git runs what it names; the "
                "sandbox keeps it read-only too)",
                "git-readonly",
                refuse=True,
            )
    sensitive = sensitive_target(path, places, workspace)
    if sensitive is not None:
        return sensitive
    if _under(path, [workspace]) is None:
        return Verdict(f"outside the workspace {workspace}", "outside")
    return None


def sensitive_target(path: Path, places: Places, workspace: Path) -> Verdict | None:
    """The rule that makes writing ``path`` need a person even inside the workspace."""
    parts, name = path.parts, path.name
    home = places.hermes_home
    if _under(path, [home / "plugins"]) is not None:
        return Verdict("hermesd's plugin directory (code the daemon runs)", "hermes-plugins")
    in_own_workspace = workspace != home and workspace.is_relative_to(home)
    if _under(path, [home]) is not None and not (
        in_own_workspace and _under(path, [workspace]) is not None
    ):
        return Verdict(
            "hermesd's state directory (its skills, memories and settings)", "hermes-home"
        )
    if _under(path, places.plugin_path) is not None:
        return Verdict("a HERMES_PLUGIN_PATH folder (code the daemon runs)", "plugin-path")
    if contains(parts, (".hermes", "plugins")):
        return Verdict("a project plugin folder (.hermes/plugins: code hermes runs)", "plugins")
    if contains(parts, (".ssh",)):
        return Verdict("ssh keys and settings (who may log in)", "ssh")
    if name in STARTUP_FILES or any(contains(parts, run) for run in STARTUP_DIRS):
        return Verdict("a shell start-up file (runs in every new shell or login)", "startup")
    etc_cron = len(parts) > 2 and parts[1] == "etc" and parts[2].startswith("cron")
    if etc_cron or _under(path, _CRON_ROOTS) or "crontabs" in parts:
        return Verdict("a cron table (runs commands on a schedule)", "cron")
    if _under(path, (*_SYSTEM_UNIT_ROOTS, "/etc/xdg/autostart")) or any(
        contains(parts, run) for run in UNIT_DIRS
    ):
        return Verdict("a systemd or autostart unit (runs at boot or login)", "units")
    if len(parts) > 1 and parts[1] == "etc":
        return Verdict("system configuration (/etc)", "etc")
    autorun = protected.autorun_reason(path)
    if autorun is not None:
        return Verdict(autorun, "autorun")
    if name == ".gitconfig":
        return Verdict("a git configuration (can name commands git runs)", "git-config")
    if contains(parts, (".config", "git")):
        return Verdict("a git configuration (can name commands git runs)", "git-config")
    if name.endswith(".pth") or name in _PY_STARTUP:
        return Verdict("a Python start-up file (runs in every Python process)", "python-startup")
    if "site-packages" in parts or "dist-packages" in parts:
        return Verdict("installed Python packages (site-packages)", "site-packages")
    if _under(path, places.install) is not None:
        return Verdict("hermesd's own installation", "install")
    if path.parent in places.exec_path:
        return Verdict("a directory on PATH (a program there runs by name)", "path")
    return None


def _own(name: str) -> Verdict:
    return Verdict(
        f"hermesd's own {name} (config, secrets and session database are off limits to tools)",
        "own",
        refuse=True,
    )


def secret_files(places: Places) -> list[Path]:
    """Concrete secret files to compare a hard-linked file against (its other names)."""
    home = places.user_home
    found = [Path(p) for p in sorted(_PASSWORD_HASHES)]
    found += [home / n for n in (".netrc", ".pgpass", ".git-credentials", ".npmrc", ".pypirc")]
    found += [home / ".aws" / "credentials", home / ".docker" / "config.json"]
    found += [home / ".kube" / "config"]
    with contextlib.suppress(OSError):
        found += [e for e in (home / ".ssh").iterdir() if e.is_file()]
    return found + places.own_files()
