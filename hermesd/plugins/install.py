"""Installing, updating and removing user plugins in ``$HERMES_HOME/plugins``.

`resolve_source` tells a local folder, a git source and the ``owner/repo`` shorthand
(→ ``https://github.com/owner/repo.git``) apart. Git sources are limited to the transports that
only fetch: ``https://``, ``ssh://`` and scp-like ``user@host:path``, ``git://``, ``file://``
and local paths. Anything else is refused before git runs — above all git's remote helpers
(``ext::<command>`` runs a command, ``fd::<n>`` talks to a file descriptor and waits forever),
and a source starting with ``-`` (git would read it as an option). `git` runs with the same
limit enforced by git itself (``GIT_ALLOW_PROTOCOL``, ``protocol.ext.allow=never``), no prompts,
and a timeout. `install` copies or clones into a staging folder next to the target, validates
the manifest, and only then moves it to ``plugins/<name>``, so a failed install leaves nothing
behind and an existing plugin is replaced only with ``force``. `update` is ``git pull
--ff-only``. Nothing here loads plugin code; the caller reloads the plugin host afterwards.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hermesd.plugins.manifest import (
    EnvRequirement,
    Manifest,
    ManifestError,
    find_manifest,
    parse_manifest,
)

GIT_TIMEOUT = 120.0
GIT_PROTOCOLS = ("https", "ssh", "git", "file")
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)
_SCP_LIKE = re.compile(r"^[A-Za-z0-9_][\w.-]*@[A-Za-z0-9][\w.-]*:(?!:)")
_SHORTHAND = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class InstallError(Exception):
    """The plugin cannot be installed/updated/removed; ``kind`` is "source", "conflict" or
    "invalid"."""

    def __init__(self, message: str, kind: str = "invalid") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class Installed:
    """The result of an install."""

    name: str
    path: Path
    manifest: Manifest
    replaced: bool


def _git_source(text: str, source: str) -> str | None:
    """``text`` as a git source git may fetch; None when it is not one; InstallError when it
    is one we refuse."""
    if text.startswith("-"):
        raise InstallError(
            f"'{source}' starts with '-', which git would read as an option", "source"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise InstallError("the source contains control characters", "source")
    scheme = _SCHEME.match(text)
    if scheme is not None:
        if scheme["scheme"] not in GIT_PROTOCOLS:  # spelled exactly, lower case
            raise InstallError(
                f"git transport '{scheme['scheme']}://' is not allowed; use "
                + ", ".join(f"{p}://" for p in GIT_PROTOCOLS)
                + ", user@host:path or a local path",
                "source",
            )
        if scheme["rest"].startswith("-"):
            raise InstallError(f"'{source}' names a host starting with '-'", "source")
        return text
    if "::" in text:  # <transport>::<address>: a git remote helper, e.g. ext:: or fd::
        helper = text.split("::", 1)[0]
        raise InstallError(
            f"git remote helpers ('{helper}::') are not allowed as a source: they can run "
            "commands or wait forever; use https://, ssh://, git://, file:// or a path",
            "source",
        )
    if _SCP_LIKE.match(text):
        return text
    if text.endswith(".git") and ":" not in text:  # a local repository path
        return text
    return None


def resolve_source(source: str) -> tuple[str, str]:
    """``("folder", path)`` or ``("git", url)``; InstallError for a source not allowed."""
    text = source.strip()
    if not text:
        raise InstallError("the source is empty", "source")
    folder = Path(text).expanduser()
    if not text.startswith("-") and "::" not in text and folder.is_dir():
        return "folder", str(folder.resolve())
    url = _git_source(text, source)
    if url is not None:
        return "git", url
    if _SHORTHAND.match(text):
        return "git", f"https://github.com/{text}.git"
    raise InstallError(f"'{source}' is neither a folder, a git URL nor owner/repo", "source")


def git(args: list[str], cwd: Path | None = None) -> str:
    """Run git without prompts, limited to `GIT_PROTOCOLS`; its output, or InstallError with
    git's message."""
    env = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        # git's own enforcement of the same list, also for redirects and submodules
        "GIT_ALLOW_PROTOCOL": ":".join(GIT_PROTOCOLS),
        "GIT_PROTOCOL_FROM_USER": "0",
        "LC_ALL": "C",
    }
    argv = ["git", "-c", "protocol.ext.allow=never", "-c", "protocol.fd.allow=never", *args]
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise InstallError("git is not installed", "source") from None
    except subprocess.TimeoutExpired:
        raise InstallError(
            f"git {args[0]} did not finish within {GIT_TIMEOUT:g}s", "source"
        ) from None
    if proc.returncode != 0:
        message = " ".join((proc.stderr or proc.stdout).split())[-400:]
        raise InstallError(f"git {args[0]} failed: {message}", "source")
    return proc.stdout + proc.stderr


def _validate(folder: Path, fallback_name: str) -> Manifest:
    manifest_file = find_manifest(folder)
    if manifest_file is None:
        raise InstallError("not a plugin: no plugin.yaml in the source")
    try:
        manifest = parse_manifest(manifest_file, default_name=fallback_name)
    except (ManifestError, OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"{manifest_file.name} does not parse: {exc}") from None
    if not _NAME.fullmatch(manifest.name):
        raise InstallError(
            f"plugin name '{manifest.name}' must be letters, digits, '.', '_' or '-'"
        )
    if not (folder / "__init__.py").is_file():
        raise InstallError("not a plugin: no __init__.py in the source")
    return manifest


def _refuse_escaping_links(tree: Path) -> None:
    """Refuse a source holding a symlink that leads out of it (e.g. ``data -> /etc``).

    Links inside the tree are kept. Checked on the staged copy, so relative links are judged
    where they will live.
    """
    root = tree.resolve()
    for folder, dirs, files in os.walk(tree):
        for name in (*dirs, *files):
            path = Path(folder, name)
            if not path.is_symlink():
                continue
            try:
                inside = path.resolve().is_relative_to(root)
            except (OSError, RuntimeError):  # a symlink loop
                inside = False
            if not inside:
                raise InstallError(
                    f"the source has a symlink that points outside it: "
                    f"{path.relative_to(tree)} -> {os.readlink(path)}"
                )


def install(plugins_dir: Path, source: str, *, force: bool = False) -> Installed:
    """Copy or clone ``source`` into ``plugins_dir/<name>``."""
    kind, where = resolve_source(source)
    plugins_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".install-", dir=plugins_dir))
    try:
        tree = staging / "tree"
        if kind == "folder":
            shutil.copytree(
                where, tree, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            git(["clone", "--quiet", "--", where, str(tree)])
        fallback = re.sub(r"\.git$", "", where.rstrip("/").rsplit("/", 1)[-1]) or "plugin"
        _refuse_escaping_links(tree)
        manifest = _validate(tree, fallback)
        target = plugins_dir / manifest.name
        replaced = target.exists() or target.is_symlink()
        if replaced and not force:
            raise InstallError(
                f"plugin '{manifest.name}' is already installed at {target}; "
                "use force to replace it",
                "conflict",
            )
        if replaced:
            _remove_tree(target)
        tree.rename(target)
        return Installed(manifest.name, target, manifest, replaced)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def update(folder: Path) -> str:
    """``git pull --ff-only`` in an installed plugin; git's output."""
    if not (folder / ".git").exists():
        raise InstallError(
            f"Plugin {folder.name} was installed from a folder, not from git, so it cannot be "
            "updated: install it again with hermesctl plugins install --force FOLDER.",
            "conflict",
        )
    return git(["pull", "--ff-only", "--quiet"], cwd=folder).strip()


def _remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path)


def remove(folder: Path) -> None:
    """Delete an installed plugin's folder."""
    _remove_tree(folder)


def env_rows(requirements: list[EnvRequirement], present: set[str]) -> list[dict[str, object]]:
    """The ``requires_env`` entries not in ``present``, as the client prompts for them."""
    from hermesd.redact import is_secret_name

    return [
        {
            "name": r.name,
            "description": r.description,
            "url": r.url,
            "secret": r.secret or is_secret_name(r.name),  # asked for with hidden input
        }
        for r in requirements
        if r.name not in present
    ]
