"""The ``execute_code`` tool (toolset ``code_execution``): a Python script the model wrote, run
inside the tool sandbox, that may call a named subset of tools.

The script runs as one sandboxed call (`hermesd.sandbox`: the same confinement, workspace and
environment as ``terminal``) of `hermesd.tools.code_runner`, with the session's workspace as its
directory. Its ``from hermes_tools import …`` functions are generated here from the schemas of
the tools it may call: `SANDBOX_TOOLS` (the reference's list) that are registered, available and
enabled. Each call travels over the pipe pair of `hermesd.tools.code_channel` and runs through
`ToolRegistry.call` like a model's own call, so hooks, file policy and approvals (asked of the
session's clients) apply. Bounds: ``code_execution.timeout`` of wall time, ``max_tool_calls``
calls, ``max_output_bytes`` of stdout kept (head and tail), `MAX_STDERR` of stderr. The result
has the reference's fields: status, output, exit_code, tool_calls_made, duration_seconds and the
stdout_* truncation counts, plus error when the script failed or timed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.runtime.session import turn_tools
from hermesd.sandbox.confine import Launch, SandboxUnavailable
from hermesd.tools import code_runner
from hermesd.tools.arguments import error
from hermesd.tools.code_channel import Refused, ToolChannel
from hermesd.tools.registry import BUILTIN
from hermesd.tools.terminal import spawn, terminate

if TYPE_CHECKING:
    from asyncio.subprocess import Process

    from hermesd.sandbox.confine import Sandbox
    from hermesd.tools.registry import ToolRegistry
    from hermesd.tools.terminal import Terminal

log = logging.getLogger(__name__)

TOOLSET = "code_execution"
RUNNER = str(Path(code_runner.__file__).resolve())
#: the tools a script may call (those of them the session has)
SANDBOX_TOOLS = (
    "web_search",
    "web_extract",
    "read_file",
    "write_file",
    "search_files",
    "patch",
    "terminal",
)
#: terminal arguments a script may not use: what it starts must end with the script
TERMINAL_REFUSED = ("background", "pty", "notify_on_complete", "watch_patterns")
DEFAULT_TIMEOUT = 300
DEFAULT_MAX_TOOL_CALLS = 50
DEFAULT_MAX_OUTPUT = 50_000  # bytes of stdout kept: 40% from the head, 60% from the tail
MAX_STDERR = 10_000  # bytes of stderr kept (its head: errors come first)
MAX_CODE = 200_000  # characters of one script
MAX_TIMEOUT = 3600  # the largest code_execution.timeout honoured

SCHEMA: dict[str, Any] = {
    "name": "execute_code",
    "description": (
        "Run a Python script that calls tools from code. Use it when a task needs three or "
        "more tool calls with logic between them, when a large tool output should be filtered "
        "before you read it, or for loops and branches over tool results. Use plain tool "
        "calls for a single call or when you need to read a whole result.\n\n"
        "Import the tools with `from hermes_tools import ...`: read_file, write_file, "
        "search_files, patch, terminal, web_search and web_extract, those this session has; "
        "each takes the tool's own arguments as keywords and returns its result parsed from "
        "JSON. Also there: json_parse(text) (lenient json.loads), shell_quote(s) "
        "(shlex.quote) and retry(fn, max_attempts=3, delay=2).\n\n"
        "The script runs in the session's workspace inside the same sandbox as terminal. "
        "terminal() runs in the foreground only. Limits: 5 minutes, 50 tool calls and 50 KB "
        "of stdout by default. Print the result you want to see to stdout."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": "The Python script: `from hermes_tools import terminal, ...`, "
                "then print what you want returned.",
            },
        },
        "required": ["code"],
    },
}

_HELPERS = '''
import json as _json, shlex as _shlex, time as _time

def _call(tool, args, extra):
    args = {k: v for k, v in args.items() if v is not None}
    args.update(extra)
    return _channel.call(tool, args)

def json_parse(text):
    """json.loads that accepts control characters inside strings."""
    return _json.loads(text, strict=False)

def shell_quote(s):
    """A string quoted for a shell command line."""
    return _shlex.quote(s)

def retry(fn, max_attempts=3, delay=2):
    """Call fn until it does not raise, at most max_attempts times, waiting longer each time."""
    for attempt in range(max_attempts):
        try:
            return fn()
        except Exception:
            if attempt == max_attempts - 1:
                raise
            _time.sleep(delay * 2 ** attempt)
'''


def module_source(schemas: list[dict[str, Any]]) -> str:
    """The ``hermes_tools`` module: a function per tool, its parameters the schema's
    (required ones first, the rest ``=None``; unknown keywords passed through)."""
    parts = [_HELPERS]
    for schema in schemas:
        name = schema["name"]
        params = schema.get("parameters", {})
        props = [p for p in params.get("properties", {}) if _plain(p)]
        required = [p for p in props if p in params.get("required", [])]
        optional = [p for p in props if p not in required]
        signature = ", ".join([*required, *(f"{p}=None" for p in optional), "**extra"])
        passed = ", ".join(f"{p!r}: {p}" for p in props)
        doc = str(schema.get("description", "")).split("\n", 1)[0][:300]
        parts.append(
            f"\ndef {name}({signature}):\n    {json.dumps(doc)}\n"
            f"    return _call({name!r}, {{{passed}}}, extra)\n"
        )
    return "".join(parts)


def _plain(name: str) -> bool:
    return name.isidentifier() and name not in ("extra", "_call") and not _keyword(name)


def _keyword(name: str) -> bool:
    import keyword

    return keyword.iskeyword(name)


class Capture:
    """A stream's bytes within a bound: its head, and with ``tail`` its last bytes too."""

    def __init__(self, limit: int, tail: bool) -> None:
        self.head_limit = int(limit * 0.4) if tail else limit
        self.tail_limit = limit - self.head_limit if tail else 0
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_limit:
            self.tail += data
            del self.tail[: max(0, len(self.tail) - self.tail_limit)]

    def text(self) -> str:
        """What was kept, with a marker where bytes were left out."""
        kept = len(self.head) + len(self.tail)
        head = bytes(self.head).decode("utf-8", errors="replace")
        if self.total <= kept:
            return head + bytes(self.tail).decode("utf-8", errors="replace")
        marker = (
            f"\n\n... [{self.total - kept:,} of {self.total:,} bytes of output left out] ...\n\n"
        )
        return head + marker + bytes(self.tail).decode("utf-8", errors="replace")

    def counts(self) -> dict[str, Any]:
        """The reference's stdout_* fields."""
        kept = len(self.head) + len(self.tail)
        out: dict[str, Any] = {
            "stdout_truncated": self.total > kept,
            "stdout_bytes_captured": kept,
            "stdout_bytes_total": self.total,
            "stdout_bytes_omitted": self.total - kept,
        }
        if self.total > kept:
            out["warning"] = (
                "stdout was cut: only its head and tail are here. The script did run; print "
                "less if the rest matters."
            )
        return out


async def _drain(stream: asyncio.StreamReader | None, capture: Capture) -> None:
    assert stream is not None
    while data := await stream.read(65536):
        capture.feed(data)


class ExecuteCode:
    """The tool's handler: settings read from the configuration at each call."""

    def __init__(
        self, registry: ToolRegistry, terminal: Terminal, sandbox: Sandbox, config: Any
    ) -> None:
        self.registry = registry
        self.terminal = terminal
        self.sandbox = sandbox
        self.config = config

    def settings(self) -> tuple[int, int, int]:
        """timeout seconds, tool calls, stdout bytes."""
        cfg = self.config
        timeout = min(MAX_TIMEOUT, max(1, int(cfg.get("code_execution.timeout"))))
        calls = max(0, int(cfg.get("code_execution.max_tool_calls")))
        output = max(1000, int(cfg.get("code_execution.max_output_bytes")))
        return timeout, calls, output

    def python(self) -> str:
        """The interpreter scripts run with (``code_execution.python``, else the daemon's)."""
        wanted = str(self.config.get("code_execution.python") or "")
        if not wanted:
            return sys.executable
        return shutil.which(wanted) or wanted

    def callable_tools(self) -> list[dict[str, Any]]:
        """The schemas of the `SANDBOX_TOOLS` this call may use: registered, available, not
        hidden by the config (``toolsets``/``disabled_toolsets``) and in the running turn's
        narrowed toolsets."""
        narrowed = turn_tools.get()  # a scheduled run's toolsets
        out = []
        for name in SANDBOX_TOOLS:
            if narrowed is not None and name not in narrowed:
                continue
            entry = self.registry.get(name)
            if entry is None or not self.registry.available(entry):
                continue
            if self.registry.config_hides(name):
                continue
            out.append(entry.schema)
        return out

    async def run(
        self, args: dict[str, Any], session_id: str = "", tool_call_id: str = "", **_: Any
    ) -> str:
        """Run one script; the reference's result object as JSON."""
        code = args.get("code")
        if not isinstance(code, str) or not code.strip():
            return error("'code' is required: the Python script to run")
        if len(code) > MAX_CODE:
            return error(f"the script is {len(code)} characters; the limit is {MAX_CODE}")
        timeout, max_calls, max_output = self.settings()
        schemas = self.callable_tools()
        started = time.monotonic()
        run = _Run(self, session_id, tool_call_id, [s["name"] for s in schemas], max_calls)
        try:
            result = await run.execute(code, module_source(schemas), timeout, max_output)
        except SandboxUnavailable as exc:
            return error(str(exc))
        except OSError as exc:
            log.warning("execute_code could not start: %s", exc, exc_info=True)
            return error(f"the script could not be started: {exc}")
        result["duration_seconds"] = round(time.monotonic() - started, 2)
        return json.dumps(result, ensure_ascii=False)

    async def dispatch(
        self, session_id: str, call_id: str, allowed: list[str], tool: str, args: dict[str, Any]
    ) -> str:
        """One call from the script, through the whole tool pipeline as this session's."""
        if tool not in allowed:
            shown = ", ".join(allowed) or "none"
            raise Refused(f"Tool '{tool}' is not available in execute_code. Available: {shown}")
        if tool == "terminal":
            args = {k: v for k, v in args.items() if k not in TERMINAL_REFUSED}
        return await self.registry.call(
            tool, args, session_id=session_id, tool_call_id=call_id, source="model"
        )


class _Run:
    """One script run: its process, channel and captures."""

    def __init__(
        self, tool: ExecuteCode, sid: str, call_id: str, allowed: list[str], max_calls: int
    ) -> None:
        self.tool, self.sid, self.call_id = tool, sid, call_id
        self.allowed, self.max_calls = allowed, max_calls
        self.channel: ToolChannel | None = None

    async def dispatch(self, tool: str, args: dict[str, Any]) -> str:
        assert self.channel is not None
        if self.channel.calls >= self.max_calls:
            raise Refused(
                f"Tool call limit reached ({self.max_calls}); no more tool calls in this script"
            )
        call_id = f"{self.call_id}#{self.channel.calls + 1}"
        return await self.tool.dispatch(self.sid, call_id, self.allowed, tool, args)

    async def execute(
        self, code: str, module: str, timeout: int, max_output: int
    ) -> dict[str, Any]:
        tool = self.tool
        workspace = await asyncio.to_thread(tool.terminal.workspace, self.sid or None)
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        child_ends = (requests_w, replies_r)
        command = " ".join(
            ["exec", shlex.quote(tool.python()), shlex.quote(RUNNER), *map(str, child_ends)]
        )
        try:
            launch = await asyncio.to_thread(
                tool.sandbox.prepare, command, workspace, workspace, self.sid or None
            )
        except BaseException:
            for fd in (requests_r, requests_w, replies_r, replies_w):
                os.close(fd)
            raise
        launch.pass_fds = (*launch.pass_fds, *child_ends)
        try:
            pipe = asyncio.subprocess.PIPE
            proc = await spawn(launch, stdin=asyncio.subprocess.DEVNULL, stderr=pipe)
        except BaseException:
            for fd in (requests_r, replies_w):
                os.close(fd)
            await asyncio.to_thread(launch.cleanup)
            raise
        finally:
            for fd in child_ends:
                os.close(fd)
        try:
            ends = (requests_r, replies_w)
            return await self._supervise(proc, launch, code, module, timeout, max_output, ends)
        finally:
            await asyncio.to_thread(launch.cleanup)

    async def _supervise(
        self,
        proc: Process,
        launch: Launch,
        code: str,
        module: str,
        timeout: int,
        max_output: int,
        ends: tuple[int, int],
    ) -> dict[str, Any]:
        self.channel = channel = ToolChannel(*ends)
        stdout, stderr = Capture(max_output, tail=True), Capture(MAX_STDERR, tail=False)
        serving = asyncio.ensure_future(
            channel.serve(self.dispatch, first={"module": module, "code": code})
        )
        ran = asyncio.gather(_drain(proc.stdout, stdout), _drain(proc.stderr, stderr), proc.wait())
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(ran), timeout)
        except TimeoutError:
            timed_out = True
        finally:
            if proc.returncode is None:
                await terminate(proc, launch)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(ran, 5)
            if not serving.done():  # a tool call still running when the script ended
                serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
            channel.close_unopened()
        return _result(proc.returncode, stdout, stderr, channel, timed_out, timeout)


def _result(
    code: int | None,
    stdout: Capture,
    stderr: Capture,
    channel: ToolChannel,
    timed_out: bool,
    timeout: int,
) -> dict[str, Any]:
    """The reference's result fields for a finished run."""
    output, errors = stdout.text(), stderr.text()
    exit_code = code if code is not None else -1
    result: dict[str, Any] = {"status": "success", "output": output, "exit_code": exit_code}
    result["tool_calls_made"] = channel.calls
    result.update(stdout.counts())
    if channel.broken:
        result["tool_channel_error"] = channel.broken
    if timed_out:
        message = f"Script timed out after {timeout}s and was killed."
        result.update(status="timeout", error=message)
        result["output"] = f"{output}\n\n[{message}]" if output else f"[{message}]"
    elif exit_code != 0:
        result["status"] = "error"
        result["error"] = errors or f"Script exited with code {exit_code}"
        if errors:
            result["output"] = f"{output}\n--- stderr ---\n{errors}"
    return result


def register_execute_code(
    registry: ToolRegistry, terminal: Terminal, sandbox: Sandbox, config: Any
) -> ExecuteCode:
    """Register ``execute_code``; its scripts run in ``sandbox`` in ``terminal``'s workspace."""
    tool = ExecuteCode(registry, terminal, sandbox, config)
    registry.register(
        "execute_code",
        TOOLSET,
        SCHEMA,
        tool.run,
        is_async=True,
        emoji="🐍",
        owner=BUILTIN,
        check_arguments=False,
        timeout=MAX_TIMEOUT + 60,  # the run bounds itself by code_execution.timeout
    )
    return tool
