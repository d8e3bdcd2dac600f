"""Opening exactly the path that was checked: no symlink anywhere on the way, no race.

A file tool first resolves a path (`os.path.realpath`) and decides on that symlink-free path;
this module then opens that very path beneath a directory fd, refusing any symlink it meets
(``ELOOP``/``ENOTDIR``), so a directory swapped for a symlink between the decision and the
open makes the open fail instead of redirecting it. The kernel's ``openat2`` does that in one
call (``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``, Linux 5.6+, called
through ctypes: the standard library has no binding); without it (older kernel, a seccomp
filter answering ``ENOSYS``/``EPERM``) a walk opens one component at a time with
``O_NOFOLLOW | O_DIRECTORY`` relative to the previous one. Callers still check the opened
inode (``fstat``): what lies at the path may be a different file than the one decided on.
This module knows nothing about which paths are allowed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Sequence
from pathlib import Path

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS

#: openat2's number per machine (`uname -m`); the generic table gives 437 on both.
SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


class _Openat2:
    """The ``openat2`` syscall, or None-like when this machine or kernel lacks it."""

    def __init__(self) -> None:
        self.number = SYS_OPENAT2.get(platform.machine())
        self._libc: ctypes.CDLL | None = None
        self.works: bool | None = None if self.number is not None else False

    def __call__(self, dir_fd: int, path: str, flags: int, mode: int) -> int:
        if self._libc is None:
            self._libc = ctypes.CDLL(None, use_errno=True)
            self._libc.syscall.restype = ctypes.c_long
        how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
        while True:
            fd = int(
                self._libc.syscall(
                    ctypes.c_long(self.number or 0),
                    ctypes.c_int(dir_fd),
                    ctypes.c_char_p(os.fsencode(path)),
                    ctypes.byref(how),
                    ctypes.c_size_t(ctypes.sizeof(how)),
                )
            )
            if fd >= 0:
                return fd
            err = ctypes.get_errno()
            if err not in (errno.EAGAIN, errno.EINTR):  # EAGAIN: a rename raced the lookup
                raise OSError(err, os.strerror(err), path)

    def available(self) -> bool:
        """Whether openat2 answers here (probed once: opening "." beneath "/")."""
        if self.works is None:
            root = os.open("/", _DIR_FLAGS)
            try:
                os.close(self(root, ".", _DIR_FLAGS, 0))
                self.works = True
            except OSError as exc:
                self.works = exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL)
            finally:
                os.close(root)
        return self.works


openat2 = _Openat2()


def _parts(relative: str | Sequence[str]) -> list[str]:
    parts = relative.split("/") if isinstance(relative, str) else list(relative)
    parts = [p for p in parts if p not in ("", ".")]
    if ".." in parts:
        raise OSError(errno.EXDEV, "path leaves its directory", "/".join(parts))
    return parts


def open_beneath(dir_fd: int, relative: str | Sequence[str], flags: int, mode: int = 0) -> int:
    """Open ``relative`` (no ``..``) beneath ``dir_fd`` without following any symlink."""
    parts = _parts(relative)
    if not parts:
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=dir_fd)
    if openat2.available():
        return openat2(dir_fd, "/".join(parts), flags, mode)
    return walk_open(dir_fd, parts, flags, mode)


def walk_open(dir_fd: int, parts: Sequence[str], flags: int, mode: int = 0) -> int:
    """`open_beneath` without openat2: one ``O_NOFOLLOW`` open per component."""
    parts = _parts(parts)
    if not parts:
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=dir_fd)
    current = dir_fd
    try:
        for part in parts[:-1]:
            step = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=current)
            if current != dir_fd:
                os.close(current)
            current = step
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=current)
    finally:
        if current != dir_fd:
            os.close(current)


def open_dir(path: Path) -> int:
    """A directory fd for an absolute, symlink-free ``path``, opened beneath "/"."""
    root = os.open("/", _DIR_FLAGS)
    try:
        return open_beneath(root, path.parts[1:], _DIR_FLAGS)
    finally:
        os.close(root)


def make_dirs(dir_fd: int, parts: Sequence[str], mode: int) -> int:
    """The fd of ``parts`` beneath ``dir_fd``, creating missing directories with exactly
    ``mode`` (not narrowed by the umask); a symlink on the way is refused, not followed."""
    current = os.dup(dir_fd)
    try:
        for part in _parts(parts):
            made = False
            try:
                step = open_beneath(current, part, _DIR_FLAGS)
            except FileNotFoundError:
                try:
                    os.mkdir(part, mode, dir_fd=current)  # mkdir never follows a symlink
                    made = True
                except FileExistsError:
                    pass  # someone else made it meanwhile: open it like any other
                step = open_beneath(current, part, _DIR_FLAGS)
            os.close(current)
            current = step
            if made:
                os.fchmod(current, mode)
        return current
    except BaseException:
        os.close(current)
        raise
