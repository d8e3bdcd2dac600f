"""A background process on a pseudo-terminal (``terminal(background=true, pty=true)``).

The daemon opens the pair, hands the terminal side to the sandboxed call as its stdin, stdout
and stderr (the same `hermesd.sandbox.confine.Launch` as a piped call: the sandbox does not
change), keeps the controlling side, and reads and writes it through the event loop. The
call still starts a session of its own (as every tool call does), so the terminal is not its
controlling terminal: ``isatty`` and ``tty`` say yes, but a program that opens ``/dev/tty``
does not find one. Under bubblewrap the terminal shows as ``/dev/console`` (bubblewrap binds
it there in its own ``/dev``). The size is the reference's: 30 rows of 120 columns.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import struct
import termios
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asyncio.subprocess import Process

    from hermesd.sandbox.confine import Launch

ROWS, COLUMNS = 30, 120
EOF_CHARACTER = b"\x04"  # what Ctrl-D types: end of input for a program reading the terminal


class _Output(asyncio.StreamReaderProtocol):
    """The controlling side's reader: EIO (every terminal side closed) is the end of output,
    not an error, so what was read before it is kept."""

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, OSError) and exc.errno == errno.EIO:
            exc = None
        super().connection_lost(exc)


@dataclass
class Terminal:
    """The daemon's side of a process's pseudo-terminal."""

    output: asyncio.StreamReader
    input: asyncio.StreamWriter

    def close(self) -> None:
        """Close the daemon's side (the reader closes itself at the end of output)."""
        with contextlib.suppress(OSError, RuntimeError):
            self.input.close()


async def spawn_on_terminal(launch: Launch) -> tuple[Process, Terminal]:
    """Start a sandboxed call with a new pseudo-terminal as its stdio."""
    controller, terminal = os.openpty()
    try:
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        env = {"TERM": "xterm-256color", **launch.env}
        proc = await asyncio.create_subprocess_exec(
            *launch.argv,
            cwd=launch.cwd,
            env=env,
            pass_fds=launch.pass_fds,
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            start_new_session=True,
        )
    except BaseException:
        os.close(controller)
        raise
    finally:
        os.close(terminal)
    try:
        return proc, await _connect(controller)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        raise


async def _connect(controller: int) -> Terminal:
    loop = asyncio.get_running_loop()
    writing = os.dup(controller)
    reader = asyncio.StreamReader(limit=1 << 20)
    try:
        await loop.connect_read_pipe(lambda: _Output(reader), os.fdopen(controller, "rb", 0))
    except BaseException:
        os.close(writing)
        raise
    protocol: Any = asyncio.streams.FlowControlMixin
    transport, flow = await loop.connect_write_pipe(protocol, os.fdopen(writing, "wb", 0))
    return Terminal(reader, asyncio.StreamWriter(transport, flow, None, loop))
