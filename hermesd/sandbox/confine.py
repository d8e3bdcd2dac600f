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
import functools
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
from hermesd.sandbox.egress import Approve, EgressProxy, socket_path_for
from hermesd.sandbox.policy import DaemonPlaces, SandboxSettings

log = logging.getLogger(__name__)

LAUNCHER = str(Path(landlock_exec.__file__).resolve())
#: run by path, never imported here (it puts its own folder on sys.path)
BRIDGE = str(Path(LAUNCHER).with_name("bridge.py"))
#: where the egress proxy's Unix socket appears inside a bubblewrap sandbox (/run is its own)
BRIDGED_SOCKET = "/run/hermesd/egress.sock"
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
        approve: Approve | None = None,
    ) -> None:
        self.places = places
        self.environ = environ
        self.settings = settings
        self.dotenv = dict(dotenv)
        #: sandbox.network: allowlist's way out (`SandboxService` starts and stops it)
        self.egress = EgressProxy(socket_path_for(places.scratch), approve)
        self.egress.configure(settings.allowed_domains)
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
        approve: Approve | None = None,
    ) -> Sandbox:
        """The sandbox of a daemon with this home, configuration and socket; ``approve``
        asks about hosts off ``sandbox.allowed_domains`` (the approval broker's)."""
        # inside the hidden home: Landlock then need not grant every entry of /tmp around it
        scratch = home / "sandbox-tmp"
        places = DaemonPlaces.of_this_process(home, socket, scratch)
        settings = SandboxSettings.from_config(config)
        return cls(settings, places, os.environ, dotenv or {}, approve)

    def reload(self, settings: SandboxSettings, dotenv: Mapping[str, str]) -> None:
        """New ``sandbox.*`` settings (the mechanism is chosen again)."""
        self.settings = settings
        self.dotenv = dict(dotenv)
        self.egress.configure(settings.allowed_domains)
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
        out["network"] = self.settings.network
        if self.settings.network == "allowlist":
            out["allowed_domains"] = list(self.settings.allowed_domains)
        if self.reason:
            out["reason"] = self.reason
        return out

    def prepare(
        self, command: str, cwd: Path, workspace: Path, session_id: str | None = None
    ) -> Launch:
        """The command line of one ``/bin/sh -c command`` call for ``session_id`` (whose
        clients are asked about hosts under ``network: allowlist``); touches the disk: not on
        the event loop. Raises `SandboxUnavailable`."""
        self._refuse_if_unavailable("tool commands are")
        env = policy.tool_environment(self.environ, self.settings, self.dotenv)
        proxy = self._proxy_port()
        if self.mechanism == "bwrap":
            launch = self._bwrap(command, cwd, workspace, env, proxy)
        else:
            private = self._private_tmp()
            env["TMPDIR"] = str(private)
            launch = Launch([], env, cwd)
            launch._cleanups.append(lambda: shutil.rmtree(private, ignore_errors=True))
            rules = (
                []
                if self.mechanism == "off"
                else policy.rules(self.settings, self.places, workspace, private, protect_git=False)
            )
            launch.argv = self._launcher(rules, [SHELL, "-c", command], proxy)
        self._hand_over(launch, proxy, session_id, ask=True)
        return launch

    # --- sandbox.network: allowlist (hermesd.sandbox.egress, hermesd.sandbox.bridge) --------

    def _proxy_port(self) -> int | None:
        """The egress proxy's port under ``network: allowlist``, else None."""
        if self.settings.network != "allowlist":
            return None
        if not self.egress.running:
            raise SandboxUnavailable(
                "sandbox.network is allowlist but the egress proxy is not running (see the "
                "daemon log), so nothing was run"
            )
        return self.egress.port

    def _hand_over(
        self, launch: Launch, port: int | None, session_id: str | None, ask: bool
    ) -> None:
        """Give the call its proxy credentials (last: nothing can fail after, so none leak)
        and point its HTTP clients at the proxy; the credentials end with the call."""
        if port is not None:
            proxy = self.egress.issue(session_id, ask)
            launch.env.update(proxy.environment())
            launch._cleanups.insert(0, functools.partial(self.egress.revoke, proxy.user))

    def _bridged(self, port: int, filter_fd: int, program: list[str]) -> list[str]:
        """bubblewrap's program when its network namespace is bridged to the proxy: the
        bridge, which applies the seccomp filter from ``filter_fd`` after its relay starts."""
        bridge = [sys.executable, "-I", "-S", BRIDGE, BRIDGED_SOCKET, str(port)]
        return [*bridge, str(filter_fd), "--", *program]

    # -----------------------------------------------------------------------------------------

    def _refuse_if_unavailable(self, what: str) -> None:
        if self.mechanism == "unavailable":
            raise SandboxUnavailable(
                f"the sandbox cannot run here ({self.reason}), so {what} refused. "
                "Install bubblewrap or use a kernel with Landlock, or set sandbox.mode: off "
                "in config.yaml to run them unconfined."
            )

    def _launcher(
        self, rules: list[tuple[str, str]], program: list[str], proxy: int | None = None
    ) -> list[str]:
        """The Landlock launcher's command line (ABI 0 under ``mode: off``: the marker only);
        under ``network: allowlist`` TCP may connect to the proxy's port alone."""
        abi = 0 if self.mechanism == "off" else self.abi
        network = []
        if abi and self.settings.network != "on":
            network.append("--no-network")
            if proxy is not None:
                network.append(f"--connect-port={proxy}")
        return [
            sys.executable,
            "-I",
            "-S",
            LAUNCHER,
            str(abi),
            *network,
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
        proxy = self._proxy_port()
        if self.mechanism == "bwrap":
            marker = self._marker_file()
            rules = policy.rules(self.settings, self.places, workspace, None, writable, readable)
            env["TMPDIR"] = str(self.places.scratch)
            inner = self._bwrap_mounts(rules)
            if proxy is None:
                inner += ["--seccomp", "3", "--chdir", str(directory), "--", *program]
            else:
                inner += ["--chdir", str(directory), "--", *self._bridged(proxy, 3, program)]
            opener = 'exec 3<"$0" && exec "$@"'
            launch = Launch([SHELL, "-c", opener, str(marker), *inner], env, directory)
        else:
            private = self._private_tmp("program-")
            env["TMPDIR"] = str(private)
            rules = (
                []
                if self.mechanism == "off"
                else policy.rules(
                    self.settings, self.places, workspace, private, writable, readable, False
                )
            )
            launch = Launch(self._launcher(rules, program, proxy), env, directory)
            launch._cleanups.append(lambda: shutil.rmtree(private, ignore_errors=True))
        self._hand_over(launch, proxy, None, ask=False)  # no session: the allow-list only
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

    def _bwrap(
        self,
        command: str,
        cwd: Path,
        workspace: Path,
        env: dict[str, str],
        proxy: int | None = None,
    ) -> Launch:
        argv = self._bwrap_mounts(policy.rules(self.settings, self.places, workspace, None))
        read, write = os.pipe()
        os.write(write, landlock_exec.MARKER_FILTER)
        os.close(write)
        env["TMPDIR"] = str(self.places.scratch)
        shell = [SHELL, "-c", command]
        if proxy is None:
            argv += ["--seccomp", str(read), "--chdir", str(cwd), *shell]
        else:  # the bridge applies the filter once its relay runs
            argv += ["--chdir", str(cwd), "--", *self._bridged(proxy, read, shell)]
        launch = Launch(argv, env, cwd, (read,))
        launch._cleanups.append(lambda: os.close(read))
        return launch

    def _bwrap_mounts(self, rules: list[tuple[str, str]]) -> list[str]:
        """bubblewrap's command line up to the seccomp marker: namespaces and mounts."""
        argv = [self.bwrap, "--die-with-parent", "--new-session", *_namespace_args()]
        if self.settings.network != "on":
            argv.append("--unshare-net")  # a loopback of its own, nothing else
        argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        argv += ["--tmpfs", "/run"]
        if self.settings.network == "allowlist":  # the proxy's socket, for the bridge
            argv += ["--bind", str(self.egress.socket_path), BRIDGED_SOCKET]
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
