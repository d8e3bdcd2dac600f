"""The paths every tool is kept from: one declaration the sandbox, the file tools and the
approval parser all read.

- `CREDENTIAL_STORES` — folders and files under the user's home that hold credentials. The
  sandbox hides ``$HOME/<entry>`` from every command and stdio MCP server (both mechanisms),
  the file tools refuse to read them (matched anywhere in a path). ``sandbox.readable_deny``
  adds to them; ``sandbox.readable_allow`` lifts the ones at or below a path it names.
- `READ_ONLY_IN_WRITABLE` — inside a writable root, these stay read-only (git runs them).
- `autorun_reason` — files that run code when a folder is entered or opened, or at login:
  writing them asks a person first, in the file tools and in the terminal.

Standard library only: nothing here touches the disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

#: (path components under the home, why it is hidden) — a folder and all inside it, or a file
CREDENTIAL_STORES: tuple[tuple[tuple[str, ...], str], ...] = (
    ((".ssh",), "ssh keys and settings"),
    ((".gnupg",), "GnuPG keys"),
    ((".password-store",), "a password store"),
    ((".netrc",), "a .netrc password file"),
    ((".pgpass",), "a PostgreSQL password file"),
    ((".git-credentials",), "stored git credentials"),
    ((".config", "git", "credentials"), "stored git credentials"),
    ((".npmrc",), "npm registry credentials"),
    ((".pypirc",), "PyPI credentials"),
    ((".aws",), "AWS credentials"),
    ((".config", "gcloud"), "Google Cloud credentials"),
    ((".azure",), "Azure credentials"),
    ((".docker", "config.json"), "Docker registry credentials"),
    ((".kube",), "Kubernetes credentials"),
    ((".config", "gh"), "GitHub CLI credentials"),
    ((".local", "share", "keyrings"), "a keyring"),
    ((".local", "share", "kwalletd"), "a keyring"),
    ((".mozilla",), "a browser profile"),
    ((".thunderbird",), "a mail profile"),
    ((".config", "google-chrome"), "a browser profile"),
    ((".config", "chromium"), "a browser profile"),
    ((".config", "BraveSoftware"), "a browser profile"),
    ((".config", "microsoft-edge"), "a browser profile"),
    ((".config", "vivaldi"), "a browser profile"),
    ((".config", "opera"), "a browser profile"),
    (("snap", "firefox"), "a browser profile"),
)

#: entries of a writable root's ``.git`` that stay read-only: git runs what they name
READ_ONLY_IN_WRITABLE: tuple[tuple[str, ...], ...] = ((".git", "hooks"), (".git", "config"))

#: shell start-up files: a new shell or login runs them
STARTUP_FILES = frozenset(
    {".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc"}
    | {".zshenv", ".zprofile", ".zlogin", ".zlogout", ".kshrc", ".mkshrc", ".cshrc", ".tcshrc"}
    | {".login", ".xprofile", ".xsessionrc", ".xinitrc", ".pam_environment"}
)
#: folders of shell start-up files and login environment
STARTUP_DIRS: tuple[tuple[str, ...], ...] = ((".config", "fish"), (".config", "environment.d"))
#: folders of user units that run at login or on a timer
UNIT_DIRS: tuple[tuple[str, ...], ...] = (
    (".config", "systemd"),
    (".local", "share", "systemd"),
    (".config", "autostart"),
)
#: (component run, why writing there runs code later) matched anywhere in a path
_AUTORUN_RUNS: tuple[tuple[tuple[str, ...], str], ...] = (
    ((".git", "hooks"), "a git hook (runs at the next git command)"),
    ((".git", "config"), "a git configuration (can name commands git runs)"),
    ((".vscode", "tasks.json"), "an editor task file (can run when the folder is opened)"),
    ((".vscode", "settings.json"), "editor settings (can name programs the editor runs)"),
    ((".devcontainer",), "a dev container definition (runs commands when the folder opens)"),
    ((".github", "workflows"), "a CI workflow (runs with the repository's secrets on push)"),
    *((run, "a shell start-up file (runs in every new shell or login)") for run in STARTUP_DIRS),
    *((run, "a systemd or autostart unit (runs at login or on a timer)") for run in UNIT_DIRS),
)


def contains(parts: Sequence[str], run: Sequence[str]) -> bool:
    """Whether ``run`` occurs in ``parts`` as consecutive components."""
    n = len(run)
    return any(tuple(parts[i : i + n]) == tuple(run) for i in range(len(parts) - n + 1))


def credential_reason(path: Path) -> str | None:
    """Why ``path`` (resolved) is a credential store, matched anywhere in it, or None."""
    for run, reason in CREDENTIAL_STORES:
        if contains(path.parts, run):
            return reason
    return None


def autorun_reason(path: str | Path) -> str | None:
    """Why writing ``path`` needs a person (it runs code later), or None."""
    parts = Path(path).parts
    if not parts:
        return None
    if parts[-1] == ".envrc":
        return "a direnv file (runs when a shell enters the folder)"
    if parts[-1] in STARTUP_FILES:
        return "a shell start-up file (runs in every new shell or login)"
    for run, reason in _AUTORUN_RUNS:
        if contains(parts, run):
            return reason
    return None


def _real(text: str | Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(text))))


def within(path: Path, root: Path) -> bool:
    """``path`` is ``root`` or below it."""
    return path == root or root in path.parents


def hidden_paths(
    home: Path, readable_deny: Iterable[str], readable_allow: Iterable[str]
) -> list[Path]:
    """The resolved paths no tool reads: the credential stores under ``home`` (but those at
    or below a ``readable_allow`` path) and every ``readable_deny`` entry."""
    allowed = [_real(p) for p in readable_allow]
    out = []
    for run, _ in CREDENTIAL_STORES:
        path = _real(home.joinpath(*run))
        if not any(within(path, a) for a in allowed):
            out.append(path)
    return out + [_real(p) for p in readable_deny]


def read_only_in(root: Path) -> list[Path]:
    """The entries of writable ``root`` that stay read-only: those of a repository at its top
    or one folder down (a workspace holding several checkouts), that exist now (one made
    during a call is covered from the next). Deeper repositories are not looked for: a walk
    per call would cost more than it is worth; the file tools and the approval parser still
    cover them."""
    repos = [root]
    try:
        with os.scandir(root) as entries:
            repos += [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        pass
    out = []
    for repo in repos:
        for run in READ_ONLY_IN_WRITABLE:
            path = repo.joinpath(*run)
            if os.path.lexists(path):
                out.append(_real(path))  # a linked hooks folder: where it really is
    return out
