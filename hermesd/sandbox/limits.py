"""Resource limits of one call: the ``sandbox.limits.*`` keys, rlimits and a cgroup per call.

Processes and memory are counted for the whole call in a cgroup of its own when the daemon
can make one: cgroup v2 when the daemon's cgroup sits in a delegated parent that lends it
``pids``/``memory`` (systemd ``Delegate=pids memory`` with ``DelegateSubgroup=``), else a
writable cgroup v1 ``pids``/``memory`` hierarchy. The call's processes join it before the
sandbox starts them, and when the call ends everything still in it is killed and the cgroup
removed. Without one, processes fall back to ``RLIMIT_NPROC``: inside bubblewrap's user
namespace it counts only the sandbox's processes; under Landlock it counts every process of
the uid, so it is set to the uid's count at the start plus the limit; for root it is not
enforced at all (`CallLimits.note` says so in ``status``). Every process also gets
``RLIMIT_DATA`` (memory it writes, per process), ``RLIMIT_FSIZE`` and, for a tool call,
``RLIMIT_CPU`` (CPU seconds, per process). Nothing here runs a process.
"""

from __future__ import annotations

import contextlib
import os
import resource
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MB = 1024 * 1024
CONTROLLERS = ("pids", "memory")


@dataclass(frozen=True)
class Limits:
    """``sandbox.limits.*``; 0 turns a limit off."""

    processes: int = 512
    memory_mb: int = 8192
    file_size_mb: int = 16384
    cpu_seconds: int = 600

    @classmethod
    def from_config(cls, config: Any) -> Limits:
        """From a configuration with ``get(dotted, default)``."""

        def number(key: str, default: int) -> int:
            value = config.get(f"sandbox.limits.{key}")
            return default if value is None else int(value)

        return cls(
            processes=number("processes", cls.processes),
            memory_mb=number("memory_mb", cls.memory_mb),
            file_size_mb=number("file_size_mb", cls.file_size_mb),
            cpu_seconds=number("cpu_seconds", cls.cpu_seconds),
        )


@dataclass
class CallCgroup:
    """The cgroup directories of one call (one per v1 hierarchy, one under v2)."""

    directories: list[Path]

    def kill(self) -> None:
        """Kill every process still in the call's cgroups (what outlived the call's own
        process: a daemonised child, a sandbox whose launcher died while it was starting)."""
        for directory in self.directories:
            _empty(directory)

    def destroy(self) -> None:
        """Kill every process still in the call's cgroups, then remove them."""
        for directory in self.directories:
            _empty(directory)
            deadline = time.monotonic() + 5
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy while killed processes finish exiting
                    if time.monotonic() > deadline:
                        break
                    _empty(directory)
                    time.sleep(0.01)


def _empty(directory: Path) -> None:
    kill = directory / "cgroup.kill"
    if kill.exists():
        with contextlib.suppress(OSError):
            kill.write_text("1")
            return
    for _ in range(100):  # a process may fork between reading and killing: read again
        try:
            pids = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


@dataclass
class CgroupHome:
    """Where calls' cgroups are made: a parent directory per controller."""

    parents: dict[str, Path]
    version: int

    @classmethod
    def find(cls) -> CgroupHome | None:
        """The cgroup v2 or v1 parents this process may create children in, or None."""
        try:
            mounts = Path("/proc/self/mountinfo").read_text().splitlines()
            own = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return None
        v2 = _v2_parent(mounts, own)
        if v2 is not None:
            return cls(dict.fromkeys(CONTROLLERS, v2), 2)
        parents = {c: p for c in CONTROLLERS if (p := _v1_parent(mounts, own, c)) is not None}
        return cls(parents, 1) if parents else None

    def make(self, limits: Limits) -> CallCgroup:
        """A new cgroup for one call with its ``pids`` and ``memory`` limits set."""
        name = f"hermesd-{os.getpid()}-{secrets.token_hex(4)}"
        made: list[Path] = []
        values = {"pids": limits.processes, "memory": limits.memory_mb * MB}
        try:
            for controller in sorted({*self.parents}, key=CONTROLLERS.index):
                value = values[controller]
                directory = self.parents[controller] / name
                if directory not in made:
                    directory.mkdir()
                    made.append(directory)
                if not value:
                    continue
                if controller == "pids":
                    (directory / "pids.max").write_text(str(value))
                elif self.version == 2:
                    (directory / "memory.max").write_text(str(value))
                    with contextlib.suppress(OSError):  # no swap to go around the limit
                        (directory / "memory.swap.max").write_text("0")
                else:
                    (directory / "memory.limit_in_bytes").write_text(str(value))
        except OSError:
            CallCgroup(made).destroy()
            raise
        return CallCgroup(made)


def _v2_parent(mounts: list[str], own: list[str]) -> Path | None:
    mount = next((m.split()[4] for m in mounts if " - cgroup2 " in m), None)
    path = next((line[3:] for line in own if line.startswith("0::")), None)
    if mount is None or path is None:
        return None
    here = Path(mount + path.rstrip("/"))
    parent = here.parent if path not in ("", "/") else here
    try:
        enabled = (parent / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    if "pids" in enabled and _can_create(parent):
        return parent
    return None


def _v1_parent(mounts: list[str], own: list[str], controller: str) -> Path | None:
    for line in mounts:
        fields = line.split()
        if " - cgroup " not in line or controller not in fields[-1].split(","):
            continue
        root, mount = fields[3], fields[4]
        for entry in own:
            _, controllers, path = entry.split(":", 2)
            if controller in controllers.split(","):
                relative = path[len(root) :] if root != "/" and path.startswith(root) else path
                parent = Path(mount + relative.rstrip("/"))
                return parent if _can_create(parent) else None
    return None


def _can_create(parent: Path) -> bool:
    probe = parent / f"hermesd-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return False
    return True


def rlimits(limits: Limits, nproc: int | None, cpu: bool) -> list[tuple[int, int]]:
    """(resource, value) pairs for a call: ``nproc`` None leaves processes to the cgroup."""
    out = []
    if nproc:
        out.append((resource.RLIMIT_NPROC, nproc))
    if limits.memory_mb:
        out.append((resource.RLIMIT_DATA, limits.memory_mb * MB))
    if limits.file_size_mb:
        out.append((resource.RLIMIT_FSIZE, limits.file_size_mb * MB))
    if cpu and limits.cpu_seconds:
        out.append((resource.RLIMIT_CPU, limits.cpu_seconds))
    return out


def processes_of(uid: int) -> int:
    """How many processes ``uid`` has now (for an ``RLIMIT_NPROC`` counted over the uid)."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                count += os.stat(f"/proc/{name}").st_uid == uid
    return count
