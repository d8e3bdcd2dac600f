"""A command that asks something outside the sandbox to run it, and one that eats the machine
(issue 29), under bubblewrap and Landlock.

The test starts, as the owner, a real tmux server (its socket in a temporary
``TMUX_TMPDIR`` and one under the default ``/tmp/tmux-UID``), a listening Unix socket, a
stand-in user bus at ``$XDG_RUNTIME_DIR/bus`` and an agent-like socket; a terminal call must
reach none of them (the agent only where ``sandbox.unix_sockets`` names it). The system calls
the seccomp filter refuses are made from inside with ctypes and their errno printed; a fork
bomb, a memory hog and a large file meet ``sandbox.limits``; a detached child does not
outlive its call. Each control (the same act outside the sandbox) must succeed, so a probe
that cannot work fails the test. Everything aims at this test's temporary directories.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.approvals import tool
from tests.support.cron import advance, start_cron
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call

MECHANISMS = ["bwrap", "landlock"]
PYTHON = sys.executable
LIMITS = (
    "  limits:\n    processes: 64\n    memory_mb: 256\n    file_size_mb: 8\n    cpu_seconds: 2\n"
)

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Listener:
    """A Unix socket that answers ``pong`` and counts who connected."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.accepted = 0
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(8)
        self.server.settimeout(0.2)
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.accepted += 1
            with conn:
                conn.sendall(b"pong")

    def close(self) -> None:
        self.running = False
        self.thread.join(5)
        self.server.close()


class Owner:
    """What the owner runs beside the daemon: tmux servers and listening sockets."""

    def __init__(self) -> None:
        self.base = short_tmpdir("esc-")
        self.workspace = self.base / "ws"
        self.workspace.mkdir()
        self.tmux_dir = self.base / "tmux"
        self.tmux_dir.mkdir(mode=0o700)
        # one server under a temporary TMUX_TMPDIR, one in the default /tmp/tmux-UID
        self.tmux_socket = str(self.tmux_dir / f"tmux-{os.getuid()}" / "owner")
        self.tmux_name = f"hermesd-test-{secrets.token_hex(4)}"  # in /tmp/tmux-UID/
        self.runtime = self.base / "xdg"
        self.runtime.mkdir(mode=0o700)
        (self.base / "agent").mkdir(mode=0o700)
        self.env = {"TERM": "xterm", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        tmpdir = {**self.env, "TMUX_TMPDIR": str(self.tmux_dir)}
        subprocess.run(["tmux", "-L", "owner", "new-session", "-d"], env=tmpdir, check=True)
        subprocess.run(
            ["tmux", "-L", self.tmux_name, "new-session", "-d"], env=self.env, check=True
        )
        self.listener = Listener(str(self.base / "listen.sock"))
        self.bus = Listener(str(self.runtime / "bus"))
        self.agent = Listener(str(self.base / "agent" / "agent.sock"))
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract_name = f"hermesd-test-{secrets.token_hex(4)}"
        self.abstract.bind("\0" + self.abstract_name)
        self.abstract.listen(1)

    def daemon_env(self) -> dict[str, str]:
        return {"XDG_RUNTIME_DIR": str(self.runtime), "SSH_AUTH_SOCK": self.agent.path}

    def close(self) -> None:
        for where in (["-S", self.tmux_socket], ["-L", self.tmux_name]):
            subprocess.run(["tmux", *where, "kill-server"], env=self.env, capture_output=True)
        for listener in (self.listener, self.bus, self.agent):
            listener.close()
        self.abstract.close()


@pytest.fixture(scope="module")
def owner() -> Iterator[Owner]:
    made = Owner()
    yield made
    made.close()


@pytest.fixture(scope="module", params=MECHANISMS)
def box(request: pytest.FixtureRequest, owner: Owner) -> Iterator[DaemonProcess]:
    """A daemon with approvals off, one mechanism forced and small limits."""
    config = (
        f"approvals:\n  mode: 'off'\nsandbox:\n  mechanism: {request.param}\n{LIMITS}"
        f"terminal:\n  cwd: {owner.workspace}\n"
    )
    daemon = start_daemon(short_tmpdir("esh-"), config=config, env=owner.daemon_env())
    status = daemon.call("status")["sandbox"]
    assert (status["mode"], status["mechanism"]) == ("workspace-write", request.param), status
    assert "limits" not in status, status  # every limit is enforced here
    yield daemon
    daemon.stop()


def run(daemon: DaemonProcess, command: str, timeout: float = 60) -> dict[str, Any]:
    """The terminal tool's result for ``command`` (``tools.call``)."""
    with daemon.client(timeout=timeout + 30) as c:
        args = {"command": command, "timeout": int(timeout)}
        result: dict[str, Any] = tool(c, "terminal", args, timeout=timeout + 30)
    return result


def connect(path: str) -> str:
    """A command that connects to the Unix socket ``path`` (``@name``: an abstract one) and
    prints what it got."""
    code = (
        "import socket,sys\n"
        "p = sys.argv[1]\n"
        "p = chr(0) + p[1:] if p.startswith('@') else p\n"
        "try:\n"
        " s=socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(p)\n"
        " print('GOT', s.recv(4).decode())\n"
        "except OSError as e: print('REFUSED', e)\n"
    )
    return f"{PYTHON} -c {shlex.quote(code)} {shlex.quote(path)}"


def appears(path: Path, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.05)
    return path.exists()


# --- other same-uid services ---------------------------------------------------------------------


def test_the_owners_tmux_server_cannot_be_asked_to_open_a_window(
    box: DaemonProcess, owner: Owner
) -> None:
    control = owner.base / f"control-{secrets.token_hex(3)}"
    subprocess.run(
        ["tmux", "-S", owner.tmux_socket, "new-window", f"touch {control}"],
        env=owner.env,
        check=True,
    )
    assert appears(control, 10)  # the server runs what it is asked to
    attempts = {
        "socket": f"tmux -S {owner.tmux_socket} new-window 'touch {{m}}'",
        "tmpdir": f"TMUX_TMPDIR={owner.tmux_dir} tmux -L owner new-window 'touch {{m}}'",
        "default": f"tmux -L {owner.tmux_name} new-window 'touch {{m}}'",
    }
    markers = {}
    for name, command in attempts.items():
        markers[name] = owner.base / f"outside-marker-{name}-{secrets.token_hex(3)}"
        result = run(box, command.format(m=markers[name]))
        assert result["exit_code"] != 0, (name, result)
    time.sleep(1)  # a window the server had opened would have run by now
    assert [n for n, m in markers.items() if m.exists()] == []


def test_a_listening_unix_socket_cannot_be_reached(box: DaemonProcess, owner: Owner) -> None:
    before = owner.listener.accepted
    out = run(box, connect(owner.listener.path))["output"]
    assert "REFUSED" in out and "Operation not permitted" in out, out
    abstract = run(box, connect("@" + owner.abstract_name))["output"]
    assert "REFUSED" in abstract, abstract
    assert owner.listener.accepted == before


def test_a_listening_unix_socket_answers_outside_the_sandbox(owner: Owner) -> None:
    """The control of the test above: the listener works."""
    done = subprocess.run(
        ["sh", "-c", connect(owner.listener.path)], capture_output=True, text=True
    )
    assert "GOT pong" in done.stdout, done


def test_the_user_bus_and_runtime_folders_are_out_of_reach(
    box: DaemonProcess, owner: Owner
) -> None:
    out = run(box, connect(str(owner.runtime / "bus")))["output"]
    assert "REFUSED" in out, out
    assert owner.bus.accepted == 0
    (owner.runtime / "state").write_text("runtime-state-of-the-owner\n")
    read = run(box, f"cat {owner.runtime}/state; echo end")["output"]
    assert "runtime-state-of-the-owner" not in read, read
    if box.call("status")["sandbox"]["mechanism"] == "bwrap":  # Landlock: names can be listed
        listing = run(box, f"ls -A {owner.runtime} /run/user /run/dbus 2>/dev/null; echo end")
        assert "bus" not in listing["output"].split(), listing


def test_an_agent_socket_is_reachable_only_when_named(
    start: Any, box: DaemonProcess, owner: Owner
) -> None:
    mechanism = box.call("status")["sandbox"]["mechanism"]
    assert "REFUSED" in run(box, connect(owner.agent.path))["output"]
    named = start(
        short_tmpdir("esa-"),
        config=(
            f"approvals:\n  mode: 'off'\nsandbox:\n  mechanism: {mechanism}\n"
            "  unix_sockets: ['$SSH_AUTH_SOCK']\n"
            f"terminal:\n  cwd: {owner.workspace}\n"
        ),
        env=owner.daemon_env(),
    )
    before = owner.agent.accepted
    out = run(named, connect(owner.agent.path))
    assert "GOT pong" in out["output"], out
    via_env = run(named, f"{PYTHON} -c \"import os; print(os.environ['SSH_AUTH_SOCK'])\"")
    assert via_env["output"].strip() == owner.agent.path
    assert owner.agent.accepted == before + 1
    # the other sockets stay closed under bubblewrap (only the named one is bound in)
    if mechanism == "bwrap":
        assert "REFUSED" in run(named, connect(owner.listener.path))["output"]


def test_tmp_and_var_tmp_are_private_to_each_call(box: DaemonProcess, owner: Owner) -> None:
    note = owner.base / "owner-note"
    note.write_text("owner's private note\n")
    name = f"hermesd-call-{secrets.token_hex(4)}"
    first = run(box, f"cat {note}; echo one > /tmp/{name}; echo one > /var/tmp/{name}; echo ok")
    assert "owner's private note" not in first["output"], first
    second = run(box, f"cat /tmp/{name} /var/tmp/{name} 2>&1; echo end")
    assert "one" not in second["output"].split(), second
    assert not Path(f"/tmp/{name}").exists() and not Path(f"/var/tmp/{name}").exists()


# --- system calls --------------------------------------------------------------------------------

NUMBERS = {
    "x86_64": {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "keyctl": 250,
        "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "userfaultfd": 323, "mount": 165, "umount2": 166, "pivot_root": 155, "unshare": 272,
        "setns": 308, "clone3": 435, "clone": 56,
    },
    "aarch64": {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "keyctl": 219,
        "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "userfaultfd": 282, "mount": 40, "umount2": 39, "pivot_root": 41, "unshare": 97,
        "setns": 268, "clone3": 435, "clone": 220,
    },
}  # fmt: skip

PROBE = """\
import ctypes, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
numbers = json.loads(sys.argv[1])
args = {"keyctl": (0, -3, 0), "unshare": (0x10000000,), "io_uring_setup": (1, 0),
        "setns": (-1, 0x10000000), "ptrace": (16, 0),
        "clone": (0x10000000 | 17, 0, 0, 0, 0)}  # CLONE_NEWUSER | SIGCHLD: like fork
out = {}
# clone first: after the control's unshare its uid has no mapping and clone would fail anyway
for name, number in sorted(numbers.items(), key=lambda item: item[0] != "clone"):
    ctypes.set_errno(0)
    given = [ctypes.c_long(a) for a in args.get(name, (0,) * 5)]
    result = libc.syscall(ctypes.c_long(number), *given)
    if name == "clone" and result == 0:  # the child of a clone that was allowed
        os._exit(0)
    out[name] = ctypes.get_errno() if result == -1 else 0
for family, label in ((socket.AF_UNIX, "socket_unix"), (1 | 1 << 32, "socket_unix_high_bits")):
    ctypes.set_errno(0)
    number = 41 if sys.argv[2] == "x86_64" else 198  # socket
    fd = libc.syscall(ctypes.c_long(number), ctypes.c_long(family), 1, 0)
    out[label] = ctypes.get_errno() if fd == -1 else 0
try:
    socket.socketpair()
    out["socketpair"] = 0
except OSError as exc:
    out["socketpair"] = exc.errno
print("PROBE", json.dumps(out))
"""


def test_calls_that_reach_other_processes_or_the_kernel_are_refused(
    box: DaemonProcess, owner: Owner
) -> None:
    machine = platform.machine()
    if machine not in NUMBERS:
        pytest.skip(f"no system call numbers for {machine}")
    script = owner.workspace / "probe.py"
    script.write_text(PROBE)
    numbers = json.dumps(NUMBERS[machine])
    out = run(box, f"{PYTHON} probe.py '{numbers}' {machine}")["output"]
    got = json.loads(out.split("PROBE", 1)[1])
    eperm = {n: e for n, e in got.items() if n not in ("clone3", "socketpair")}
    assert set(eperm.values()) == {1}, got  # EPERM, each of them
    assert got["clone3"] == 38 and got["socketpair"] == 0, got  # ENOSYS: libc uses clone
    # the control, outside the sandbox (a child: unshare would change this very process)
    done = subprocess.run(
        [PYTHON, str(script), numbers, machine], capture_output=True, text=True, timeout=60
    )
    outside = json.loads(done.stdout.split("PROBE", 1)[1])
    assert [n for n in got if n != "socketpair" and outside[n] == got[n]] == [], outside


def test_a_call_carries_one_filter_more_than_the_daemon(box: DaemonProcess) -> None:
    status = Path(f"/proc/{box.proc.pid}/status").read_text()
    daemon_filters = int(status.split("Seccomp_filters:")[1].split()[0])
    out = run(box, "grep Seccomp_filters /proc/self/status")["output"]
    assert int(out.split()[-1]) == daemon_filters + 1  # what peer_trust counts


# --- limits --------------------------------------------------------------------------------------

FORKS = """\
import os, sys, time
made = 0
for _ in range(1000):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    made += 1
print("FORKED", made)
"""


def token_processes(token: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if token.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                    found.append(int(name))
            except OSError:
                continue
    return found


def gone(token: str, within: float = 15) -> list[int]:
    """The processes carrying ``token`` still alive after ``within`` seconds (normally none
    at once: the call kills them before it returns)."""
    deadline = time.monotonic() + within
    while (left := token_processes(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_a_fork_bomb_is_capped_and_nothing_outlives_the_call(
    box: DaemonProcess, owner: Owner
) -> None:
    (owner.workspace / "forks.py").write_text(FORKS)
    token = f"bomb-{secrets.token_hex(4)}"
    out = run(box, f"{PYTHON} forks.py {token}")["output"]
    made = int(out.split("FORKED")[1].split()[0])
    assert 10 <= made < 64, out
    assert gone(token) == []


def test_memory_beyond_the_limit_is_refused(box: DaemonProcess) -> None:
    hog = f"{PYTHON} -c \"b = b'x' * ({{}} << 20); print('ALLOCATED')\""
    assert "ALLOCATED" in run(box, hog.format(32))["output"]  # the control
    big = run(box, hog.format(600))
    assert "ALLOCATED" not in big["output"] and big["exit_code"] != 0, big


def test_a_file_beyond_the_size_limit_is_cut(box: DaemonProcess, owner: Owner) -> None:
    name = f"big-{secrets.token_hex(3)}"
    result = run(box, f"dd if=/dev/zero of={name} bs=1M count=20 2>&1")
    assert result["exit_code"] != 0, result
    assert (owner.workspace / name).stat().st_size <= 8 * 1024 * 1024
    small = run(box, f"dd if=/dev/zero of={name}-small bs=1M count=2 2>&1")
    assert small["exit_code"] == 0 and (owner.workspace / f"{name}-small").stat().st_size > 0


def test_a_process_past_its_cpu_seconds_is_stopped(box: DaemonProcess) -> None:
    code = "import time, sys\nt = time.process_time()\n"
    code += "while time.process_time() - t < float(sys.argv[1]): pass\nprint('SPUN')"
    spin = f"{PYTHON} -c {shlex.quote(code)} {{}}"
    assert "SPUN" in run(box, spin.format(0.2))["output"]  # the control
    result = run(box, spin.format(30), timeout=300)
    assert "SPUN" not in result["output"] and result["exit_code"] != 0, result
    assert "error" not in result, result  # stopped by RLIMIT_CPU, not by the call's timeout


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_detached_child_does_not_outlive_its_call(
    start: Any, owner: Owner, mechanism: str
) -> None:
    """No cgroup here (limits off): the Landlock launcher's reaping alone must do it."""
    daemon = start(
        short_tmpdir("esd-"),
        config=(
            f"approvals:\n  mode: 'off'\nsandbox:\n  mechanism: {mechanism}\n"
            "  limits:\n    processes: 0\n    memory_mb: 0\n"
            f"terminal:\n  cwd: {owner.workspace}\n"
        ),
    )
    sleeper = f"{PYTHON} -c 'import time; time.sleep(120)'"
    token = f"detached-{secrets.token_hex(4)}"
    command = (
        f"setsid {sleeper} {token}-setsid > /dev/null 2>&1 < /dev/null & "
        f"( ( setsid {sleeper} {token}-fork > /dev/null 2>&1 < /dev/null & ) & ); "
        f"sleep 0.5; echo started"
    )
    assert "started" in run(daemon, command)["output"]
    assert gone(token) == []
    timed = f"{token}-timeout"
    result = run(daemon, f"setsid {sleeper} {timed} > /dev/null 2>&1 < /dev/null & sleep 60", 2)
    assert "timed out" in str(result.get("error")), result
    assert gone(timed) == []


# --- other ways in -------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_cron_runs_command_carries_the_filter(start: Any, owner: Owner, mechanism: str) -> None:
    with ScriptedModelServer(rules=lambda request: reply("done")) as model:
        extra = f"approvals:\n  mode: 'off'\nsandbox:\n  mechanism: {mechanism}\n"
        daemon = start_cron(start, model, extra)
        command = f"grep Seccomp_filters /proc/self/status; {connect(owner.listener.path)}"
        model.push(call_tools(tool_call("terminal", {"command": command})), reply("done"))
        job = daemon.call("cron.create", {"schedule": "30m", "prompt": "CRON-SECCOMP"})
        assert advance(daemon, 1800)["started"] == [job["id"]]
        results = [
            m["content"]
            for request in model.requests
            for m in request.get("messages", [])
            if m.get("role") == "tool"
        ]
    assert results, model.requests
    output = json.loads(results[-1])["output"]
    assert "REFUSED" in output and "Operation not permitted" in output, output
    status = Path(f"/proc/{daemon.proc.pid}/status").read_text()
    daemon_filters = int(status.split("Seccomp_filters:")[1].split()[0])
    assert f"Seccomp_filters:\t{daemon_filters + 1}" in output, output
