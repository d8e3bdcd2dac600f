"""The conversion process: `hermesd.tools.web_convert.convert` run outside the daemon.

trafilatura holds the interpreter lock for long stretches on a big page, so run in a thread of
the daemon it would still pause every other client's requests; run here, in a child process
started on first use, it cannot. The child gets none of the daemon's environment (no ``.env``
secrets next to a parser of hostile HTML), imports trafilatura and says it is ready; a
conversion that runs past its time is ended by killing the child (a thread could not be
stopped), and the next one starts a new child. The child runs in the tool sandbox
(`Sandbox.prepare_program`, as an MCP server does): it sees none of the daemon's places
(``$HERMES_HOME``, its socket, the credential stores), seccomp applies, and it may write only
an empty folder of its own and its private tmp. Under ``sandbox.mode: off`` it runs unconfined.

`ConvertWorker.convert` sends one page and waits for its answer, one page at a time; the child
(``python -m hermesd.tools.web_worker``) reads msgpack frames (a 4-byte length, then
``{body, content_type, charset}``) on stdin and answers ``{title, text}`` or ``{error}``. It
exits when its stdin closes, so it never outlives the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack

from hermesd.tools.web_convert import Unconvertible, convert
from hermesd.tools.web_fetch import Fetched

if TYPE_CHECKING:
    from hermesd.sandbox.confine import Launch, Sandbox

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0  # seconds the child may take to import trafilatura and say it is ready
_KEPT_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "TZ")
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ConvertWorker:
    """The daemon's side: one child, started on first use, one page at a time."""

    def __init__(self, sandbox: Sandbox | None = None) -> None:
        self.sandbox = sandbox  # None: unconfined (tests of the worker alone)
        self._proc: asyncio.subprocess.Process | None = None
        self._launch: Launch | None = None
        self._folder: Path | None = None  # the confined child's only writable folder
        self._lock = asyncio.Lock()

    async def convert(self, page: Fetched, timeout: float) -> tuple[str, str]:
        """``(title, text)`` of ``page``; `Unconvertible` when it is not text, or when the
        conversion fails or takes longer than ``timeout`` seconds."""
        frame = msgpack.packb(
            {"body": page.body, "content_type": page.content_type, "charset": page.charset}
        )
        async with self._lock:
            proc = await self._started()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(len(frame).to_bytes(4, "big") + frame)
                await proc.stdin.drain()
                async with asyncio.timeout(timeout):
                    size = int.from_bytes(await proc.stdout.readexactly(4), "big")
                    reply: dict[str, Any] = msgpack.unpackb(await proc.stdout.readexactly(size))
            except TimeoutError:
                await self._stop()
                raise Unconvertible(f"converting the page took longer than {timeout:g}s") from None
            except (OSError, asyncio.IncompleteReadError):
                log.exception("the web page converter process failed")
                await self._stop()
                raise Unconvertible("the page converter failed (see the daemon log)") from None
        if "error" in reply:
            raise Unconvertible(str(reply["error"]))
        return str(reply["title"]), str(reply["text"])

    async def _started(self) -> asyncio.subprocess.Process:
        if self._proc is None or self._proc.returncode is not None:
            await self._stop()  # a child that died: its launch is cleaned up first
            argv, env, cwd, fds = await self._command()
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=env,
                cwd=cwd,
                pass_fds=fds,
            )
            assert self._proc.stdout is not None
            try:  # ready once its imports are done: they do not count against a page's time
                async with asyncio.timeout(START_TIMEOUT):
                    await self._proc.stdout.readexactly(1)
            except (TimeoutError, asyncio.IncompleteReadError):
                log.error("the web page converter process did not start")
                await self._stop()
                raise Unconvertible("the page converter did not start (see the log)") from None
        return self._proc

    async def _command(self) -> tuple[list[str], dict[str, str], str | None, tuple[int, ...]]:
        """argv, environment, directory and descriptors of the child: in the sandbox unless
        there is none or it is off."""
        env = {k: os.environ[k] for k in _KEPT_ENV if k in os.environ}
        # the child imports this very checkout of hermesd, wherever it was found
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_CHECKOUT, env.get("PYTHONPATH")]))
        argv = [sys.executable, "-m", "hermesd.tools.web_worker"]
        sandbox = self.sandbox
        if sandbox is None or sandbox.mechanism == "off":
            return argv, env, None, ()
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="hermesd-convert-"))
        launch = await asyncio.to_thread(
            sandbox.prepare_program, argv, self._folder, self._folder, (), (_CHECKOUT,)
        )
        self._launch = launch
        return (
            launch.argv,
            {**launch.env, "PYTHONPATH": env["PYTHONPATH"]},
            str(launch.cwd),
            (launch.pass_fds),
        )

    async def _stop(self) -> None:
        proc, self._proc = self._proc, None
        launch, self._launch = self._launch, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        if launch is not None:
            await asyncio.to_thread(launch.cleanup)

    async def close(self) -> None:
        """End the child (it also ends by itself when the daemon exits)."""
        async with self._lock:
            await self._stop()
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None


def serve() -> None:
    """The child's loop: a frame in, an answer out, until stdin closes."""
    import trafilatura  # noqa: F401  (imported before saying ready: ~0.3 s)

    source, sink = sys.stdin.buffer, sys.stdout.buffer
    sink.write(b"R")
    sink.flush()
    while head := source.read(4):
        request = msgpack.unpackb(source.read(int.from_bytes(head, "big")))
        page = Fetched("", 200, request["content_type"], request["charset"], request["body"], False)
        try:
            title, text = convert(page)
            reply: dict[str, Any] = {"title": title, "text": text}
        except Unconvertible as exc:
            reply = {"error": str(exc)}
        except Exception as exc:  # the daemon logs the sentence; the child keeps serving
            reply = {"error": f"the page could not be converted: {type(exc).__name__}: {exc}"}
        frame = msgpack.packb(reply)
        sink.write(len(frame).to_bytes(4, "big") + frame)
        sink.flush()


if __name__ == "__main__":
    serve()
