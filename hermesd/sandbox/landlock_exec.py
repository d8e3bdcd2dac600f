"""The launcher a terminal command runs through when the sandbox uses Landlock.

Run as ``python -I -S landlock_exec.py ABI [OPTIONS] LEVEL=PATH... -- PROGRAM ARGS...``: it
reads the seccomp filter (``--seccomp FILE``, raw BPF from `hermesd.sandbox.seccomp`; without
it the one-instruction marker), joins the call's cgroups (``--cgroup DIR``), lowers its
resource limits (``--limit RESOURCE=VALUE``), sets ``no_new_privs``, drops every capability
when it runs as root, builds a Landlock ruleset from the rules (level ``none``, ``read``,
``write`` or ``dev``; the deepest rule over a path wins), scopes signals and abstract Unix
sockets to the sandbox (with ``--no-network``, TCP bind and connect are refused too), loads
the filter (the socket counts filters, `hermesd.rpc.peer_trust`) and executes PROGRAM. With
``--reap`` it stays as the program's parent instead, a child subreaper: orphans (after
``setsid`` or a double fork) become its children, and when the program exits, or when this
process gets SIGTERM, SIGINT or SIGHUP, every one left is killed, so nothing outlives the
call. Standard library only, and nothing else imported: it is started once per call.

Landlock only allows, never denies, so a path hidden inside a readable directory is made by
granting the directory's other entries instead of the directory; the directories on the way
keep only the right to be listed (names inside a hidden directory can be listed, not read).
"""

from __future__ import annotations

import _ctypes
import os
import stat
import struct
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
ALL_ABI1 = (1 << 13) - 1
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1, 2
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2  # ABI 4
SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_SECCOMP = 38, 24, 22
PR_SET_CHILD_SUBREAPER = 36
SECCOMP_MODE_FILTER = 2
SYS_CAPSET = 126
#: one BPF instruction, ``return ALLOW``: a filter that changes nothing but is counted in
#: /proc/<pid>/status and can never be removed by the process or its children
MARKER_FILTER = struct.pack("HBBI", 0x06, 0, 0, 0x7FFF0000)


def handled(abi: int) -> int:
    """Every file-system right the running kernel's ABI knows."""
    rights = ALL_ABI1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def level_rights(level: str, abi: int) -> int:
    everything = handled(abi)
    return {
        "read": EXECUTE | READ_FILE | READ_DIR,
        "write": everything,
        "dev": (READ_FILE | WRITE_FILE | IOCTL_DEV) & everything,
    }.get(level, 0)


def _under(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


def plan(rules: list[tuple[str, str]], abi: int) -> list[tuple[str, int, bool | None]]:
    """(path, rights, is a directory or None when unknown) to grant so that every path gets the
    level of its deepest rule."""
    levels = {path: level for path, level in rules if os.path.lexists(path)}
    levels.setdefault("/", "read")
    out: list[tuple[str, int, bool | None]] = []
    above = {p.rsplit("/", n)[0] or "/" for p in levels for n in range(1, p.count("/") + 1)}

    def visit(path: str, level: str, is_dir: bool | None) -> None:
        rights = level_rights(level, abi)
        inner = [p for p in levels if p != path and _under(p, path)]
        if not any(rights & ~level_rights(levels[p], abi) for p in inner):
            if rights:
                out.append((path, rights, is_dir))
            for p in inner:  # upgrades only: the top-most ones, each judged on its own
                if not any(q != p and _under(p, q) for q in inner):
                    visit(p, levels[p], None)
            return
        # something below is weaker: grant the entries beside it, not this directory
        if rights & READ_DIR:
            out.append((path, READ_DIR, True))
        try:
            entries = list(os.scandir(path))
        except OSError:
            return
        for entry in entries:
            child = path.rstrip("/") + "/" + entry.name
            if child in levels:
                visit(child, levels[child], None)
            elif entry.is_symlink():  # a link's target is judged where it really is
                continue
            elif child in above:
                visit(child, level, True)
            elif level_rights(level, abi):  # no rule below: the entry as a whole
                out.append((child, level_rights(level, abi), entry.is_dir(follow_symlinks=False)))

    visit("/", levels["/"], True)
    return out


class _Long(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "l"


class _Char(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "c"


class _CharPointer(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "z"


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Long


class _Libc:
    _handle = _ctypes.dlopen(None)  # type: ignore[arg-type]


_LIBC = _Libc()


_FUNCTIONS: dict[str, _Function] = {}


def _call(function: str, *args: int | bytes) -> int:
    """libc's ``function`` with integer (long) and pointer (bytes) arguments; -1 sets errno."""
    native = _FUNCTIONS.get(function)
    if native is None:
        native = _FUNCTIONS[function] = _Function((function, _LIBC))  # type: ignore[arg-type]
    return int(native(*(a if isinstance(a, bytes) else _Long(a) for a in args)))


def _array(data: bytes) -> Any:
    """``data`` copied into memory whose address can be put in a struct."""
    chars: Any = type("Chars", (_ctypes.Array,), {"_type_": _Char, "_length_": len(data)})
    return chars.from_buffer_copy(data)


def fail(message: str) -> NoReturn:
    sys.stderr.write(f"hermesd sandbox: {message}\n")
    os._exit(126)


def _check(result: int, what: str) -> int:
    if result < 0:
        fail(f"{what} failed: {os.strerror(_ctypes.get_errno())}")
    return result


def confine(
    abi: int,
    rules: list[tuple[str, str]],
    network: bool = True,
    connect_port: int = 0,
    bpf: bytes = MARKER_FILTER,
) -> None:
    """Load the filter ``bpf`` (default: the marker) and, with an ABI (0: the filter alone,
    for ``sandbox.mode: off``), confine this process to the rules; ``main`` then executes
    the program. Without ``network``, TCP is refused except a connect to ``connect_port``
    (the egress proxy; 0: none) and so is every other Internet socket (`network_filter`)."""
    _check(_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if abi:
        _landlock(abi, rules, network, connect_port)
        if not network:
            apply_filter(network_filter())
    if not bpf or len(bpf) % 8:
        fail("the seccomp filter is not a BPF program")
    apply_filter(bpf)


def limit(cgroups: list[str], limits: list[tuple[int, int]]) -> None:
    """Join the call's cgroups and lower this process's resource limits (soft and hard)."""
    for directory in cgroups:
        try:
            with open(directory + "/cgroup.procs", "w") as procs:
                procs.write(str(os.getpid()))
        except OSError as exc:
            fail(f"cannot join the cgroup {directory}: {exc}")
    for resource, value in limits:
        _check(_call("prlimit", 0, resource, struct.pack("QQ", value, value), 0), "prlimit")


def apply_filter(instructions: bytes) -> None:
    """Install a seccomp BPF program (sock_filter records) on this process for good."""
    _check(_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    code = _array(instructions)
    program = struct.pack("HxxxxxxQ", len(instructions) // 8, _ctypes.addressof(code))
    _check(_call("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program, 0, 0), "seccomp filter")


# --- sandbox.network: off | allowlist under Landlock ---------------------------------------
# Landlock (ABI 4) governs TCP bind and connect only; this filter refuses the rest of the way
# out: UDP (DNS among it), raw and packet sockets, SCTP/MPTCP, and io_uring (whose socket
# operations seccomp cannot see). Unix and netlink sockets stay (no route out of the machine).
_ARCHES = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}  # AUDIT_ARCH, socket()
_IO_URING_SETUP = 425
_ALLOW, _EACCES = 0x7FFF0000, 0x00050000 | 13


def network_filter() -> bytes:
    """The seccomp program described above, for this machine's architecture."""
    arch, socket_nr = _ARCHES.get(os.uname().machine, (0, -1))
    if not arch:
        fail(f"sandbox.network needs a socket filter, not written for {os.uname().machine}")
    ld, jeq, jge, and_, ret = 0x20, 0x15, 0x35, 0x54, 0x06
    # (code, k, label if true, label if false); labels are the names of later instructions
    program: list[tuple[str, int, int, str, str]] = [
        ("", ld, 4, "", ""),
        ("", jeq, arch, "", "deny"),
        ("", ld, 0, "", ""),
        ("", jge, 0x40000000, "deny", ""),  # x32 system calls
        ("", jeq, _IO_URING_SETUP, "deny", ""),
        ("", jeq, socket_nr, "", "allow"),
        ("", ld, 16, "", ""),  # the family
        ("", jeq, 1, "allow", ""),  # AF_UNIX
        ("", jeq, 16, "allow", ""),  # AF_NETLINK
        ("", jeq, 2, "type", ""),  # AF_INET
        ("", jeq, 10, "type", "deny"),  # AF_INET6
        ("type", ld, 24, "", ""),
        ("", and_, 0xF, "", ""),
        ("", jeq, 1, "", "deny"),  # SOCK_STREAM
        ("", ld, 32, "", ""),  # the protocol: TCP only
        ("", jeq, 0, "allow", ""),
        ("", jeq, 6, "allow", "deny"),
        ("allow", ret, _ALLOW, "", ""),
        ("deny", ret, _EACCES, "", ""),
    ]
    where = {name: i for i, (name, *_rest) in enumerate(program) if name}
    out = b""
    for i, (_name, code, k, yes, no) in enumerate(program):
        jt = where[yes] - i - 1 if yes else 0
        jf = where[no] - i - 1 if no else 0
        out += struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)
    return out


def _landlock(abi: int, rules: list[tuple[str, str]], network: bool, connect_port: int) -> None:
    if os.geteuid() == 0:  # root keeps uid 0 but no capability survives the exec
        for cap in range(64):
            _call("prctl", PR_CAPBSET_DROP, cap, 0, 0, 0)
        _check(_call("syscall", SYS_CAPSET, struct.pack("Ii", 0x20080522, 0), bytes(24)), "capset")
    scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if abi >= 6 else 0
    if not network and abi < 4:
        fail("sandbox.network: off or allowlist needs Landlock ABI 4")
    net = 0 if network else NET_BIND_TCP | NET_CONNECT_TCP  # handled, never granted
    attr = struct.pack("QQQ", handled(abi), net, scoped)
    ruleset = _check(_call("syscall", SYS_CREATE, attr, len(attr), 0), "landlock_create_ruleset")
    add_rule: Any = _Function(("syscall", _LIBC))  # type: ignore[arg-type]
    add_rule.argtypes = (_Long, _Long, _Long, _CharPointer, _Long)  # converted in C: fast
    for path, rights, is_dir in plan(rules, abi):
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if is_dir is None:
                is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
            if not is_dir:
                rights &= FILE_RIGHTS
            beneath = struct.pack("=Qi", rights, fd)
            _check(add_rule(SYS_ADD_RULE, ruleset, 1, beneath, 0), f"rule for {path}")
        finally:
            os.close(fd)
    if not network and connect_port:  # the egress proxy's port, on any address (documented)
        port_rule = struct.pack("=QQ", NET_CONNECT_TCP, connect_port)
        _check(add_rule(SYS_ADD_RULE, ruleset, 2, port_rule, 0), "rule for the proxy's port")
    _check(_call("syscall", SYS_RESTRICT, ruleset, 0), "landlock_restrict_self")
    os.close(ruleset)


class Spec:
    """The launcher's command line, parsed."""

    def __init__(self) -> None:
        self.abi = 0
        self.network = True
        self.connect_port = 0  # with --no-network: the one port TCP may connect to
        self.reap = False
        self.seccomp = ""
        self.cgroups: list[str] = []
        self.limits: list[tuple[int, int]] = []
        self.rules: list[tuple[str, str]] = []
        self.program: list[str] = []


def parse_spec(args: list[str]) -> Spec:
    """``ABI [--no-network [--connect-port=N]] [--reap] [--seccomp FILE] [--cgroup DIR]...
    [--limit R=V]... LEVEL=PATH... -- PROGRAM ARGS...``."""
    if len(args) < 2 or "--" not in args or not args[0].isdigit():
        fail("usage: landlock_exec.py ABI [OPTIONS] LEVEL=PATH... -- PROGRAM [ARGS...]")
    cut = args.index("--")
    spec, words = Spec(), iter(args[1:cut])
    spec.abi, spec.program = int(args[0]), args[cut + 1 :]
    for word in words:
        if word == "--no-network":
            spec.network = False
        elif word.startswith("--connect-port="):
            spec.connect_port = int(word.split("=", 1)[1])
        elif word == "--reap":
            spec.reap = True
        elif word in ("--seccomp", "--cgroup", "--limit"):
            value = next(words, "")
            if word == "--seccomp":
                spec.seccomp = value
            elif word == "--cgroup":
                spec.cgroups.append(value)
            else:
                resource, _, number = value.partition("=")
                spec.limits.append((int(resource), int(number)))
        else:
            level, _, path = word.partition("=")
            spec.rules.append((path, level))
    return spec


def supervise(program: list[str]) -> NoReturn:
    """Run ``program`` as a child, then kill every process left below this one; exit with
    the program's status."""
    _check(_call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "child subreaper")
    child = os.fork()
    if child == 0:
        _exec(program)
    import _signal  # type: ignore[import-not-found]  # built in; signal would import enum

    def stop(number: int, _frame: object) -> None:
        _kill_descendants()
        os._exit(128 + number)

    for number in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(number, stop)
    status = 0
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            break
    _kill_descendants()
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)  # a killed program: as a shell reports it


def _kill_descendants() -> None:
    """SIGKILL every child until none is left (a killed child's orphans become ours)."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) != (0, 0):
                continue  # reaped one; look again
        except ChildProcessError:
            return
        children = _children()
        for pid in children:
            try:
                os.kill(pid, 9)
            except OSError:  # gone already
                continue
        if not children:  # not in /proc yet: look again shortly
            import time

            time.sleep(0.01)
            continue
        try:
            os.waitpid(-1, 0)  # one of the killed ones
        except ChildProcessError:
            return


def _children() -> list[int]:
    """The pids whose parent is this process (``/proc/PID/stat``, field 4)."""
    me, out = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat_file:
                fields = stat_file.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me:
            out.append(int(name))
    return out


def _exec(program: list[str]) -> NoReturn:
    try:
        os.execv(program[0], program)
    except OSError as exc:
        fail(f"cannot run {program[0]}: {exc}")


def main(argv: list[str]) -> None:
    spec = parse_spec(argv[1:])
    if not spec.program:
        fail("no program to run")
    bpf = MARKER_FILTER
    if spec.seccomp:  # read before Landlock hides the daemon's folder
        try:
            with open(spec.seccomp, "rb") as source:
                bpf = source.read()
        except OSError as exc:
            fail(f"cannot read the seccomp filter: {exc}")
    limit(spec.cgroups, spec.limits)
    confine(spec.abi, spec.rules, spec.network, spec.connect_port, bpf)
    if spec.reap:
        supervise(spec.program)
    _exec(spec.program)


if __name__ == "__main__":
    main(sys.argv)
