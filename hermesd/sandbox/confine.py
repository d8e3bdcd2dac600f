"""The mechanism that confines a tool's process, and the command line of one call.

``bwrap`` (bubblewrap) is used where it works: a read-only view of ``/``, a fresh ``/run``
and ``/dev``, the policy's hidden paths under empty read-only tmpfs, the writable ones bound
back, a private tmp (a writable tmpfs over the scratch folder, ``TMPDIR``), a new pid
namespace (the daemon is not there to signal or read), ``--die-with-parent``,
``--new-session``, no capabilities, and the seccomp marker (`landlock_exec.MARKER_FILTER`)
handed to ``--seccomp``. Where user namespaces are not allowed, ``landlock``: the command
runs through `hermesd.sandbox.landlock_exec`, which confines itself with the kernel's
Landlock (ABI 6 or later: signals and abstract sockets scoped too) before it executes the
shell. Landlock can only grant, so ``.git/hooks`` and ``.git/config`` of a writable root
stay writable under it (keeping them read-only would take away creating files in the root and
in ``.git``: docs/sandbox.md); bubblewrap binds them back read-only. With neither, every call
is refused with an error naming ``sandbox.mode``; nothing
runs unconfined unless ``sandbox.mode: off`` says so, and even then the process carries the
marker, so the socket never takes it for the owner (`hermesd.rpc.peer_trust`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermesd.sandbox import landlock_exec, policy
from hermesd.sandbox.policy import DaemonPlaces, SandboxSettings

log = logging.getLogger(__name__)

LAUNCHER = str(Path(landlock_exec.__file__).resolve())
MIN_LANDLOCK_ABI = 6  # signal scoping: without it a confined process could signal the daemon
#: Tests only: pretend the kernel's Landlock ABI is this number (``0``: no Landlock).
TEST_ABI_VARIABLE = "HERMES_TEST_LANDLOCK_ABI"
SHELL = "/bin/sh"


class SandboxUnavailable(Exception):
    """No mechanism can confine the call; the message tells the user what to change."""


@dataclass
class Launch:
    """How to start one call's process."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    pass_fds: tuple[int, ...] = ()
    _cleanups: list[Callable[[], None]] = field(default_factory=list)

    def cleanup(self) -> None:
        """Close what was handed to the child and remove the private tmp."""
        while self._cleanups:
            with contextlib.suppress(OSError):
                self._cleanups.pop()()


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is absent or disabled."""
    forced = os.environ.get(TEST_ABI_VARIABLE)
    if forced is not None:
        return int(forced) if forced.isdigit() else 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        version = libc.syscall(landlock_exec.SYS_CREATE, None, ctypes.c_size_t(0), 1)
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def probe_bwrap(binary: str) -> str | None:
    """None when bubblewrap can make a sandbox here, else why not."""
    path = shutil.which(binary)
    if path is None:
        return f"bubblewrap ({binary}) is not installed"
    argv = [path, *_namespace_args(), "--ro-bind", "/", "/", "--proc", "/proc", SHELL, "-c", ":"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not be run: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap cannot create namespaces here: {why[-1] if why else done.returncode}"
    return None


def _namespace_args() -> list[str]:
    own = ["--unshare-user"] if os.geteuid() != 0 else ["--cap-drop", "ALL"]
    return ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", *own]


class Sandbox:
    """Chooses the mechanism once (and on reload) and builds each call's command line."""

    def __init__(
        self,
        settings: SandboxSettings,
        places: DaemonPlaces,
        environ: Mapping[str, str],
        dotenv: Mapping[str, str],
    ) -> None:
        self.places = places
        self.environ = environ
        self.settings = settings
        self.dotenv = dict(dotenv)
        self.mechanism = "none"
        self.reason = ""
        self.abi = 0
        self.bwrap = ""
        self._choose()

    @classmethod
    def for_home(
        cls,
        home: Path,
        config: Any,
        socket: Path | None = None,
        dotenv: Mapping[str, str] | None = None,
    ) -> Sandbox:
        """The sandbox of a daemon with this home, configuration and socket."""
        # inside the hidden home: Landlock then need not grant every entry of /tmp around it
        scratch = home / "sandbox-tmp"
        places = DaemonPlaces.of_this_process(home, socket, scratch)
        return cls(SandboxSettings.from_config(config), places, os.environ, dotenv or {})

    def reload(self, settings: SandboxSettings, dotenv: Mapping[str, str]) -> None:
        """New ``sandbox.*`` settings (the mechanism is chosen again)."""
        self.settings = settings
        self.dotenv = dict(dotenv)
        self._choose()

    def _choose(self) -> None:
        mode, wanted = self.settings.mode, self.settings.mechanism
        self.reason = ""
        if mode == "off":
            self.mechanism = "off"
            log.warning("sandbox.mode is off: tool commands run unconfined (marked only)")
            return
        why: list[str] = []
        if wanted in ("auto", "bwrap"):
            failure = probe_bwrap(self.settings.bwrap)
            if failure is None:
                self.mechanism, self.bwrap = "bwrap", shutil.which(self.settings.bwrap) or ""
                log.info("sandbox: %s with bubblewrap (%s)", mode, self.bwrap)
                return
            why.append(failure)
        if wanted in ("auto", "landlock"):
            self.abi = landlock_abi()
            if self.abi >= MIN_LANDLOCK_ABI:
                self.mechanism = "landlock"
                log.info("sandbox: %s with Landlock ABI %d", mode, self.abi)
                return
            why.append(
                f"Landlock ABI {self.abi} is below {MIN_LANDLOCK_ABI}"
                if self.abi
                else "Landlock is not available in this kernel"
            )
        self.mechanism = "unavailable"
        self.reason = "; ".join(why)
        log.error("sandbox: no mechanism works (%s); tool commands will be refused", self.reason)

    def status(self) -> dict[str, Any]:
        """The ``sandbox`` field of ``status``."""
        out: dict[str, Any] = {"mode": self.settings.mode, "mechanism": self.mechanism}
        if not self.settings.network and self.mechanism in ("bwrap", "landlock"):
            out["network"] = False
        if self.reason:
            out["reason"] = self.reason
        return out

    def prepare(self, command: str, cwd: Path, workspace: Path) -> Launch:
        """The command line of one ``/bin/sh -c command`` call (touches the disk: not on the
        event loop). Raises `SandboxUnavailable`."""
        self._refuse_if_unavailable("tool commands are")
        env = policy.tool_environment(self.environ, self.settings, self.dotenv)
        if self.mechanism == "bwrap":
            return self._bwrap(command, cwd, workspace, env)
        private = self._private_tmp()
        env["TMPDIR"] = str(private)
        launch = Launch([], env, cwd)
        launch._cleanups.append(lambda: shutil.rmtree(private, ignore_errors=True))
        rules = (
            []
            if self.mechanism == "off"
            else policy.rules(self.settings, self.places, workspace, private, protect_git=False)
        )
        launch.argv = self._launcher(rules, [SHELL, "-c", command])
        return launch

    def _refuse_if_unavailable(self, what: str) -> None:
        if self.mechanism == "unavailable":
            raise SandboxUnavailable(
                f"the sandbox cannot run here ({self.reason}), so {what} refused. "
                "Install bubblewrap or use a kernel with Landlock, or set sandbox.mode: off "
                "in config.yaml to run them unconfined."
            )

    def _launcher(self, rules: list[tuple[str, str]], program: list[str]) -> list[str]:
        """The Landlock launcher's command line (ABI 0 under ``mode: off``: the marker only)."""
        abi = 0 if self.mechanism == "off" else self.abi
        return [
            sys.executable,
            "-I",
            "-S",
            LAUNCHER,
            str(abi),
            *(["--no-network"] if abi and not self.settings.network else []),
            *(f"{level}={path}" for path, level in rules),
            "--",
            *program,
        ]

    def prepare_program(
        self,
        argv: Sequence[str],
        cwd: Path | None,
        workspace: Path,
        writable: Sequence[str] = (),
        readable: Sequence[str] = (),
        search_path: str | None = None,
    ) -> Launch:
        """The command line of a long-running program started by someone else's spawner (an
        MCP server: the SDK starts it and can hand it no extra file descriptor).

        ``argv[0]`` is looked up on ``search_path``, else the sandbox environment's ``PATH``.
        ``writable`` and ``readable`` widen this program's policy (`policy.rules`). Under
        bubblewrap, bwrap reads the marker from a descriptor the command line opens itself
        (``sh -c 'exec 3<FILE && exec bwrap ... --seccomp 3 ...'``, the file private to the
        daemon) and the private tmp is a tmpfs that lives as long as the program; under
        Landlock (and ``mode: off``) it is a folder that `Launch.cleanup` removes once the
        program has ended. Touches the disk: not on the event loop. Raises
        `SandboxUnavailable`, `ValueError` for a widening that would reach the daemon's own
        places, and `FileNotFoundError` for a program not found."""
        self._refuse_if_unavailable("MCP servers are")
        policy.check_widening(self.places, writable, readable)
        env = policy.tool_environment(self.environ, self.settings, self.dotenv)
        directory = Path(os.path.realpath(os.path.expanduser(str(cwd or workspace))))
        path = search_path or env.get("PATH", os.defpath)
        program = [_find_program(argv[0], path, directory), *argv[1:]]
        if self.mechanism == "bwrap":
            marker = self._marker_file()
            rules = policy.rules(self.settings, self.places, workspace, None, writable, readable)
            env["TMPDIR"] = str(self.places.scratch)
            inner = self._bwrap_mounts(rules)
            inner += ["--seccomp", "3", "--chdir", str(directory), "--", *program]
            opener = 'exec 3<"$0" && exec "$@"'
            return Launch([SHELL, "-c", opener, str(marker), *inner], env, directory)
        private = self._private_tmp("program-")
        env["TMPDIR"] = str(private)
        rules = (
            []
            if self.mechanism == "off"
            else policy.rules(
                self.settings, self.places, workspace, private, writable, readable, False
            )
        )
        launch = Launch(self._launcher(rules, program), env, directory)
        launch._cleanups.append(lambda: shutil.rmtree(private, ignore_errors=True))
        return launch

    def _marker_file(self) -> Path:
        """The seccomp marker as a file in the hidden scratch folder (for ``exec 3<FILE``)."""
        self.places.scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.places.scratch / "seccomp-marker"
        with contextlib.suppress(OSError):
            if path.read_bytes() == landlock_exec.MARKER_FILTER:
                return path
        fd, temporary = tempfile.mkstemp(prefix=".marker-", dir=self.places.scratch)
        with os.fdopen(fd, "wb") as out:
            out.write(landlock_exec.MARKER_FILTER)
        os.replace(temporary, path)
        return path

    def _private_tmp(self, prefix: str = "call-") -> Path:
        self.places.scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.places.scratch))

    def _bwrap(self, command: str, cwd: Path, workspace: Path, env: dict[str, str]) -> Launch:
        argv = self._bwrap_mounts(policy.rules(self.settings, self.places, workspace, None))
        read, write = os.pipe()
        os.write(write, landlock_exec.MARKER_FILTER)
        os.close(write)
        env["TMPDIR"] = str(self.places.scratch)
        argv += ["--seccomp", str(read), "--chdir", str(cwd), SHELL, "-c", command]
        launch = Launch(argv, env, cwd, (read,))
        launch._cleanups.append(lambda: os.close(read))
        return launch

    def _bwrap_mounts(self, rules: list[tuple[str, str]]) -> list[str]:
        """bubblewrap's command line up to the seccomp marker: namespaces and mounts."""
        argv = [self.bwrap, "--die-with-parent", "--new-session", *_namespace_args()]
        if not self.settings.network:
            argv.append("--unshare-net")  # a loopback of its own, nothing else
        argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        argv += ["--tmpfs", "/run"]
        argv += ["--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"]
        self.places.scratch.mkdir(mode=0o700, parents=True, exist_ok=True)  # a mount point
        scratch = str(self.places.scratch)
        remount: list[str] = []  # after every mount: mount points are made inside first
        for path, level in sorted(rules, key=lambda r: len(Path(r[0]).parts)):
            if path == "/" or level == "dev" or not os.path.lexists(path):
                continue
            if level == "write":
                argv += ["--bind", path, path]
            elif level == "read":
                argv += ["--ro-bind", path, path]
            elif os.path.isdir(path):
                argv += ["--tmpfs", path]
                remount += ["--remount-ro", path]
            else:
                argv += ["--ro-bind", "/dev/null", path]
        argv += ["--tmpfs", scratch]  # this call's private tmp, writable, gone when it ends
        return argv + remount


def _find_program(name: str, path: str, cwd: Path) -> str:
    """``name`` as an absolute path: on ``path`` when it has no slash, else from ``cwd``."""
    if "/" in name:
        found: str | None = str(cwd / name) if not os.path.isabs(name) else name
        if not (os.path.isfile(str(found)) and os.access(str(found), os.X_OK)):
            found = None
    else:
        found = shutil.which(name, path=path)
    if found is None:
        raise FileNotFoundError(f"the command {name!r} was not found (PATH={path})")
    return found
