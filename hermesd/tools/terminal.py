"""The built-in ``terminal`` tool: one shell command, its combined output and exit status.

The command runs with ``/bin/sh -c`` in its own process group, stopped (SIGTERM, then SIGKILL
to the group) at its timeout and when the calling task is cancelled; output is capped in the
middle. It runs inside the sandbox
(`hermesd.sandbox`): its default directory is the session's workspace, its environment an
allow-list, and when no sandbox mechanism works it is refused, never run unconfined.
``transform_terminal_output`` hooks may replace the output before the result is built.
With ``background`` it starts a process of the session instead (`hermesd.tools.processes`),
optionally on a pseudo-terminal (``pty``), telling the session when it ends
(``notify_on_complete``) or when its output matches (``watch_patterns``); in the foreground
those three are ignored, as in the reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.sandbox.confine import Launch, Sandbox, SandboxUnavailable
from hermesd.tools.arguments import (
    OUTPUT_CAP,
    BadArgs,
    TransformOutput,
    cap_middle,
    error,
    int_arg,
    str_arg,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from hermesd.tools.builtin_files import PathGuard
    from hermesd.tools.processes import Options, ProcessTable

TERMINAL_SCHEMA: dict[str, Any] = {
    "name": "terminal",
    "description": (
        "Run a shell command on the user's machine and return its combined stdout and stderr "
        "as 'output' plus its 'exit_code'. Use for listing, building, testing and inspecting "
        "things. Long output is cut in the middle; a command is killed at its timeout."
    ),
    "parameters": {
        "type": "object",
        "required": ["command"],
        "properties": {
            "command": {
                "type": "string",
                "minLength": 1,
                "maxLength": 20000,
                "description": "Shell command to run with /bin/sh, e.g. 'ls -la'",
            },
            "cwd": {
                "type": "string",
                "description": "Working directory (default: the session's workspace)",
            },
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "maximum": 600,
                "description": "Seconds before the command is killed (default 60)",
            },
            "background": {
                "type": "boolean",
                "description": "Start the command in the background and return at once with "
                "its process id (session_id); manage it with the process tool (poll, log, "
                "wait, write, kill). For servers and long jobs. Pair a job that ends (a "
                "build, a test run) with notify_on_complete=true; without it nothing tells you "
                "when it is done.",
            },
            "pty": {
                "type": "boolean",
                "description": "With background=true: run on a pseudo-terminal, for "
                "interactive programs that want one (a REPL, a CLI that prompts). Send input "
                "with process(action='submit').",
            },
            "notify_on_complete": {
                "type": "boolean",
                "description": "With background=true: when the process exits you get one "
                "message saying so, with its exit code and the end of its output. The right "
                "choice for any long job with an end. Do not combine with watch_patterns "
                "(they are then ignored).",
            },
            "watch_patterns": {
                "type": "array",
                "items": {"type": "string"},
                "description": "With background=true: strings to look for in each new line "
                "of output (plain text, not regular expressions); a match sends you a message "
                "while the process runs. At most one message per 15 s per process; after three "
                "windows in a row with dropped matches the watch stops and you get one message "
                "when it exits instead. Only for rare signals of long-lived processes (a "
                "server's 'ready' line), never for errors printed in a loop.",
            },
        },
    },
}
#: commands that need a pipe on stdin (they read to end-of-file): never given a terminal
_PIPE_ONLY = ("gh auth login",)
_SILENT_HINT = (
    "This process runs silently: nothing will tell you when it exits. For a job that ends, "
    "start it again with notify_on_complete=true, or use process(action='wait'/'poll')."
)


class Terminal:
    """The terminal tool's handler, bound to a path guard, a default directory and a timeout."""

    def __init__(
        self,
        guard: PathGuard,
        base: Path,
        *,
        timeout: float = 60.0,
        transform_output: TransformOutput | None = None,
        sandbox: Sandbox,
        workspace: Callable[[str | None], Path] | None = None,
    ) -> None:
        self.guard = guard
        self.base = base
        self.timeout = timeout
        self.transform_output = transform_output
        self.sandbox = sandbox
        self.workspace = workspace or (lambda _session: base)
        #: background mode's processes (`hermesd.tools.process_service` sets it)
        self.processes: ProcessTable | None = None

    async def run(
        self,
        args: dict[str, Any],
        task_id: str | None = None,
        session_id: str | None = None,
        **_: Any,
    ) -> str:
        """Run a shell command; ``{"output", "exit_code"}``."""
        try:
            command = str_arg(args, "command", required=True) or ""
            cwd_raw = str_arg(args, "cwd")
            timeout = int_arg(args, "timeout", int(self.timeout), 1, 600)
            background = _flag(args, "background")
            options = _options(args) if background else None
            workspace, cwd = await asyncio.to_thread(self._directories, session_id, cwd_raw)
        except BadArgs as exc:
            return error(str(exc))
        if not cwd.is_dir():
            return error(f"cwd is not a directory: {cwd}")
        named = self.guard.mentions_protected(command)
        if named:
            return error(f"Access denied: the command touches hermesd's own {named}")
        if options is not None:
            return await self._background(command, cwd, workspace, session_id or "", options)
        try:
            launch = await asyncio.to_thread(
                self.sandbox.prepare, command, cwd, workspace, session_id
            )
        except SandboxUnavailable as exc:
            return error(str(exc))
        except OSError as exc:  # its private tmp cannot be made (a full or read-only home)
            return error(f"the sandbox could not be prepared: {exc}; nothing was run")
        try:
            output, code, timed_out = await _run_shell(launch, timeout)
        finally:
            await asyncio.to_thread(launch.cleanup)
        if self.transform_output is not None:
            replaced = await self.transform_output(
                command=command, output=output, returncode=code, task_id=task_id, env_type="local"
            )
            if isinstance(replaced, str):
                output = replaced
        output = cap_middle(output)[0]
        result: dict[str, Any] = {"output": output, "exit_code": code}
        if timed_out:
            result["error"] = f"Command timed out after {timeout}s and was killed"
        return json.dumps(result)

    async def _background(
        self, command: str, cwd: Path, workspace: Path, sid: str, options: Options
    ) -> str:
        """Start ``command`` as a background process of the session; its id and pid."""
        from hermesd.tools.processes import ProcessLimit

        if self.processes is None:
            return error("background processes are not available in this daemon")
        notes: dict[str, Any] = {}
        if options.pty and " ".join(command.split()).startswith(_PIPE_ONLY):
            options.pty = False
            notes["pty_note"] = (
                "No terminal for this command: it reads its input to end-of-file, which a "
                "terminal does not give. Write to it, then process(action='close')."
            )
        if options.notify_on_complete and options.watch_patterns:
            options.watch_patterns = []
            notes["watch_patterns_ignored"] = (
                "watch_patterns are ignored with notify_on_complete=true: together they send "
                "the same news twice"
            )
        try:
            item = await self.processes.start(command, cwd, workspace, sid, options)
        except (ProcessLimit, SandboxUnavailable) as exc:
            return error(str(exc))
        except OSError as exc:
            return error(f"the background process could not be started: {exc}")
        started: dict[str, Any] = {"output": "Background process started", "session_id": item.id}
        started.update(pid=item.pid, exit_code=0, error=None, **notes)
        if options.notify_on_complete:
            started["notify_on_complete"] = True
        elif options.watch_patterns:
            started["watch_patterns"] = options.watch_patterns
        else:
            started["hint"] = _SILENT_HINT
        return json.dumps(started)

    def _directories(self, session_id: str | None, cwd_raw: str | None) -> tuple[Path, Path]:
        """The session's workspace and the command's directory (default: the workspace)."""
        workspace = self.workspace(session_id)
        cwd = self.guard.resolve(cwd_raw, base=workspace) if cwd_raw else workspace
        return workspace, cwd


SHELL = "/bin/sh"


def _flag(args: dict[str, Any], key: str) -> bool:
    value = args.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadArgs(f"'{key}' must be true or false")
    return value


def _options(args: dict[str, Any]) -> Options:
    """A background call's pty, notify_on_complete and watch_patterns, checked."""
    from hermesd.tools.process_notices import watch_patterns
    from hermesd.tools.processes import Options

    patterns = args.get("watch_patterns")
    try:
        watched = [] if patterns is None else watch_patterns(patterns)
    except ValueError as exc:
        raise BadArgs(str(exc)) from None
    return Options(_flag(args, "pty"), _flag(args, "notify_on_complete"), watched)


async def _run_shell(launch: Launch, timeout: float) -> tuple[str, int | None, bool]:
    """Run the launch; return (output, exit code, timed out). The process group is killed
    on timeout and when the calling task is cancelled."""
    proc = await spawn(launch, stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.STDOUT)
    chunks: list[bytes] = []
    size = 0
    stdout = proc.stdout
    assert stdout is not None

    async def read_all() -> None:
        nonlocal size
        while data := await stdout.read(65536):
            if size < OUTPUT_CAP * 4:  # keep enough for head + tail; drain the rest
                chunks.append(data)
            size += len(data)
        await proc.wait()

    timed_out = False
    try:
        await asyncio.wait_for(read_all(), timeout)
    except TimeoutError:
        timed_out = True
    finally:
        if proc.returncode is None:
            await terminate(proc, launch)
    output = b"".join(chunks).decode("utf-8", errors="replace")
    if size > OUTPUT_CAP * 4:
        output += f"\n… [{size - OUTPUT_CAP * 4} more bytes not kept]"
    return output, proc.returncode, timed_out


async def spawn(launch: Launch, *, stdin: int, stderr: int) -> asyncio.subprocess.Process:
    """Start a sandboxed call's process in a session of its own, its stdout a pipe."""
    return await asyncio.create_subprocess_exec(
        *launch.argv,
        cwd=launch.cwd,
        env=launch.env,
        pass_fds=launch.pass_fds,
        stdin=stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        start_new_session=True,
    )


async def terminate(proc: asyncio.subprocess.Process, launch: Launch) -> None:
    """Stop a sandboxed call's process and wait for it: SIGTERM first (the Landlock launcher
    then kills what left the process group: setsid, a double fork; bubblewrap's pid namespace
    ends with bwrap), SIGKILL to the group two seconds later, then whatever is left in the
    call's cgroup (bubblewrap's inner process can outlive a launcher killed while it was
    still setting the sandbox up: --die-with-parent is not yet armed then)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), 2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()
    await asyncio.to_thread(launch.kill_left)
