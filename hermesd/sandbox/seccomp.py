"""The seccomp filter every sandboxed process carries: what it refuses, compiled once.

The filter is generated with libseccomp (through ``pyseccomp``, ctypes over the system's
``libseccomp.so.2``, or libseccomp's own ``seccomp`` module where that is what is installed)
for the running architecture (x86_64, aarch64; a system call made through another ABI, e.g.
32-bit ``int 0x80``, kills the thread), and handed as raw BPF to both mechanisms: bubblewrap
reads it from ``--seccomp FD``, `hermesd.sandbox.landlock_exec` loads it with
``prctl(PR_SET_SECCOMP)``. Everything not named here is allowed.

Refused with ``EPERM``: creating an ``AF_UNIX`` socket (seccomp cannot see a path, so the
whole family goes: no same-uid service reachable over a Unix socket — tmux, screen, the user
bus, ``systemd --user``, an ssh agent — can be asked to run something outside), and the
calls that reach into other processes or the kernel's shared state: ``ptrace``,
``process_vm_readv/writev``, the key ring, ``bpf``, ``perf_event_open``, io_uring (its
operations bypass this filter), ``userfaultfd``, mounts and namespaces (``clone`` with a
namespace flag too). ``clone3`` gets ``ENOSYS``: its flags live in memory the filter cannot
read, and libc falls back to ``clone``. ``socketpair(AF_UNIX)`` stays allowed: an anonymous
pair reaches nothing, and asyncio and libuv need one.

`filter_bpf` is the one entry point; its arguments are the policy's switches.
"""

from __future__ import annotations

import errno
import functools
import os
from typing import Any

AF_UNIX = 1
#: clone flags that make a new namespace
NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
REFUSED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "mount",
    "umount2",
    "pivot_root",
    "unshare",
    "setns",
    "fsopen",
    "fsmount",
    "move_mount",
    "open_tree",
)


class SeccompUnavailable(Exception):
    """libseccomp cannot be loaded here; the message says what to install."""


def _binding() -> Any:
    """pyseccomp, else libseccomp's own binding (``seccomp``, as nixpkgs ships it): one API."""
    try:
        import pyseccomp  # type: ignore[import-untyped]
    except ImportError:
        import seccomp  # type: ignore[import-not-found]

        return seccomp
    return pyseccomp


@functools.cache
def filter_bpf(allow_unix: bool = False) -> bytes:
    """The filter as raw BPF (``struct sock_filter`` array), built once per policy. Raises
    `SeccompUnavailable`."""
    try:
        seccomp: Any = _binding()
    except (ImportError, OSError, RuntimeError) as exc:  # the module or libseccomp.so.2 missing
        raise SeccompUnavailable(
            f"the seccomp filter cannot be built ({exc}); install libseccomp2 and the "
            "pyseccomp package, or set sandbox.mode: off"
        ) from None
    refuse = seccomp.ERRNO(errno.EPERM)
    rules: Any = seccomp.SyscallFilter(seccomp.ALLOW)
    if not allow_unix:
        # the family is an int: compare the low 32 bits only, as the kernel reads it
        rules.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.MASKED_EQ, 0xFFFFFFFF, AF_UNIX))
    for name in REFUSED:
        rules.add_rule(refuse, name)
    for flag in NAMESPACE_FLAGS:  # rules on one call are or-ed: any of these flags refuses
        rules.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    fd = os.memfd_create("hermesd-seccomp", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as out:
            rules.export_bpf(out)
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)
