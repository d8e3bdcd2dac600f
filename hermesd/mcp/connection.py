"""`McpServer`: one configured MCP server, kept connected by a supervisor task.

The supervisor (one asyncio task per server, which owns the SDK's transport and session
contexts, as anyio requires) connects, initializes, lists the tools and hands them to the pool,
then waits until the connection ends, a restart is asked for, or the server is stopped. A
connection that ends or fails is retried with exponential backoff (0.5 s doubling to 30 s);
after `MAX_ATTEMPTS` failures in a row the server is reported ``failed`` (with the last error)
and probed again every `PROBE_INTERVAL` seconds, never dropped silently. Calls made while the
server is (re)connecting wait for it up to ``connect_timeout``. ``notifications/tools/
list_changed`` re-lists the tools, serialized by a lock.

A stdio server's command line and environment come from `spawn_parameters` alone, and
`sandboxed_parameters` wraps them in the tool sandbox (`Sandbox.prepare_program`; docs/mcp.md,
"Sandbox"). Its stderr goes to a bounded in-memory log (`StderrLog`), and it is started
through `exit_report` (`reporting_parameters`), so that when it ends the connection by
exiting, its error says how ("exited with status 3", "killed by signal SIGKILL").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import httpx2

from hermesd import __version__
from hermesd.mcp import exit_report
from hermesd.mcp.settings import McpSettingsError, ServerSettings
from hermesd.sandbox.confine import Launch, Sandbox

if TYPE_CHECKING:  # the SDK is imported when a server first connects (see _load_sdk)
    import mcp_types as types
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
MAX_ATTEMPTS = 5
PROBE_INTERVAL = 60.0
LOG_BYTES = 256 * 1024
SAFE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TERM", "SHELL", "TMPDIR")


def _load_sdk() -> None:
    """Import the MCP SDK (about half a second of CPU: kept out of the daemon's start-up, and
    run on a thread when the first server connects, so the event loop does not wait for it)."""
    import mcp_types  # noqa: F401


class McpUnavailable(Exception):
    """The server cannot take a call now; the message says why, for the model."""


def safe_environment(environ: Mapping[str, str], configured: Mapping[str, str]) -> dict[str, str]:
    """What a stdio server's process gets: the harmless basics, ``XDG_*``, and its own ``env``."""
    env = {k: v for k, v in environ.items() if k in SAFE_ENV or k.startswith("XDG_")}
    env.update(configured)
    return env


def spawn_parameters(
    settings: ServerSettings, environ: Mapping[str, str] | None = None
) -> StdioServerParameters:
    """The command line, environment and directory a stdio server is started with.

    The one place a stdio command line is produced: the tool sandbox wraps its result.
    ``settings`` must already be resolved (`ServerSettings.resolved`).
    """
    from mcp.client.stdio import StdioServerParameters

    assert settings.command is not None
    return StdioServerParameters(
        command=settings.command,
        args=list(settings.args),
        env=safe_environment(os.environ if environ is None else environ, dict(settings.env)),
        cwd=os.path.expanduser(settings.cwd) if settings.cwd else None,
    )


def sandboxed_parameters(
    settings: ServerSettings, sandbox: Sandbox, workspace: Path
) -> tuple[StdioServerParameters, Launch]:
    """`spawn_parameters` wrapped in the tool sandbox (`Sandbox.prepare_program`): the
    sandbox's environment allow-list plus the server's ``env``, writes confined to the
    workspace, a private tmp and ``sandbox.writable``, the default directory the workspace.
    Under ``sandbox.mode: off`` the server runs as unwrapped servers did (its environment and
    directory as `spawn_parameters` gives them), carrying only the marker. The caller runs
    `Launch.cleanup` once the process has ended. Raises `SandboxUnavailable`,
    `McpSettingsError` (a widening the sandbox refuses) and `FileNotFoundError`."""
    from mcp.client.stdio import StdioServerParameters

    plain = spawn_parameters(settings)
    cwd = Path(plain.cwd) if plain.cwd else None
    try:
        launch = sandbox.prepare_program(
            [plain.command, *plain.args],
            cwd,
            workspace,
            settings.writable,
            settings.readable,
            search_path=dict(settings.env).get("PATH"),  # a configured PATH finds the command
        )
    except ValueError as exc:
        raise McpSettingsError(f"mcp_servers.{settings.name}.sandbox: {exc}") from None
    off = sandbox.mechanism == "off"
    env = dict(plain.env or {}) if off else {**launch.env, **dict(settings.env)}
    directory = plain.cwd if off else str(launch.cwd)
    params = StdioServerParameters(
        command=launch.argv[0], args=launch.argv[1:], env=env, cwd=directory
    )
    return params, launch


def reporting_parameters(params: StdioServerParameters, status_file: str) -> StdioServerParameters:
    """``params`` started through the `exit_report` launcher, which writes how the program
    ended to ``status_file`` (outside the sandbox: the launcher wraps the sandbox's command)."""
    from mcp.client.stdio import StdioServerParameters

    launcher = [sys.executable, "-I", "-S", exit_report.__file__, status_file, "--"]
    return StdioServerParameters(
        command=launcher[0],
        args=[*launcher[1:], params.command, *params.args],
        env=params.env,
        cwd=params.cwd,
    )


class StderrLog:
    """The last `LOG_BYTES` of what a server wrote to stderr, read from a pipe on the loop."""

    def __init__(self, limit: int = LOG_BYTES) -> None:
        self.limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._read_fd, write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        self.writer: TextIO = os.fdopen(write_fd, "w")  # handed to every child as its stderr
        self._reading = False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read the pipe from ``loop`` from now on."""
        if not self._reading:
            loop.add_reader(self._read_fd, self._on_readable)
            self._reading = True

    def _on_readable(self) -> None:
        try:
            data = os.read(self._read_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.append(data)

    def append(self, data: bytes) -> None:
        """Keep ``data``, dropping the oldest bytes past the limit."""
        self._chunks.append(data)
        self._size += len(data)
        while self._size > self.limit and self._chunks:
            dropped = self._chunks.popleft()
            self._size -= len(dropped)
            if self._size < self.limit:  # keep the part of the chunk that still fits
                keep = self.limit - self._size
                self._chunks.appendleft(dropped[-keep:])
                self._size += keep

    def text(self, tail: int | None = None) -> str:
        """The kept log as text (the last ``tail`` bytes when given)."""
        data = b"".join(self._chunks)
        if tail is not None:
            data = data[-tail:]
        return data.decode("utf-8", "replace")

    def close(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Stop reading and close both ends."""
        if self._reading and loop is not None and not loop.is_closed():
            loop.remove_reader(self._read_fd)
        self._reading = False
        with contextlib.suppress(OSError):
            self.writer.close()
        with contextlib.suppress(OSError):
            os.close(self._read_fd)


class _WatchedStream:
    """The transport's read stream, with an event set when it ends (the server went away)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.ended = asyncio.Event()
        self.by_server = False  # the server's side ended it (it exited), not our close

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            self.by_server = True
            self.ended.set()
            raise
        except anyio.ClosedResourceError:
            self.ended.set()
            raise

    async def aclose(self) -> None:
        self.ended.set()
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


class McpServer:
    """One server: its supervisor, its session, its tools, its stderr log and its state."""

    def __init__(
        self,
        settings: ServerSettings,
        *,
        values: Callable[[], Awaitable[Mapping[str, str]]],
        on_tools: Callable[[McpServer], Awaitable[None]],
        log_bytes: int = LOG_BYTES,
        sandbox: Sandbox | None = None,
        workspace: Callable[[], Path] | None = None,
    ) -> None:
        """``sandbox`` and ``workspace`` (where a stdio server works): without them a stdio
        server runs unwrapped (`spawn_parameters`)."""
        self.settings = settings
        self._sandbox = sandbox
        self._workspace = workspace
        self.name = settings.name
        self._values = values
        self._on_tools = on_tools
        self.state = "stopped"  # stopped, connecting, ready, retrying, failed
        self.error: str | None = None
        self.exit: str | None = None  # how the last process ended, when it ended the connection
        self._exit_seen: str | None = None  # how the last process ended, either way
        self.tools: list[types.Tool] = []
        self.capabilities: types.ServerCapabilities | None = None
        self.server_info: str = ""
        self.connects = 0  # successful connections, the first included
        self.failures = 0  # failed attempts in a row
        self.stderr = StderrLog(log_bytes)
        self._session: ClientSession | None = None
        self._watched: _WatchedStream | None = None
        self._ready = asyncio.Event()
        self._attempted = asyncio.Event()  # the first attempt finished, either way
        self._next_attempt: list[asyncio.Future[None]] = []  # waiting for the next one
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._relist_lock = asyncio.Lock()
        self._background: set[asyncio.Task[Any]] = set()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the supervisor (idempotent)."""
        if self._task is None or self._task.done():
            self._stopping = False
            self.stderr.start(asyncio.get_running_loop())
            self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.name}")

    @property
    def started(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def attempted(self) -> bool:
        """Whether the first connection attempt has finished."""
        return self._attempted.is_set()

    async def wait_attempted(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until the first connection attempt has finished."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._attempted.wait(), timeout)

    async def wait_next_attempt(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until the next connection attempt has finished."""
        waiter = asyncio.get_running_loop().create_future()
        self._next_attempt.append(waiter)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiter), timeout)

    def _attempt_finished(self) -> None:
        self._attempted.set()
        waiters, self._next_attempt = self._next_attempt, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def restart(self) -> None:
        """Drop the connection and connect again at once (backoff and failures reset)."""
        self.failures = 0
        self.start()
        self._wake.set()

    async def stop(self) -> None:
        """Close the session and end the process or connection."""
        self._stopping = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for extra in list(self._background):
            extra.cancel()
        self.state = "stopped"
        self._session = None
        self._ready.clear()

    async def close(self) -> None:
        """`stop`, and release the stderr log (the server is being dropped)."""
        await self.stop()
        self.stderr.close(asyncio.get_running_loop())

    async def _supervise(self) -> None:
        await asyncio.to_thread(_load_sdk)
        while not self._stopping:
            self._wake.clear()
            self.state = "connecting" if self.failures < MAX_ATTEMPTS else self.state
            try:
                await self._connect_and_serve()
                if self.state == "ready" and not self._stopping:
                    self.error = (
                        f"server process {self.exit}" if self.exit else "the connection ended"
                    )
                    log.warning("MCP server '%s': %s; reconnecting", self.name, self.error)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                why = _describe(exc)
                self.error = f"server process {self.exit} ({why})" if self.exit else why
                self.failures += 1
                level = logging.WARNING if self.failures <= MAX_ATTEMPTS else logging.DEBUG
                log.log(level, "MCP server '%s' failed to connect: %s", self.name, self.error)
                log.debug("MCP server '%s' connection failure", self.name, exc_info=True)
                self._attempt_finished()
            finally:
                self._session, self._watched = None, None
                self._ready.clear()
                self._attempted.set()
            if self._is_stopping():
                break
            if self._wake.is_set():  # restart asked for: no delay
                continue
            if self.failures >= MAX_ATTEMPTS:
                if self.state != "failed":
                    log.error(
                        "MCP server '%s' failed %d times (%s); probing again every %gs",
                        self.name,
                        self.failures,
                        self.error,
                        PROBE_INTERVAL,
                    )
                self.state = "failed"
                delay = PROBE_INTERVAL
            else:
                self.state = "retrying"
                delay = min(BACKOFF_FIRST * 2 ** max(self.failures - 1, 0), BACKOFF_MAX)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def _connect_and_serve(self) -> None:
        import mcp_types as types
        from mcp.client.session import ClientSession

        settings = self.settings.resolved(await self._values())
        watched: _WatchedStream | None = None
        async with AsyncExitStack() as stack:
            # registered first, so it runs last: after the process has ended
            stack.callback(lambda: self._note_exit(watched))
            read, write = await stack.enter_async_context(self._transport(settings))
            watched = _WatchedStream(read)
            session = await stack.enter_async_context(
                ClientSession(
                    watched,
                    write,
                    message_handler=self._on_message,
                    client_info=types.Implementation(name="hermesd", version=__version__),
                )
            )
            with anyio.fail_after(settings.connect_timeout):
                init = await session.initialize()
                tools = await _all_tools(session)
            self.capabilities = init.capabilities
            info = init.server_info
            self.server_info = f"{info.name} {info.version}".strip() if info else ""
            self.tools = tools
            self._session, self._watched = session, watched
            await self._on_tools(self)
            self.state = "ready"
            self.error = None
            self.failures = 0
            self.connects += 1
            self._ready.set()
            self._attempt_finished()
            log.info("MCP server '%s' ready: %d tools", self.name, len(tools))
            ended = asyncio.create_task(watched.ended.wait())
            woken = asyncio.create_task(self._wake.wait())
            try:
                await asyncio.wait({ended, woken}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ended.cancel()
                woken.cancel()

    def _note_exit(self, watched: _WatchedStream | None) -> None:
        """Keep how the process ended when it, not hermesd, ended the connection."""
        by_server = watched is not None and watched.by_server
        self.exit = self._exit_seen if by_server else None

    def _transport(self, settings: ServerSettings) -> Any:
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client

        if settings.kind == "stdio":
            return self._stdio(settings)
        headers = dict(settings.headers)
        if settings.kind == "sse":
            return sse_client(
                str(settings.url),
                headers=headers,
                timeout=settings.connect_timeout,
                sse_read_timeout=max(settings.timeout, 3600.0),
            )
        client = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(settings.connect_timeout, read=max(settings.timeout, 300.0)),
        )
        return _closing_client(
            client, streamable_http_client(str(settings.url), http_client=client)
        )

    @contextlib.asynccontextmanager
    async def _stdio(self, settings: ServerSettings) -> AsyncIterator[Any]:
        """The stdio transport: the server inside the tool sandbox (when the pool has one),
        started through `exit_report`. Once the process has ended (the SDK's exit waits for
        it or kills it) its exit is read and its private tmp removed."""
        from mcp.client.stdio import stdio_client

        sandbox, workspace = self._sandbox, self._workspace

        def prepare() -> tuple[StdioServerParameters, Launch | None, str]:
            launch: Launch | None = None
            if sandbox is None or workspace is None:
                params = spawn_parameters(settings)
            else:
                params, launch = sandboxed_parameters(settings, sandbox, workspace())
            folder = tempfile.mkdtemp(prefix="hermesd-mcp-")
            return reporting_parameters(params, os.path.join(folder, "exit")), launch, folder

        params, launch, folder = await asyncio.to_thread(prepare)
        # bwrap passes a signal death on as status 128+N
        bwrap = sandbox is not None and workspace is not None and sandbox.mechanism == "bwrap"
        self._exit_seen = None
        try:
            async with stdio_client(params, errlog=self.stderr.writer) as streams:
                yield streams
        finally:
            self._exit_seen = exit_report.read_status(os.path.join(folder, "exit"), bwrap)
            shutil.rmtree(folder, ignore_errors=True)
            if launch is not None:
                launch.cleanup()

    # -- tools --------------------------------------------------------------------------

    async def _on_message(self, message: Any) -> None:
        import mcp_types as types

        if isinstance(message, types.ToolListChangedNotification):
            task = asyncio.create_task(self.relist())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        elif isinstance(message, Exception):
            log.debug("MCP server '%s' transport: %s", self.name, message)

    async def relist(self) -> None:
        """List the tools again and hand them to the pool (one re-list at a time)."""
        async with self._relist_lock:
            session = self._session
            if session is None:
                return
            try:
                self.tools = await asyncio.wait_for(
                    _all_tools(session), self.settings.connect_timeout
                )
            except Exception as exc:
                log.warning("MCP server '%s': re-listing tools failed: %s", self.name, exc)
                return
            log.info("MCP server '%s' changed its tools: %d now", self.name, len(self.tools))
            await self._on_tools(self)

    # -- calls --------------------------------------------------------------------------

    async def session(self, wait: float) -> ClientSession:
        """The live session, waiting up to ``wait`` seconds for a (re)connection."""
        live = self._live_session()
        if live is not None:
            return live
        self.start()
        if self.state == "failed":
            raise McpUnavailable(
                f"MCP server '{self.name}' is unavailable after {self.failures} failed "
                f"attempts ({self.error}); hermesd keeps probing it. Do not retry now."
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), wait)
        session = self._live_session()
        if session is None:
            raise McpUnavailable(
                f"MCP server '{self.name}' is not connected ({self.error or self.state})"
            )
        return session

    def _live_session(self) -> ClientSession | None:
        """The session, unless its connection has ended (the supervisor may not know yet)."""
        if self._watched is not None and self._watched.ended.is_set():
            self._ready.clear()
            return None
        return self._session

    def _is_stopping(self) -> bool:
        return self._stopping  # read anew: stop() sets it while the supervisor awaits

    async def call(self, op: Callable[[ClientSession], Awaitable[Any]], timeout: float) -> Any:
        """Run ``op`` on the session within ``timeout`` seconds (after waiting up to
        ``connect_timeout`` for a connection); raises `McpUnavailable`."""
        session = await self.session(self.settings.connect_timeout)
        try:
            return await asyncio.wait_for(op(session), timeout)
        except TimeoutError:
            raise McpUnavailable(
                f"MCP server '{self.name}' did not answer within {timeout:g}s"
            ) from None
        except McpSettingsError:
            raise
        except Exception as exc:
            if self._live_session() is not session:
                raise McpUnavailable(
                    f"MCP server '{self.name}' went away during the call ({_describe(exc)}); "
                    "it is being restarted"
                ) from None
            raise

    def describe(self) -> dict[str, Any]:
        """State for ``mcp.list`` and ``status``."""
        return {
            "name": self.name,
            "kind": self.settings.kind,
            "enabled": self.settings.enabled,
            "state": self.state,
            "error": self.error,
            "server": self.server_info,
            "tools": len(self.tools),
            "connects": self.connects,
            "failures": self.failures,
            "stderr_tail": self._stderr_tail() if self.error else "",
            "exit": self.exit if self.error else None,
        }

    def _stderr_tail(self, lines: int = 5) -> str:
        """The last lines the server wrote to stderr: why it did not start, most often."""
        kept = [x for x in self.stderr.text(tail=4000).splitlines() if x.strip()]
        return "\n".join(x[:300] for x in kept[-lines:])


async def _all_tools(session: ClientSession) -> list[types.Tool]:
    import mcp_types as types

    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a server that keeps handing out cursors is cut off
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


@contextlib.asynccontextmanager
async def _closing_client(client: httpx2.AsyncClient, transport: Any) -> Any:
    async with client, transport as streams:
        yield streams[0], streams[1]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
