"""Background processes: what ``terminal(background=true)`` starts, owned by its session.

Each one is a sandboxed call (`hermesd.sandbox`, as a foreground ``terminal`` command: the
same confinement, workspace, environment and limits) with a stdin pipe and its combined output
read into a bounded buffer that keeps the end (``processes.output_chars``). It has the
reference's id (``proc_`` and 12 hex digits) and record fields. A session sees only its own.
At most ``processes.max_per_session`` run at once per session and ``processes.max_running`` in
the daemon; finished ones are kept (the newest `KEEP_FINISHED` per session) until the session
is deleted. Deleting the session kills its processes; stopping the daemon kills all of them.
Every record is written to ``$HERMES_HOME/processes.json`` (`hermesd.tools.process_records`),
and each command carries its id's marker, so after a crash the next daemon kills what is left
of them and shows them as ``gone``.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.tools import process_records
from hermesd.tools.terminal import spawn, terminate

if TYPE_CHECKING:
    from asyncio.subprocess import Process

    from hermesd.sandbox.confine import Launch, Sandbox

log = logging.getLogger(__name__)

KEEP_FINISHED = 64  # finished records kept per session
PREVIEW = 1000  # characters of output in a poll
TAIL = 2000  # characters of output in a wait or kill result
GONE_NOTE = "The daemon stopped without ending this process; it was killed and its output is lost"


@dataclass(eq=False)
class Background:
    """One background process and what is known of it."""

    id: str
    session_id: str
    command: str
    cwd: str
    started_at: float
    pid: int | None = None
    output: str = ""
    exited: bool = False
    exit_code: int | None = None
    completion_reason: str | None = None  # exited | killed | gone
    termination_source: str | None = None  # who killed it (process.kill, session.delete, …)
    gone: bool = False  # left running by a daemon that stopped without ending it
    proc: Process | None = field(default=None, repr=False)
    launch: Launch | None = field(default=None, repr=False)
    done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def status(self) -> str:
        """running, exited or gone."""
        return "gone" if self.gone else "exited" if self.exited else "running"

    def record(self) -> dict[str, Any]:
        """What processes.json keeps."""
        keys = ("id", "session_id", "command", "cwd", "started_at", "pid")
        out = {k: getattr(self, k) for k in keys}
        out.update(status=self.status, exit_code=self.exit_code)
        out.update(completion=self.completion_reason, source=self.termination_source)
        return out

    def ending(self) -> dict[str, Any]:
        """The reference's fields of a finished process."""
        out: dict[str, Any] = {
            "exit_code": self.exit_code,
            "completion_reason": self.completion_reason,
            "termination_source": self.termination_source,
        }
        if self.gone:
            out["note"] = GONE_NOTE
        return out


class ProcessLimit(Exception):
    """Too many processes run already; the message says which limit."""


class ProcessTable:
    """Every background process of the daemon, by id; bounded by the configuration."""

    def __init__(self, sandbox: Sandbox, home: Path, config: Any) -> None:
        self.sandbox = sandbox
        self.config = config
        self.path = home / process_records.FILE_NAME
        self.items: dict[str, Background] = {}
        self._saving = asyncio.Lock()
        self._readers: set[asyncio.Task[None]] = set()

    # -- the configuration --------------------------------------------------------------------

    def _limit(self, key: str) -> int:
        return max(1, int(self.config.get(f"processes.{key}")))

    # -- start-up and shutdown ----------------------------------------------------------------

    async def restore(self) -> None:
        """Read processes.json; a process a crashed daemon left running is killed (when its
        pid is still the same process) and shown as gone."""
        records = await asyncio.to_thread(process_records.recover, self.path)
        for r in records:
            item = Background(r["id"], r["session_id"], r["command"], r["cwd"], r["started_at"])
            item.pid, item.exited, item.gone = r.get("pid"), True, r["status"] == "gone"
            item.exit_code = r.get("exit_code")
            item.completion_reason, item.termination_source = r.get("completion"), r.get("source")
            item.done.set()
            self.items[item.id] = item
        if records:
            await self._save()

    async def stop_all(self) -> None:
        """Kill every running process (the daemon is stopping)."""
        running = [p for p in self.items.values() if not p.exited]
        await asyncio.gather(*(self._kill(p, "daemon.stop") for p in running))
        await self._save()

    async def forget_session(self, session_id: str) -> None:
        """Drop a deleted session's records at once, then kill its processes."""
        mine = [p for p in self.items.values() if p.session_id == session_id]
        for p in mine:
            self.items.pop(p.id, None)
        if not mine:
            return
        await self._save()
        await asyncio.gather(*(self._kill(p, "session.delete") for p in mine if not p.exited))

    # -- starting -----------------------------------------------------------------------------

    async def start(self, command: str, cwd: Path, workspace: Path, session_id: str) -> Background:
        """Start ``command`` in the background for ``session_id``; raises `ProcessLimit`,
        `hermesd.sandbox.confine.SandboxUnavailable` or OSError."""
        running = [p for p in self.items.values() if not p.exited]
        per_session, total = self._limit("max_per_session"), self._limit("max_running")
        if sum(p.session_id == session_id for p in running) >= per_session:
            raise ProcessLimit(
                f"{per_session} background processes already run in this session "
                "(processes.max_per_session); kill one with process(action='kill') first"
            )
        if len(running) >= total:
            raise ProcessLimit(
                f"{total} background processes already run in the daemon (processes.max_running)"
            )
        process_id = f"proc_{secrets.token_hex(6)}"
        marked = f"{process_records.marker(process_id)}\n{command}"
        launch = await asyncio.to_thread(
            self.sandbox.prepare, marked, cwd, workspace, session_id or None
        )
        try:
            subprocess = asyncio.subprocess
            proc = await spawn(launch, stdin=subprocess.PIPE, stderr=subprocess.STDOUT)
        except BaseException:
            await asyncio.to_thread(launch.cleanup)
            raise
        item = Background(process_id, session_id, command, str(cwd), time.time(), proc.pid)
        item.proc, item.launch = proc, launch
        self.items[item.id] = item
        reader = asyncio.get_running_loop().create_task(self._follow(item))
        self._readers.add(reader)
        reader.add_done_callback(self._readers.discard)
        self._prune(session_id)
        await self._save()
        return item

    async def _follow(self, item: Background) -> None:
        """Read the output until the end, then record the exit."""
        proc = item.proc
        assert proc is not None and proc.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        keep = self._limit("output_chars")
        try:
            while data := await proc.stdout.read(65536):
                item.output = (item.output + decoder.decode(data))[-keep:]
            await proc.wait()
        finally:
            item.output = (item.output + decoder.decode(b"", final=True))[-keep:]
            if not item.exited:
                item.exited, item.exit_code = True, proc.returncode
                item.completion_reason = "exited"
            if item.launch is not None:
                launch, item.launch = item.launch, None
                await asyncio.to_thread(launch.cleanup)
            item.done.set()
            with contextlib.suppress(Exception):
                await self._save()

    def _prune(self, session_id: str) -> None:
        finished = [p for p in self.items.values() if p.session_id == session_id and p.exited]
        for old in sorted(finished, key=lambda p: p.started_at)[:-KEEP_FINISHED]:
            self.items.pop(old.id, None)

    # -- what the tool and the RPC methods do -------------------------------------------------

    def get(self, session_id: str, process_id: str) -> Background | None:
        """The session's process with this id (None: there is none, or it is another's)."""
        item = self.items.get(process_id)
        return item if item is not None and item.session_id == session_id else None

    def of_session(self, session_id: str | None) -> list[Background]:
        """A session's processes (None: every session's), oldest first."""
        return sorted(
            (p for p in self.items.values() if session_id is None or p.session_id == session_id),
            key=lambda p: p.started_at,
        )

    async def kill(self, item: Background, source: str) -> None:
        """Kill a running process and record who did."""
        await self._kill(item, source)
        await self._save()

    async def _kill(self, item: Background, source: str) -> None:
        proc, launch = item.proc, item.launch
        if item.exited or proc is None or launch is None:
            return
        item.exited = True  # before the wait: the reader then keeps this ending
        item.completion_reason, item.termination_source = "killed", source
        await terminate(proc, launch)
        item.exit_code = proc.returncode
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(item.done.wait(), 5)
            return
        # something outside any cgroup still holds the output pipe: stop reading it, so the
        # reader ends and the launch is cleaned up
        if proc.stdout is not None:
            proc.stdout.feed_eof()

    async def write(self, item: Background, data: str) -> int:
        """Write ``data`` to the process's stdin; the bytes written. Raises OSError (stdin
        closed) or TimeoutError (the process does not read its input)."""
        proc = item.proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing():
            raise BrokenPipeError("stdin is closed")
        raw = data.encode("utf-8")
        proc.stdin.write(raw)
        await asyncio.wait_for(proc.stdin.drain(), 5)
        return len(raw)

    def close_stdin(self, item: Background) -> None:
        """Close the process's stdin (it reads end-of-file)."""
        proc = item.proc
        if proc is None or proc.stdin is None:
            raise BrokenPipeError("stdin is not available")
        proc.stdin.close()

    async def _save(self) -> None:
        async with self._saving:
            records = [p.record() for p in self.items.values()]
            await asyncio.to_thread(process_records.save, self.path, records)
