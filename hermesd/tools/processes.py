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

With ``pty`` the call's stdio is a pseudo-terminal (`hermesd.tools.process_pty`) instead of
pipes. With ``notify_on_complete`` the session gets a notice when the process ends, unless
the model has read the ending already (``wait``, ``log`` to the end, ``kill``) or the session
or daemon ended it; with ``watch_patterns`` when a new line of output matches
(`hermesd.tools.process_notices`: the text and the rate limits). `ProcessTable.notify` carries
the notices to the session (`hermesd.agent.session_registry.SessionRegistry.wake`).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.tools import process_notices, process_records
from hermesd.tools.process_notices import Breaker, Watch
from hermesd.tools.process_pty import EOF_CHARACTER, Terminal, spawn_on_terminal
from hermesd.tools.terminal import spawn, terminate

if TYPE_CHECKING:
    from asyncio.subprocess import Process

    from hermesd.sandbox.confine import Launch, Sandbox

log = logging.getLogger(__name__)

KEEP_FINISHED = 64  # finished records kept per session
PREVIEW = 1000  # characters of output in a poll
TAIL = 2000  # characters of output in a wait or kill result
GONE_NOTE = "The daemon stopped without ending this process; it was killed and its output is lost"
#: who may end a process without its session being told (the session or daemon is ending)
QUIET_ENDINGS = ("daemon.stop", "session.delete")

#: (session id, text, sender, still wanted?) -> None: a notice for the session (on the loop)
Notify = Callable[[str, str, str, Callable[[], bool] | None], None]


@dataclass
class Options:
    """How a background process runs and what it tells its session by itself."""

    pty: bool = False
    notify_on_complete: bool = False
    watch_patterns: list[str] = field(default_factory=list)


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
    pty: bool = False
    notify_on_complete: bool = False
    watch: Watch | None = None
    consumed: bool = False  # the model has read its ending (no completion notice needed)
    proc: Process | None = field(default=None, repr=False)
    terminal: Terminal | None = field(default=None, repr=False)
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
        self.breaker = Breaker()
        #: carries notices to the sessions (set once the sessions exist)
        self.notify: Notify | None = None

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

    async def start(
        self,
        command: str,
        cwd: Path,
        workspace: Path,
        session_id: str,
        options: Options | None = None,
    ) -> Background:
        """Start ``command`` in the background for ``session_id``; raises `ProcessLimit`,
        `hermesd.sandbox.confine.SandboxUnavailable` or OSError."""
        options = options or Options()
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
        terminal = None
        try:
            if options.pty:
                proc, terminal = await spawn_on_terminal(launch)
            else:
                subprocess = asyncio.subprocess
                proc = await spawn(launch, stdin=subprocess.PIPE, stderr=subprocess.STDOUT)
        except BaseException:
            await asyncio.to_thread(launch.cleanup)
            raise
        item = Background(process_id, session_id, command, str(cwd), time.time(), proc.pid)
        item.proc, item.launch, item.terminal, item.pty = proc, launch, terminal, options.pty
        item.notify_on_complete = options.notify_on_complete
        if options.watch_patterns:
            item.watch = Watch(list(options.watch_patterns))
        self.items[item.id] = item
        reader = asyncio.get_running_loop().create_task(self._follow(item))
        self._readers.add(reader)
        reader.add_done_callback(self._readers.discard)
        self._prune(session_id)
        await self._save()
        return item

    async def _follow(self, item: Background) -> None:
        """Read the output until the end, then record the exit."""
        proc, stdout = item.proc, _stdout(item)
        assert proc is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        keep = self._limit("output_chars")
        try:
            while data := await stdout.read(65536):
                text = decoder.decode(data)
                item.output = (item.output + text)[-keep:]
                if item.watch is not None and not item.watch.disabled and not item.exited:
                    self._watch(item, text)
            await proc.wait()
        finally:
            item.output = (item.output + decoder.decode(b"", final=True))[-keep:]
            if not item.exited:
                item.exited, item.exit_code = True, proc.returncode
                item.completion_reason = "exited"
            if item.terminal is not None:
                item.terminal.close()
            if item.launch is not None:
                launch, item.launch = item.launch, None
                await asyncio.to_thread(launch.cleanup)
            item.done.set()
            self._completed(item)
            with contextlib.suppress(Exception):
                await self._save()

    # -- notices to the session ---------------------------------------------------------------

    def _watch(self, item: Background, text: str) -> None:
        """Tell the session about new output matching a watch pattern, within the limits."""
        watch = item.watch
        assert watch is not None
        found = watch.scan(text)
        if not found:
            return
        now = time.monotonic()
        match = watch.admit(found, now)
        if match is None:
            if watch.disabled:  # matched too often: one notice at the end instead
                item.notify_on_complete = True
                notice = process_notices.disabled_notice(item.id, item.command, watch.suppressed)
                self._tell(item, notice)
            return
        if not self.breaker.admit(now):
            watch.suppressed += match.suppressed + len(found)
            return
        self._tell(item, process_notices.match_notice(item.id, item.command, match))

    def _completed(self, item: Background) -> None:
        """Tell the session that a ``notify_on_complete`` process ended (not when the session
        or the daemon ended it); dropped if the model has read the ending by the time it
        would be delivered."""
        if not item.notify_on_complete or item.termination_source in QUIET_ENDINGS:
            return
        notice = process_notices.completion_notice(
            item.id,
            item.command,
            item.exit_code,
            item.completion_reason,
            item.termination_source,
            item.output,
        )
        self._tell(item, notice, lambda: not item.consumed)

    def _tell(self, item: Background, text: str, wanted: Callable[[], bool] | None = None) -> None:
        if self.notify is None or not item.session_id:
            return
        try:
            self.notify(item.session_id, text, f"process:{item.id}", wanted)
        except Exception:
            log.exception("the notice of background process %s was not delivered", item.id)

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
        _stdout(item).feed_eof()

    async def write(self, item: Background, data: str) -> int:
        """Write ``data`` to the process's stdin; the bytes written. Raises OSError (stdin
        closed) or TimeoutError (the process does not read its input)."""
        stdin = _stdin(item)
        if stdin is None or stdin.is_closing():
            raise BrokenPipeError("stdin is closed")
        raw = data.encode("utf-8")
        stdin.write(raw)
        await asyncio.wait_for(stdin.drain(), 5)
        return len(raw)

    async def close_stdin(self, item: Background) -> str:
        """End the process's input: close its stdin, or type end-of-file on its terminal;
        what was done."""
        stdin = _stdin(item)
        if stdin is None or stdin.is_closing():
            raise BrokenPipeError("stdin is not available")
        if item.terminal is None:
            stdin.close()
            return "stdin closed"
        stdin.write(EOF_CHARACTER)
        await asyncio.wait_for(stdin.drain(), 5)
        return "EOF sent"

    async def _save(self) -> None:
        async with self._saving:
            records = [p.record() for p in self.items.values()]
            await asyncio.to_thread(process_records.save, self.path, records)


def _stdout(item: Background) -> asyncio.StreamReader:
    """Where a process's output is read: its terminal or its stdout pipe."""
    if item.terminal is not None:
        return item.terminal.output
    assert item.proc is not None and item.proc.stdout is not None
    return item.proc.stdout


def _stdin(item: Background) -> asyncio.StreamWriter | None:
    """Where a process's input is written: its terminal or its stdin pipe (None: neither)."""
    if item.terminal is not None:
        return item.terminal.input
    return item.proc.stdin if item.proc is not None else None
