"""What every benchmark shares: a real hermesd to measure, statistics, and the results file.

Benchmarks compare hermesd with a baseline measured in the same run, interleaved (A/B/B/A…),
and report ratios: on a small, shared machine absolute times drift from minute to minute, a
ratio of two things measured side by side much less. Each script owns one section of
``docs/benchmarks.md`` between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` and rewrites
only that, so scripts never clobber each other or the hand-written text around them.

Nothing here touches the network: hermesd and the baselines listen on Unix sockets in /tmp.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import fcntl
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"

# The code under test: this checkout, whatever the interpreter has installed, or another tree
# holding hermesd/ and hermesctl/ (BENCH_SOURCE=DIR), to compare two versions or to measure a
# snapshot while the checkout is being edited.
SOURCE = Path(os.environ.get("BENCH_SOURCE") or REPO).resolve()
sys.path.insert(0, str(SOURCE))

from hermesctl.client import Client  # noqa: E402  (after SOURCE is on sys.path)

# run_all bounds each script with timeout(1), which sends SIGTERM: unwind through the finally
# blocks and context managers that stop the daemons and baselines, instead of orphaning them.
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment minus anything that would point a child at another daemon or manager."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            (
                "HERMES_",
                "OPENAI_",
                "NOTIFY_",
                "LISTEN_",
                "WATCHDOG_",
                "JOURNAL_",
                "XDG_RUNTIME",
                "PYTHON",
            )
        )
    }
    env.update(extra or {})
    return env


def scratch_dir(prefix: str) -> Path:
    """A short private directory in /tmp (Unix socket paths are limited to 107 bytes).

    Removed when the script exits (SIGTERM included, see above).
    """
    path = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return Path(path)


# --- processes under test ----------------------------------------------------------------------


class Daemon:
    """A real ``python -m hermesd`` on a private socket and HERMES_HOME; ready means READY=1."""

    def __init__(self, python: str = sys.executable, timeout: float = 30.0) -> None:
        self.dir = scratch_dir("hb-")
        self.home = self.dir / "home"
        self.home.mkdir()
        self.socket = self.dir / "hermesd.sock"
        self.log_path = self.dir / "hermesd.log"
        notify_path = self.dir / "notify.sock"
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(notify_path))
        notify.settimeout(0.2)
        argv = [python, "-m", "hermesd", "--socket", str(self.socket)]
        if os.geteuid() == 0:
            argv.append("--allow-root")
        env = clean_env(
            {
                "HERMES_HOME": str(self.home),
                "NOTIFY_SOCKET": str(notify_path),
                "PYTHONPATH": str(SOURCE),
            }
        )
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.dir),
            )
        try:
            self._wait_ready(notify, timeout)
        except BaseException:
            self.stop()
            raise
        finally:
            notify.close()

    def _wait_ready(self, notify: socket.socket, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if b"READY=1" in notify.recv(65536):
                    return
            except TimeoutError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"hermesd exited with {self.proc.returncode}:\n{self.log()}")
        raise RuntimeError(f"hermesd not ready within {timeout:.0f} s:\n{self.log()}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, wait, and remove the scratch directory."""
        stop_process(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(proc: subprocess.Popen[Any], timeout: float = 20.0) -> None:
    """SIGTERM a child we started, then SIGKILL it if it does not go."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


INSTANT_MODEL = """
from tests.support.modelserver import ScriptedModelServer, reply
server = ScriptedModelServer(rules=lambda request: reply("ok"))
print(server.url, flush=True)
server._httpd.serve_forever(poll_interval=0.2)
"""


@contextlib.contextmanager
def instant_model() -> Iterator[str]:
    """A scripted model answering "ok" at once, in a process of its own (so its threads do not
    share the bench's GIL); yields its base URL, stops it on exit."""
    server = subprocess.Popen(
        [sys.executable, "-c", INSTANT_MODEL],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env=clean_env({"PYTHONPATH": str(REPO)}),
    )
    try:
        assert server.stdout is not None
        yield server.stdout.readline().strip()
    finally:
        stop_process(server)


def model_config(url: str) -> str:
    """The ``model`` section of a config.yaml for a scripted model at ``url``."""
    return f"model:\n  base_url: {url}\n  default: scripted-model\n"


def wait_for_ping(path: Path, proc: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """Poll ``path`` with a ``ping`` until something answers it (or ``proc`` dies)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with Client.connect(path, timeout=2.0) as client:
                client.call("ping", timeout=2.0)
                return
        except Exception:  # not listening yet
            time.sleep(0.05)
    raise RuntimeError(f"nothing answered ping on {path} within {timeout:.0f} s")


def pin(pid: int, cpus: set[int]) -> None:
    """Restrict every thread of process ``pid`` (0: this one) to ``cpus``."""
    tasks = Path(f"/proc/{pid or os.getpid()}/task")
    for tid in (int(t.name) for t in tasks.iterdir()):
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setaffinity(tid, cpus)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far, ended threads included (10 ms ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def live_threads_cpu_seconds(pid: int) -> float:
    """CPU time of the threads a process has now, to the nanosecond (from schedstat).

    Finer than ``cpu_seconds`` but blind to threads that have ended: for short measurements of
    a process whose work stays on long-lived threads (an event loop).
    """
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):  # a thread that just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


# --- statistics --------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100), linear between the two nearest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def interleaved(rounds: int, names: Sequence[str]) -> list[str]:
    """A/B/B/A order: every name runs first as often as last, so drift cancels out."""
    order: list[str] = []
    for i in range(rounds):
        order += list(names) if i % 2 == 0 else list(reversed(names))
    return order


def fmt_ratio(value: float, target: float | None = None) -> str:
    """``1.23×``, with the verdict when there is a target."""
    text = f"{value:.2f}×"
    if target is not None:
        text += f" (target ≤ {target:g}×: {'met' if value <= target else 'missed'})"
    return text


# --- the results file --------------------------------------------------------------------------


def machine() -> str:
    """One line naming the hardware and software the figures come from."""
    cpus = len(os.sched_getaffinity(0))
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0]
    return (
        f"{cpus} CPUs{f' ({model})' if model else ''}, Python {platform.python_version()}, "
        f"Linux {platform.release()}, load average {load:.2f} at start"
    )


def git_commit() -> str:
    """Short commit of the code under test, flagged when the working tree has changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(SOURCE), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD") or "unknown"
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if SOURCE != REPO and commit == "unknown":
        return f"the tree in {SOURCE} (BENCH_SOURCE)"
    return commit + (" (with uncommitted changes)" if dirty else "")


def command_line() -> str:
    """The command that produced these figures, as typed from the repository root."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPO)
    python = sys.executable
    if python.startswith(str(REPO) + os.sep):
        python = os.path.relpath(python, REPO)
    prefix = f"BENCH_SOURCE={shlex.quote(str(SOURCE))} " if SOURCE != REPO else ""
    return prefix + shlex.join([python, script, *sys.argv[1:]])


def publish(
    args: argparse.Namespace, name: str, title: str, body: str, started: str, machine_line: str
) -> None:
    """Print a script's report and write it as the ``name`` section of ``DOC``, unless the
    run was ``--no-write`` or ``--quick`` (a smoke run's figures must not replace real ones)."""
    print(body)
    if not args.no_write and not getattr(args, "quick", False):
        write_section(name, title, body, started, machine_line)


def write_section(name: str, title: str, body: str, started: str, machine_line: str) -> None:
    """Replace the ``name`` section of docs/benchmarks.md (appended under ``title`` if new)."""
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = (
        f"{begin}\n"
        f"Command: `{command_line()}`  \n"
        f"Run: {started} UTC, commit {git_commit()}  \n"
        f"Machine: {machine_line}\n\n"
        f"{body.strip()}\n"
        f"{end}"
    )
    DOC.parent.mkdir(parents=True, exist_ok=True)
    with open(DOC, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # several scripts may finish at once
        fh.seek(0)
        text = fh.read()
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            tail = rest.split(end, 1)[1]
            text = head + block + tail
        else:
            text = text.rstrip("\n") + ("\n\n" if text.strip() else "")
            text += f"## {title}\n\n{block}\n"
        fh.seek(0)
        fh.truncate()
        fh.write(text)
    print(f"wrote section '{name}' of {os.path.relpath(DOC)}")


def now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
