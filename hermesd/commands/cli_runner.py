"""Running a plugin's CLI command (``hermesctl <name> …``) inside the daemon.

`run_cli_command` builds the plugin's argparse tree (``prog="hermesctl <name>"``) with its
``setup_fn``, parses the client's argv and runs ``handler_fn(args)`` (or ``args.func(args)``) on a
worker thread, bounded in time, and returns what it printed and its exit status — the way a
local argparse program behaves: ``--help`` prints and exits 0, a usage error prints the usage
and exits 2, ``SystemExit(n)`` exits n, an exception prints one line and exits 1 (traceback in
the log). Nothing here may stop the daemon.

Capture is per call: `install_output_router` replaces ``sys.stdout``/``sys.stderr`` once, at
start-up, with `RoutingStream`s that write to the buffers of the call running in the current
context (a `ContextVar`; worker threads run each job in its own context copy) and to the real
stream otherwise. ``contextlib.redirect_stdout`` would swap the process-wide ``sys.stdout`` and
mix concurrent calls. Threads a handler starts itself do not inherit the context: their output
goes to the daemon's stderr/stdout (documented in docs/commands.md), redacted like log lines,
a whole line at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import inspect
import io
import logging
import sys
import threading
from dataclasses import dataclass
from typing import Any, TextIO

from hermesd import redact
from hermesd.commands.registry import CliCommand
from hermesd.model.fastjson import valid_text
from hermesd.runtime.workers import WorkerPool, WorkTimeout

log = logging.getLogger(__name__)

EXIT_TIMEOUT = 124  # as timeout(1)

_capture: contextvars.ContextVar[tuple[io.StringIO, io.StringIO] | None] = contextvars.ContextVar(
    "hermesd_cli_capture", default=None
)


_MAX_LINE = 64 * 1024  # uncaptured output held back waiting for the end of its line


class RoutingStream(io.TextIOBase):
    """A text stream that writes to the current call's buffer, else to the real stream."""

    def __init__(self, real: TextIO, which: int) -> None:
        super().__init__()
        self.real = real
        self._which = which
        self._line = ""  # uncaptured output not yet written: the rest of a line
        self._line_lock = threading.Lock()

    def _target(self) -> TextIO:
        buffers = _capture.get()
        return buffers[self._which] if buffers is not None else self.real

    def write(self, text: str) -> int:
        buffers = _capture.get()
        if buffers is not None:
            return buffers[self._which].write(text)
        # Plugin code printing outside a CLI call lands in the daemon's log stream: redacted
        # like log records, a line at a time, so a secret split across writes is caught too.
        with self._line_lock:
            pending = self._line + text
            end = pending.rfind("\n") + 1
            if len(pending) > _MAX_LINE:
                end = len(pending)
            self._line = pending[end:]
            if end:
                self.real.write(redact.redact(pending[:end]))
        return len(text)

    def flush(self) -> None:
        if _capture.get() is None:
            with self._line_lock:
                rest, self._line = self._line, ""
                if rest:
                    self.real.write(redact.redact(rest))
        self._target().flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return _capture.get() is None and self.real.isatty()

    def fileno(self) -> int:
        return self.real.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.real, "encoding", None) or "utf-8"


def install_output_router() -> None:
    """Route sys.stdout/sys.stderr through `RoutingStream` (idempotent)."""
    if not isinstance(sys.stdout, RoutingStream):
        sys.stdout = RoutingStream(sys.stdout, 0)
    if not isinstance(sys.stderr, RoutingStream):
        sys.stderr = RoutingStream(sys.stderr, 1)


@dataclass
class CliResult:
    """What ``cli.run`` returns."""

    stdout: str
    stderr: str
    exit_status: int

    def as_dict(self) -> dict[str, Any]:
        """Plain-dict form for the wire."""
        return {
            "stdout": valid_text(self.stdout),
            "stderr": valid_text(self.stderr),
            "exit_status": self.exit_status,
        }


def build_parser(command: CliCommand) -> argparse.ArgumentParser:
    """The plugin's argparse tree, as ``hermesctl <name>``."""
    parser = argparse.ArgumentParser(
        prog=f"hermesctl {command.name}", description=command.description or command.help or None
    )
    command.setup_fn(parser)
    return parser


def _exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message"): printed, status 1, as Python does
    return 1


def _run(command: CliCommand, argv: list[str]) -> int:
    """Parse and run on the current (worker) thread; output goes to the captured buffers."""
    try:
        parser = build_parser(command)
        args = parser.parse_args(argv)
        handler = command.handler_fn or getattr(args, "func", None)
        if handler is None:
            parser.print_help()
            return 0
        result = handler(args)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
    except SystemExit as exc:
        return _exit_status(exc)
    except Exception as exc:
        log.exception("CLI command '%s' (plugin '%s') raised", command.name, command.owner)
        print(f"hermesctl {command.name}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        sys.stdout.flush()
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


async def run_cli_command(
    pool: WorkerPool, command: CliCommand, argv: list[str], timeout: float
) -> CliResult:
    """Run one CLI command call with its own output capture; never raises for plugin faults."""
    out, err = io.StringIO(), io.StringIO()

    def job() -> int:
        _capture.set((out, err))  # this job's context copy only
        return _run(command, argv)

    try:
        status = await pool.run(job, timeout, f"cli:{command.owner}")
    except WorkTimeout:
        log.warning(
            "CLI command '%s' did not finish within %gs (its thread keeps running)",
            command.name,
            timeout,
        )
        return CliResult(
            out.getvalue(),
            err.getvalue() + f"hermesctl {command.name}: did not "
            f"finish within {timeout:g}s (commands.cli_timeout)\n",
            EXIT_TIMEOUT,
        )
    except Exception as exc:  # PluginAbort: a BaseException escaped _run
        log.error("CLI command '%s' aborted: %s", command.name, exc)
        return CliResult(out.getvalue(), err.getvalue() + f"hermesctl {command.name}: {exc}\n", 1)
    return CliResult(out.getvalue(), err.getvalue(), status)
