"""What read_file, write_file and search_files do on disk, race-free and within the rules.

Each operation resolves the path it was given once (`PathGuard.canonical`), decides on that
resolved path (`hermesd.tools.file_policy`), then opens exactly that path with no symlink on
the way (`hermesd.tools.safeopen`) and checks the opened inode with ``fstat``: a regular file,
not one of hermesd's own files under another name (a hard link), and for a write a person
approved, the very inode that was there when they were asked. A write is planned first
(`plan_write`, run by the registry before it asks anyone) and done later (`write`) from that
plan, never from the path again. New files are created 0600 and new directories 0700 whatever
the daemon's umask: what a tool writes is private to the daemon's user until someone widens it.
An existing file keeps its mode. The argument parsing and JSON results are
`hermesd.tools.builtin_files`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hermesd.sandbox.policy import SandboxSettings
from hermesd.tools.arguments import BadArgs
from hermesd.tools.consent import Consent
from hermesd.tools.file_policy import (
    Places,
    Verdict,
    own_file,
    read_refusal,
    secret_files,
    write_verdict,
)
from hermesd.tools.safeopen import make_dirs, open_beneath, open_dir

FILE_MODE = 0o600
DIR_MODE = 0o700
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


class PathGuard:
    """Resolves tool paths and knows hermesd's own files and the other protected places."""

    def __init__(
        self,
        home: Path,
        base: Path,
        places: Places | None = None,
        settings: Callable[[], SandboxSettings] | None = None,
    ) -> None:
        self.home = home.expanduser().resolve()
        self.base = base
        self.places = places or Places.of_daemon(self.home)
        # the sandbox's current settings (they change on reload): its readable_deny/allow
        self.settings = settings or SandboxSettings
        self._lists: tuple[SandboxSettings, list[Path], list[Path]] | None = None

    def read_refusal(self, path: Path) -> Verdict | None:
        """Why reading resolved ``path`` is refused (`file_policy.read_refusal` with the
        sandbox's ``readable_deny`` and ``readable_allow``), or None."""
        settings = self.settings()
        if self._lists is None or self._lists[0] is not settings:
            deny = [_real(p) for p in settings.readable_deny]
            self._lists = (settings, deny, [_real(p) for p in settings.readable_allow])
        return read_refusal(path, self.places, self._lists[1], self._lists[2])

    def _protected(self) -> list[Path]:
        return self.places.own_files()

    def canonical(self, raw: str, *, base: Path | None = None) -> Path:
        """``raw`` made absolute (against ``base``) with ``..`` and every symlink resolved."""
        if "\x00" in raw:
            raise BadArgs("path contains a NUL byte")
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = (base or self.base) / path
        try:
            return Path(os.path.realpath(path))
        except OSError as exc:  # a link on the way changed while it was being read
            raise BadArgs(f"cannot resolve {raw}: {exc.strerror or exc}; nothing done") from None

    def resolve(self, raw: str, *, base: Path | None = None) -> Path:
        """The absolute, symlink-free path; raises ``BadArgs`` for one of hermesd's own files."""
        resolved = self.canonical(raw, base=base)
        if self.is_protected(resolved):
            raise BadArgs(
                f"Access denied: {raw} is hermesd's own "
                f"{resolved.name} (config, secrets and session database are "
                "off limits to tools)"
            )
        return resolved

    def is_protected(self, resolved: Path) -> bool:
        """Whether ``resolved`` is hermesd's own file, by name or by inode (a hard link)."""
        if own_file(resolved, self.places) is not None:
            return True
        try:
            return self.is_own_inode(resolved.stat())
        except OSError:
            return False

    def is_own_inode(self, st: os.stat_result) -> bool:
        """Whether ``st`` is the inode of one of hermesd's own files."""
        return _same_as_any(st, self._protected())

    def is_secret_inode(self, st: os.stat_result) -> bool:
        """Whether ``st`` (a file with other names) is a known secret file or hermesd's own."""
        return st.st_nlink > 1 and _same_as_any(st, secret_files(self.places))

    def mentions_protected(self, command: str) -> str | None:
        """A protected file a shell command names literally, if any (best effort)."""
        for target in self._protected():
            spellings = {
                str(target),
                f"$HERMES_HOME/{target.name}",
                f"${{HERMES_HOME}}/{target.name}",
            }
            if self.home == (Path.home() / ".hermes").resolve():
                spellings.add(f"~/.hermes/{target.name}")
            if any(s in command for s in spellings):
                return target.name
        return "state.db" if "state.db" in command else None


def _real(text: str) -> Path:
    return Path(os.path.realpath(os.path.expanduser(text)))


def _same_as_any(st: os.stat_result, paths: list[Path]) -> bool:
    for other in paths:
        try:
            if os.path.samestat(st, other.stat()):
                return True
        except OSError:
            continue
    return False


def _denied(raw: str, verdict: Verdict) -> str:
    return f"Access denied: {raw} is {verdict.reason}"


def _open_exact(path: Path, root: Path, flags: int, mode: int = 0) -> int:
    """Open resolved ``path`` beneath ``root`` (one of its ancestors), refusing symlinks."""
    root_fd = open_dir(root)
    try:
        return open_beneath(root_fd, path.relative_to(root).parts, flags, mode)
    finally:
        os.close(root_fd)


def _moved(path: Path, exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
        return f"{path} changed while it was opened (a symlink appeared on the way)"
    return f"{path}: {exc.strerror or exc}"


# -- read ------------------------------------------------------------------------------------


def read_bytes(guard: PathGuard, raw: str, base: Path, max_bytes: int) -> tuple[Path, bytes]:
    """The resolved path and content of a readable regular file; ``BadArgs`` otherwise."""
    path = guard.canonical(raw, base=base)
    refusal = guard.read_refusal(path)
    if refusal is not None:
        raise BadArgs(_denied(raw, refusal))
    try:
        before = os.lstat(path)  # devices and FIFOs are never opened (an open can act)
    except OSError as exc:
        raise BadArgs(f"cannot read {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(before.st_mode):
        raise BadArgs(f"{path} is a directory; use search_files to list it")
    if not stat.S_ISREG(before.st_mode):
        raise BadArgs(f"{path} is not a regular file")
    try:
        fd = _open_exact(path, Path("/"), _READ)
    except OSError as exc:
        raise BadArgs(f"cannot read {_moved(path, exc)}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or not os.path.samestat(st, before):
            raise BadArgs(f"cannot read {path}: it was replaced while it was opened")
        if guard.is_own_inode(st) or guard.is_secret_inode(st):
            raise BadArgs(f"Access denied: {raw} is another name (a hard link) of a protected file")
        if st.st_size > max_bytes:
            raise BadArgs(f"{path} is larger than {max_bytes // 2**20} MiB")
        return path, fh.read(max_bytes + 1)[:max_bytes]


# -- write -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WritePlan:
    """One write as decided: the exact target, what was there, whether a person was asked."""

    path: Path
    root: Path  # the workspace when the target is in it, else "/"
    existing: tuple[int, int] | None  # (st_dev, st_ino) of the file when decided on
    asked: bool


def plan_write(guard: PathGuard, raw: str, workspace: Path) -> Consent:
    """Resolve and classify a write target (nothing is touched): refuse, ask, or go."""
    try:
        path = guard.canonical(raw, base=workspace)
    except BadArgs as exc:
        return Consent(refuse=str(exc))
    verdict = write_verdict(path, guard.places, workspace)
    if verdict is not None and verdict.refuse:
        return Consent(refuse=_denied(raw, verdict))
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return Consent(refuse=f"cannot write {path}: {exc.strerror or exc}")
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            return Consent(refuse=f"{path} is a directory")
        if not stat.S_ISREG(st.st_mode):
            return Consent(refuse=f"{path} is not a regular file")
        if guard.is_own_inode(st):
            return Consent(refuse=f"Access denied: {raw} is another name of hermesd's own file")
        if verdict is None and st.st_nlink > 1:
            verdict = Verdict(
                f"a file with {st.st_nlink - 1} other name(s) (hard links) that change too",
                "hardlink",
            )
    root = workspace if path.is_relative_to(workspace) else Path("/")
    plan = WritePlan(path, root, (st.st_dev, st.st_ino) if st else None, verdict is not None)
    if verdict is None:
        return Consent(plan=plan)
    scope = path.parent if verdict.key == "outside" else path
    return Consent(
        plan=plan,
        ask=f"write_file to {path}: {verdict.reason}",
        rule_key=f"write_file:{verdict.key}:{scope}",
    )


def write(guard: PathGuard, plan: WritePlan, data: bytes, append: bool) -> bool:
    """Carry out ``plan``; True when the file was created. ``BadArgs`` when the target is no
    longer what was decided on (nothing is written then)."""
    parts = plan.path.relative_to(plan.root).parts
    if not parts:
        raise BadArgs(f"{plan.path} is a directory")
    flags = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_APPEND if append else 0)
    try:
        root_fd = open_dir(plan.root)
    except OSError as exc:
        raise BadArgs(f"cannot write {plan.path}: {plan.root}: {exc.strerror or exc}") from None
    try:
        parent = make_dirs(root_fd, parts[:-1], DIR_MODE)
    except OSError as exc:
        raise BadArgs(f"cannot write {_moved(plan.path, exc)}") from None
    finally:
        os.close(root_fd)
    try:
        fd, created = _open_target(parent, parts[-1], flags, plan)
    except OSError as exc:
        raise BadArgs(f"cannot write {_moved(plan.path, exc)}") from None
    finally:
        os.close(parent)
    with os.fdopen(fd, "ab" if append else "wb", closefd=True) as fh:
        st = os.fstat(fd)
        _check_target(guard, plan, st, created)
        if created:
            os.fchmod(fd, FILE_MODE)  # exactly 0600, whatever the umask took away or left
        elif not append:
            os.ftruncate(fd, 0)  # only now: O_TRUNC would have cut before the inode check
        fh.write(data)
    return created


def _open_target(parent: int, name: str, flags: int, plan: WritePlan) -> tuple[int, bool]:
    if plan.existing is None:
        try:
            return open_beneath(parent, name, flags | os.O_CREAT | os.O_EXCL, FILE_MODE), True
        except FileExistsError:
            if plan.asked:
                raise BadArgs(
                    f"{plan.path} appeared after the approval was asked; nothing was written"
                ) from None
    return open_beneath(parent, name, flags), False


def _check_target(guard: PathGuard, plan: WritePlan, st: os.stat_result, created: bool) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise BadArgs(f"{plan.path} is not a regular file")
    if created:
        return
    if plan.asked and plan.existing != (st.st_dev, st.st_ino):
        raise BadArgs(f"{plan.path} was replaced after the approval was asked; nothing written")
    if guard.is_own_inode(st):
        raise BadArgs(f"Access denied: {plan.path} is another name of hermesd's own file")
    if not plan.asked and st.st_nlink > 1:
        raise BadArgs(f"{plan.path} gained other names (hard links) meanwhile; nothing written")


def remove(plan: WritePlan) -> None:
    """Delete the file ``plan`` decided on (the patch tool's Delete); ``BadArgs`` when it is
    gone or is no longer the file that was decided on (nothing is removed then)."""
    parts = plan.path.relative_to(plan.root).parts
    if not parts or plan.existing is None:
        raise BadArgs(f"cannot delete {plan.path}: no such file")
    try:
        root_fd = open_dir(plan.root)
        try:
            parent = open_beneath(root_fd, parts[:-1], os.O_RDONLY | os.O_DIRECTORY)
        finally:
            os.close(root_fd)
    except OSError as exc:
        raise BadArgs(f"cannot delete {_moved(plan.path, exc)}") from None
    try:
        st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != plan.existing:
            raise BadArgs(f"{plan.path} changed before it could be deleted; nothing was deleted")
        os.unlink(parts[-1], dir_fd=parent)  # unlinkat never follows a symlink
    except OSError as exc:
        raise BadArgs(f"cannot delete {plan.path}: {exc.strerror or exc}") from None
    finally:
        os.close(parent)


# -- search ----------------------------------------------------------------------------------


def open_search_root(guard: PathGuard, raw: str | None, base: Path) -> tuple[Path, int]:
    """The resolved search root and a directory fd for it; ``BadArgs`` when refused."""
    root = guard.canonical(raw, base=base) if raw else Path(os.path.realpath(base))
    refusal = guard.read_refusal(root)
    if refusal is not None:
        raise BadArgs(_denied(raw or str(root), refusal))
    try:
        return root, _open_exact(root, Path("/"), os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise BadArgs(f"root is not a directory: {_moved(root, exc)}") from None


def walk(
    guard: PathGuard, root: Path, root_fd: int, skip_dirs: set[str], hidden: bool
) -> Iterator[tuple[Path, int, list[str]]]:
    """``(directory, its fd, regular file names)`` under ``root``, depth first, sorted; never
    through a symlink, never into a refused place (``~/.ssh`` …) or ``skip_dirs``."""
    stack: list[tuple[str, ...]] = [()]
    while stack:
        rel = stack.pop()
        here = root.joinpath(*rel)
        try:
            fd = open_beneath(root_fd, rel, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue  # gone, or replaced by a symlink since it was listed
        files: list[str] = []
        dirs: list[str] = []
        try:
            with os.scandir(fd) as listing:
                entries = sorted(listing, key=lambda e: e.name)
            for entry in entries:
                if not hidden and entry.name.startswith("."):
                    continue
                if guard.read_refusal(here / entry.name) is not None:
                    continue
                if entry.is_file(follow_symlinks=False):
                    files.append(entry.name)
                elif entry.is_dir(follow_symlinks=False) and entry.name not in skip_dirs:
                    dirs.append(entry.name)
            yield here, fd, files
        except OSError:
            pass
        finally:
            os.close(fd)
        stack.extend((*rel, d) for d in reversed(dirs))


def read_beneath(guard: PathGuard, dir_fd: int, name: str, max_bytes: int) -> bytes | None:
    """A regular file's content beneath ``dir_fd`` without following a symlink, or None."""
    try:
        fd = open_beneath(dir_fd, name, _READ)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        if guard.is_own_inode(st) or guard.is_secret_inode(st):
            return None
        return fh.read(max_bytes)
