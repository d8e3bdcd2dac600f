"""The mechanism that confines a tool's process, and the command line of one call.

``bwrap`` (bubblewrap) is used where it works: a read-only view of ``/``, a fresh ``/run``
and ``/dev``, private ``/tmp`` and ``/var/tmp`` (empty tmpfs), the policy's hidden paths under
empty read-only tmpfs, the writable ones bound back, a private ``TMPDIR`` (a writable tmpfs
over the scratch folder), a new pid namespace (the daemon is not there to signal or read),
``--die-with-parent``, ``--new-session``, no capabilities, the seccomp filter
(`hermesd.sandbox.seccomp`) handed to ``--seccomp`` and the call's rlimits set by
``prlimit`` inside. Where user namespaces are not allowed, ``landlock``: the command runs
through `hermesd.sandbox.landlock_exec`, which confines itself with the kernel's Landlock
(ABI 6 or later: signals and abstract sockets scoped too), loads the same filter and stays
as the command's subreaper. Landlock can only grant, so ``.git/hooks`` and ``.git/config``
of a writable root stay writable under it (keeping them read-only would take away creating
files in the root and in ``.git``: docs/sandbox.md); bubblewrap binds them back read-only.
Both join the call's cgroup when there is one
(`hermesd.sandbox.limits`). With neither mechanism, or without libseccomp, every call is
refused with an error naming ``sandbox.mode``; nothing runs unconfined unless
``sandbox.mode: off`` says so, and even then the process carries the one-instruction marker
filter, so the socket never takes it for the owner (`hermesd.rpc.peer_trust`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermesd.sandbox import landlock_exec, limits, policy, seccomp
from hermesd.sandbox.egress import Approve, EgressProxy, socket_path_for
from hermesd.sandbox.limits import CallCgroup, CgroupHome
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
#: ``prlimit``'s option for each resource limit a call gets under bubblewrap
PRLIMIT_OPTIONS = {
    resource.RLIMIT_NPROC: "--nproc",
    resource.RLIMIT_DATA: "--data",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_CPU: "--cpu",
}


class SandboxUnavailable(Exception):
    """No mechanism can confine the call; the message tells the user what to change."""


@dataclass
class Launch:
    """How to start one call's process."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    pass_fds: tuple[int, ...] = ()
    cgroup: CallCgroup | None = None
    _cleanups: list[Callable[[], None]] = field(default_factory=list)

    def kill_left(self) -> None:
        """Kill what is left of the call once its own process has ended (no-op without a
        cgroup): nothing of a stopped call outlives it, whatever it forked."""
        if self.cgroup is not None:
            self.cgroup.kill()

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
        self.bpf = b""  # the seccomp filter every confined call loads
        self.cgroups: CgroupHome | None = None
        self.prlimit = ""
        self.limits_note = ""
        self.rlimits_work = True
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
        self._choose_mechanism()
        if self.mechanism not in ("bwrap", "landlock"):
            return
        try:
            self.bpf = seccomp.filter_bpf(allow_unix=bool(self.settings.unix_sockets))
        except seccomp.SeccompUnavailable as exc:
            self.mechanism, self.reason = "unavailable", str(exc)
            log.error("sandbox: %s; tool commands will be refused", exc)
            return
        self._choose_limits()

    def _choose_limits(self) -> None:
        """Where the call's limits come from (a cgroup, rlimits); ``limits_note`` says what
        cannot be enforced here."""
        wanted = self.settings.limits
        self.cgroups = CgroupHome.find() if wanted.processes or wanted.memory_mb else None
        self.prlimit = shutil.which("prlimit") or ""
        notes = []
        self.rlimits_work = _can_set_rlimits()
        if not self.rlimits_work:
            notes.append("rlimits are refused here (a seccomp filter on setrlimit/prlimit64)")
        if self.mechanism == "bwrap" and not self.prlimit:
            notes.append("prlimit (util-linux) is not installed: no rlimits under bubblewrap")
        counted = self.cgroups is not None and "pids" in self.cgroups.parents
        if wanted.processes and not counted and os.geteuid() == 0:
            notes.append("processes: not enforced (root, and no writable pids cgroup)")
        self.limits_note = "; ".join(notes)
        if self.limits_note:
            log.warning("sandbox.limits: %s", self.limits_note)

    def _choose_mechanism(self) -> None:
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
        if self.limits_note and self.mechanism in ("bwrap", "landlock"):
            out["limits"] = self.limits_note
        return out

    def prepare(
        self,
        command: str,
        cwd: Path,
        workspace: Path,
        session_id: str | None = None,
        unix_sockets: bool = False,
    ) -> Launch:
        """The command line of one ``/bin/sh -c command`` call for ``session_id`` (whose
        clients are asked about hosts under ``network: allowlist``; ``unix_sockets``: it may
        make Unix sockets, docs/tools.md); touches the disk. Raises `SandboxUnavailable`."""
        self._refuse_if_unavailable("tool commands are")
        env = self._environment()
        proxy = self._proxy_port()
        bpf = seccomp.filter_bpf(allow_unix=True) if unix_sockets and self.bpf else self.bpf

        def build(cgroup: CallCgroup | None) -> Launch:
            if self.mechanism == "bwrap":
                return self._bwrap(command, cwd, workspace, env, cgroup, proxy, bpf)
            private = self._private_tmp()
            env["TMPDIR"] = str(private)
            launch = Launch([], env, cwd)
            launch._cleanups.append(lambda: shutil.rmtree(private, ignore_errors=True))
            rules = (
                []
                if self.mechanism == "off"
                else policy.rules(
                    self.settings, self.places, workspace, private, protect_git=False, cwd=cwd
                )
            )
            command_line = [SHELL, "-c", command]
            launch.argv = self._launcher(rules, command_line, cgroup, True, proxy, bpf)
            return launch

        launch = self._in_cgroup(build)
        self._hand_over(launch, proxy, session_id, ask=True)
        return launch

    def _in_cgroup(self, build: Callable[[CallCgroup | None], Launch]) -> Launch:
        """``build`` a launch for a new cgroup of its own (None: no cgroup here), removed by
        the launch's cleanup, or at once when building fails."""
        cgroup = self._call_cgroup()
        try:
            launch = build(cgroup)
        except BaseException:
            if cgroup is not None:
                cgroup.destroy()
            raise
        if cgroup is not None:
            launch.cgroup = cgroup
            launch._cleanups.insert(0, cgroup.destroy)  # last: after the process has ended
        return launch

    def _environment(self) -> dict[str, str]:
        """The tool environment, with ``NAME`` for each ``$NAME`` entry of
        ``sandbox.unix_sockets`` (``$SSH_AUTH_SOCK``: the agent is found)."""
        env = policy.tool_environment(self.environ, self.settings, self.dotenv)
        if self.mechanism in ("bwrap", "landlock"):
            for entry in self.settings.unix_sockets:
                name = entry[1:]
                if entry.startswith("$") and name.isidentifier() and self.environ.get(name):
                    env[name] = self.environ[name]
        return env

    def _call_cgroup(self) -> CallCgroup | None:
        """A cgroup for one call, or None (no cgroup here, or ``mode: off``)."""
        if self.cgroups is None or self.mechanism not in ("bwrap", "landlock"):
            return None
        return self.cgroups.make(self.settings.limits)

    def _rlimits(self, cgroup: CallCgroup | None, call: bool) -> list[tuple[int, int]]:
        """The rlimits of one call; processes only where no cgroup counts them."""
        wanted = self.settings.limits
        if not self.rlimits_work:
            return []
        nproc = None
        counted = cgroup is not None and self.cgroups is not None and "pids" in self.cgroups.parents
        if wanted.processes and not counted:
            if self.mechanism == "bwrap":  # set inside the user namespace: counts the sandbox's
                nproc = wanted.processes
            elif os.geteuid() != 0:  # counted over the uid: what it has now plus the limit
                nproc = limits.processes_of(os.getuid()) + wanted.processes
        return limits.rlimits(wanted, nproc, cpu=call)

    def _prlimit(self, cgroup: CallCgroup | None, call: bool) -> list[str]:
        """``prlimit --…= -- `` before the program under bubblewrap (nothing without it)."""
        pairs = self._rlimits(cgroup, call)
        if not pairs or not self.prlimit:
            return []
        return [self.prlimit, *(f"{PRLIMIT_OPTIONS[r]}={v}" for r, v in pairs), "--"]

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
        self,
        rules: list[tuple[str, str]],
        program: list[str],
        cgroup: CallCgroup | None = None,
        call: bool = False,
        proxy: int | None = None,
        bpf: bytes | None = None,
    ) -> list[str]:
        """The Landlock launcher's command line (ABI 0 under ``mode: off``: the marker only).
        A tool ``call`` is supervised (``--reap``) and gets a CPU-time limit; under
        ``network: allowlist`` TCP may connect to the proxy's port alone."""
        abi = 0 if self.mechanism == "off" else self.abi
        options = []
        if abi:
            if self.settings.network != "on":
                options.append("--no-network")
                if proxy is not None:
                    options.append(f"--connect-port={proxy}")
            options += ["--reap"] if call else []
            options += ["--seccomp", str(self._filter_file(bpf or self.bpf))]
            options += [
                w for d in (cgroup.directories if cgroup else ()) for w in ("--cgroup", str(d))
            ]
            options += [w for r, v in self._rlimits(cgroup, call) for w in ("--limit", f"{r}={v}")]
        return [
            sys.executable,
            "-I",
            "-S",
            LAUNCHER,
            str(abi),
            *options,
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
        env = self._environment()
        directory = Path(os.path.realpath(os.path.expanduser(str(cwd or workspace))))
        path = search_path or env.get("PATH", os.defpath)
        program = [_find_program(argv[0], path, directory), *argv[1:]]
        if _in_private_tmp(program[0]) and not self._is_daemon_place(program[0]):
            readable = (*readable, program[0])  # the program named is read where it is
        proxy = self._proxy_port()

        def build(cgroup: CallCgroup | None) -> Launch:
            if self.mechanism == "bwrap":
                bpf = self._filter_file(self.bpf)
                rules = policy.rules(
                    self.settings, self.places, workspace, None, writable, readable
                )
                env["TMPDIR"] = str(self.places.scratch)
                inner = self._bwrap_mounts(rules)
                run = [*self._prlimit(cgroup, call=False), *program]
                if proxy is None:
                    inner += ["--seccomp", "3", "--chdir", str(directory), "--", *run]
                else:
                    inner += ["--chdir", str(directory), "--", *self._bridged(proxy, 3, run)]
                opener = f'{_joins(cgroup)}exec 3<"$0" && exec "$@"'
                return Launch([SHELL, "-c", opener, str(bpf), *inner], env, directory)
            private = self._private_tmp("program-")
            env["TMPDIR"] = str(private)
            rules = (
                []
                if self.mechanism == "off"
                else policy.rules(
                    self.settings, self.places, workspace, private, writable, readable, False
                )
            )
            launch = Launch(self._launcher(rules, program, cgroup, proxy=proxy), env, directory)
            launch._cleanups.append(lambda: shutil.rmtree(private, ignore_errors=True))
            return launch

        launch = self._in_cgroup(build)
        self._hand_over(launch, proxy, None, ask=False)  # no session: the allow-list only
        return launch

    def _filter_file(self, bpf: bytes) -> Path:
        """The seccomp filter as a file in the hidden scratch folder (for ``exec 3<FILE``
        and the Landlock launcher), rewritten when the filter changed."""
        self.places.scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.places.scratch / ("seccomp-filter" if bpf == self.bpf else "seccomp-filter-2")
        with contextlib.suppress(OSError):
            if path.read_bytes() == bpf:
                return path
        fd, temporary = tempfile.mkstemp(prefix=".filter-", dir=self.places.scratch)
        with os.fdopen(fd, "wb") as out:
            out.write(bpf)
        os.replace(temporary, path)
        return path

    def _daemon_places(self) -> list[str]:
        """The daemon's hidden folders that lie in a private tmp."""
        places = [self.places.home] + ([self.places.socket.parent] if self.places.socket else [])
        return [str(p) for p in places if _in_private_tmp(str(p))]

    def _is_daemon_place(self, path: str) -> bool:
        places = [self.places.home] + ([self.places.socket.parent] if self.places.socket else [])
        return any(path == str(p) or path.startswith(f"{p}/") for p in places)

    def _private_tmp(self, prefix: str = "call-") -> Path:
        self.places.scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.places.scratch))

    def _bwrap(
        self,
        command: str,
        cwd: Path,
        workspace: Path,
        env: dict[str, str],
        cgroup: CallCgroup | None,
        proxy: int | None = None,
        bpf: bytes | None = None,
    ) -> Launch:
        argv = self._bwrap_mounts(
            policy.rules(self.settings, self.places, workspace, None, cwd=cwd)
        )
        read, write = os.pipe()
        os.write(write, bpf or self.bpf)
        os.close(write)
        env["TMPDIR"] = str(self.places.scratch)
        shell = [*self._prlimit(cgroup, call=True), SHELL, "-c", command]
        if proxy is None:
            argv += ["--seccomp", str(read), "--chdir", str(cwd), *shell]
        else:  # the bridge applies the filter once its relay runs
            argv += ["--chdir", str(cwd), "--", *self._bridged(proxy, read, shell)]
        if cgroup is not None:  # joined by a shell before bwrap starts: its children inherit it
            argv = [SHELL, "-c", _joins(cgroup) + 'exec "$@"', SHELL, *argv]
        launch = Launch(argv, env, cwd, (read,))
        launch._cleanups.append(lambda: os.close(read))
        return launch

    def _bwrap_mounts(self, rules: list[tuple[str, str]]) -> list[str]:
        """bubblewrap's command line up to the seccomp marker: namespaces and mounts."""
        argv = [self.bwrap, "--die-with-parent", "--new-session", *_namespace_args()]
        if self.settings.network != "on":
            argv.append("--unshare-net")  # a loopback of its own, nothing else
        argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        argv += ["--tmpfs", "/run"]  # hides /run/user, /run/screen, /run/dbus too
        if self.settings.network == "allowlist":  # the proxy's socket, for the bridge
            argv += ["--bind", str(self.egress.socket_path), BRIDGED_SOCKET]
        argv += ["--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"]
        self.places.scratch.mkdir(mode=0o700, parents=True, exist_ok=True)  # a mount point
        scratch = str(self.places.scratch)
        private = {os.path.realpath(p) for p in policy.PRIVATE_TMP}
        named = {path for path, _ in rules}
        # hidden inside a private tmp, the daemon's places need no rule for Landlock; here
        # they stay empty read-only folders rather than writable ones of the private tmpfs
        rules = rules + [(place, "none") for place in self._daemon_places() if place not in named]
        remount: list[str] = []  # after every mount: mount points are made inside first
        for path, level in sorted(rules, key=lambda r: len(Path(r[0]).parts)):
            if path == "/" or level == "dev" or not os.path.lexists(path):
                continue
            if level == "write":
                argv += ["--bind", path, path]
            elif level == "read":
                argv += ["--ro-bind", path, path]
            elif path in private:  # hidden and writable: an empty tmpfs of this call's own
                argv += ["--tmpfs", path]
            elif path == "/run" or path.startswith("/run/"):
                continue  # already an empty /run
            elif os.path.isdir(path):
                argv += ["--tmpfs", path]
                remount += ["--remount-ro", path]
            else:
                argv += ["--ro-bind", "/dev/null", path]
        for path in unix_sockets(self.settings):  # each one bound in by name
            argv += ["--ro-bind-try", path, path]
        argv += ["--tmpfs", scratch]  # this call's private tmp, writable, gone when it ends
        return argv + remount


def unix_sockets(settings: SandboxSettings) -> list[str]:
    """The ``sandbox.unix_sockets`` paths, ``$NAME`` read from the daemon's environment (one
    that is unset is left out)."""
    out = []
    for entry in settings.unix_sockets:
        path = os.path.expanduser(os.path.expandvars(entry))
        if "$" in path or not os.path.isabs(path):
            log.warning("sandbox.unix_sockets: %r names no absolute path here", entry)
            continue
        out.append(path)
    return out


def _can_set_rlimits() -> bool:
    """Whether this process may set an rlimit (a unit's SystemCallFilter can forbid it)."""
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, resource.getrlimit(resource.RLIMIT_FSIZE))
    except (OSError, ValueError):
        return False
    return True


def _in_private_tmp(path: str) -> bool:
    """Whether ``path`` lies in ``/tmp`` or ``/var/tmp`` (private to each call)."""
    real = os.path.realpath(path)
    return any(real.startswith(os.path.realpath(t) + "/") for t in policy.PRIVATE_TMP)


def _joins(cgroup: CallCgroup | None) -> str:
    """Shell words that move the shell into the call's cgroups before it executes on."""
    if cgroup is None:
        return ""
    return "".join(
        f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))} && " for d in cgroup.directories
    )


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
