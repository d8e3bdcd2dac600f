"""The model client process: model requests sent and read in a child process of the daemon.

`hermesd.model.client.ModelClient` keeps its retry policy and encodes each request body; an attempt
(``ModelClient.attempt``: the ``openai`` SDK, ``hermesd.model.http11``, ``hermesd.model.stream``) runs either
on the daemon's event loop or here, in a child process that runs the same code and sends back
the stream's events and the folded message. Building, sending and reading a request is about
half of the daemon's CPU per model round; in a process of its own it runs on another CPU
instead of taking turns with sessions, tools and clients for the daemon's one interpreter lock.
It also costs a hop each way (~0.3 ms per round) and ~50 MB, so ``model.process: auto`` (the
default) sends from the event loop while fewer than ``llm.OFFLOAD_AFTER`` attempts are in flight
there and hands the rest to this process, started the first time that happens (on a machine
where the daemon may use two CPUs or more) and stopped after ``model.process_idle_exit``
seconds without a request; ``separate`` always uses it, ``inline`` never.

The child's own code is `hermesd.model.modelchild`. The two processes talk over a socket pair
(private to them), in msgpack arrays:

- daemon → child: ``[CONFIGURE, settings, log level]``, ``[REQUEST, id, body]``,
  ``[CANCEL, id]``;
- child → daemon: ``[EVENT, id, event]``, ``[DONE, id, message, finish_reason, usage, model]``,
  ``[ERROR, id, kind, message, status, retryable, retry_after]``, ``[LOG, level, logger, text]``,
  ``[READY]`` (the SDK is imported: ``auto`` hands attempts over from then on).

The child exits when the socket closes (daemon stopped or killed). If it dies, the attempts in
flight fail as retryable ``ModelRequestFailed`` (the model client's retries then run them again)
and ``auto`` sends from the event loop until a new one is ready. The API key reaches it through
the socket, never its arguments or environment.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermesd.model.client import (
    Completion,
    ModelError,
    ModelNotConfigured,
    ModelRequestFailed,
    ModelResponseInvalid,
    ModelSettings,
    OnEvent,
)
from hermesd.rpc.wire import Decoder, Encoder, StreamError

log = logging.getLogger(__name__)

CONFIGURE, REQUEST, CANCEL = 0, 1, 2  # daemon → child
EVENT, DONE, ERROR, LOG, READY = 0, 1, 2, 3, 4  # child → daemon
MAX_REQUEST = 1 << 30  # a request body (the whole conversation) may be large
MAX_REPLY = 256 << 20
STOP_SECONDS = 5.0  # the child's time to exit after its socket closed, before SIGKILL
RESTART_PAUSE = 10.0  # after a child died, start_soon waits this long before another
# With requests in flight, a child silent for model.timeout (after which its own read timeout
# answers) plus this long is stuck (stopped, deadlocked): it is killed and replaced.
SILENCE_MARGIN = 5.0


class Link(asyncio.Protocol):
    """One end of the socket pair: frames out (written once per loop pass) and in."""

    def __init__(
        self, on_frame: Callable[[Any], None], on_lost: Callable[[str], None], max_message: int
    ) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._decoder = Decoder(max_message)
        self._pack = Encoder()._pack
        self._out: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, frame: list[Any]) -> None:
        """Queue a frame; the frames of one pass of the event loop go out in one write."""
        if self.transport is None or self.transport.is_closing():
            return
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(self._pack(frame))

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def data_received(self, data: bytes) -> None:
        try:
            for frame in self._decoder.feed(data):
                if type(frame) is not list or not frame or type(frame[0]) is not int:
                    raise StreamError(f"not a frame: {type(frame).__name__}")
                self._on_frame(frame)
        except StreamError as exc:
            self.close(f"undecodable frame from the other process: {exc}")
        except Exception as exc:  # a frame of the wrong shape: a bug on one side
            log.exception("bad frame from the other process")
            self.close(f"bad frame from the other process: {type(exc).__name__}: {exc}")

    def close(self, reason: str) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._flush()
            self.transport.close()
        self._on_lost(reason)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._on_lost(f"connection lost: {exc}" if exc else "its socket closed")


# --- the daemon's side ------------------------------------------------------------------------


class _Pending:
    __slots__ = ("future", "on_event")

    def __init__(self, future: asyncio.Future[Completion], on_event: OnEvent) -> None:
        self.future = future
        self.on_event = on_event


def _settings_frame(settings: ModelSettings) -> list[Any]:
    fields = dataclasses.asdict(settings)
    fields["process"] = "inline"
    return [CONFIGURE, fields, logging.getLogger("hermesd").getEffectiveLevel()]


def _error(
    kind: str, message: str, status: int | None, retryable: bool, retry_after: float | None
) -> ModelError:
    if kind == "failed":
        return ModelRequestFailed(status, message, retryable=retryable, retry_after=retry_after)
    if kind == "invalid":
        return ModelResponseInvalid(message)
    if kind == "config":
        return ModelNotConfigured(message)
    return ModelRequestFailed(None, f"the model client process failed: {message}")


# systemd's hand-over to the daemon itself (the child must not notify or take sockets)
_DAEMON_ONLY = (
    "NOTIFY_SOCKET",
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
    "WATCHDOG_PID",
    "WATCHDOG_USEC",
)


def _child_env() -> dict[str, str]:
    """The daemon's environment for the child, with the daemon's import path: a wrapper (a Nix
    one, say) may have set up ``sys.path`` in the daemon's start-up script, not in the env."""
    env = {k: v for k, v in os.environ.items() if k not in _DAEMON_ONLY}
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([package_root, *(p for p in sys.path if p and os.path.isdir(p))])
    )
    return env


class ModelProcess:
    """The daemon's handle on the model client process, started on first use."""

    def __init__(self, settings: ModelSettings) -> None:
        self._settings = settings
        self._link: Link | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._closing = False
        self._ready = False
        self._start_lock = asyncio.Lock()
        self._start_task: asyncio.Task[None] | None = None
        self._not_before = 0.0  # monotonic time before which start_soon does nothing
        self._heard = 0.0  # when the child last sent a frame (or was last sent a request)
        self._used = 0.0  # when a request last started or ended
        self._quiet = False  # the next loss of the link is expected (idle exit)
        self._watch: asyncio.TimerHandle | None = None
        self._reapers: set[asyncio.Task[None]] = set()

    @property
    def settings(self) -> ModelSettings:
        return self._settings

    @settings.setter
    def settings(self, new: ModelSettings) -> None:
        self._settings = new
        if self._link is not None:
            self._link.send(_settings_frame(new))

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._link is not None else None

    @property
    def ready(self) -> bool:
        """Whether the process runs and has imported the SDK (an attempt sent now does not
        wait for its start-up)."""
        return self._ready and self._link is not None

    def start_soon(self) -> None:
        """Start the process in the background (unless it runs, is starting, or died less
        than ``RESTART_PAUSE`` ago)."""
        if (
            self._link is not None
            or self._start_task is not None
            or self._closing
            or time.monotonic() < self._not_before
        ):
            return
        self._start_task = asyncio.get_running_loop().create_task(self.start())
        self._start_task.add_done_callback(self._started)

    def _started(self, task: asyncio.Task[None]) -> None:
        self._start_task = None
        if not task.cancelled() and task.exception() is not None:
            self._not_before = time.monotonic() + RESTART_PAUSE
            log.warning("could not start the model client process: %s", task.exception())

    async def start(self) -> None:
        """Start the process unless it runs."""
        async with self._start_lock:
            if self._link is None:
                await self._spawn()

    async def _spawn(self) -> None:
        if self._closing:
            raise ModelRequestFailed(None, "the daemon is stopping")
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = _child_env()
        try:
            with child:
                # fork and exec: ~1 ms on the loop, once per start
                proc = subprocess.Popen(  # noqa: ASYNC220
                    [sys.executable, "-m", "hermesd.model.modelchild", str(child.fileno())],
                    pass_fds=(child.fileno(),),
                    stdin=subprocess.DEVNULL,
                    env=env,
                )
        except OSError as exc:
            parent.close()
            raise ModelRequestFailed(
                None, f"could not start the model client process: {exc}", retryable=True
            ) from exc
        link = Link(self._on_frame, lambda reason: self._lost(link, reason), MAX_REPLY)
        await asyncio.get_running_loop().create_unix_connection(lambda: link, sock=parent)
        self._proc, self._link = proc, link
        self._used = time.monotonic()
        link.send(_settings_frame(self._settings))
        if self._watch is None:
            self._watch = asyncio.get_running_loop().call_later(1.0, self._check)
        log.debug("model client process %d started", proc.pid)

    async def attempt(self, body: bytes, on_event: OnEvent) -> Completion:
        """One attempt (``ModelClient.attempt``) in the process."""
        await self.start()
        link = self._link
        assert link is not None
        rid = next(self._ids)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Completion] = loop.create_future()
        if not self._pending:  # the silence is counted from here
            self._heard = time.monotonic()
        self._used = time.monotonic()
        self._pending[rid] = _Pending(future, on_event)
        link.send([REQUEST, rid, body])
        try:
            return await future
        finally:
            self._used = time.monotonic()
            if self._pending.pop(rid, None) is not None and self._link is link:
                link.send([CANCEL, rid])  # cancelled here: stop reading that stream

    def _check(self) -> None:
        """Every second while the child runs: with requests in flight, one silent for too long
        is stuck; with none, one idle past ``model.process_idle_exit`` (``auto`` only) exits."""
        self._watch = None
        if self._link is None:
            return
        now = time.monotonic()
        idle_exit = self._settings.process_idle_exit
        if not self._pending:
            if self._settings.process == "auto" and now - self._used > idle_exit:
                log.info(
                    "model client process %s idle for %.0fs; stopping it",
                    self.pid,
                    now - self._used,
                )
                self._quiet = True
                self._link.close(f"idle for {now - self._used:.0f}s")
                return
            self._watch = asyncio.get_running_loop().call_later(1.0, self._check)
            return
        silent = now - self._heard
        if silent > self._settings.timeout + SILENCE_MARGIN:
            log.warning(
                "model client process %s sent nothing for %.0fs with %d request(s) in "
                "flight; killing it",
                self.pid,
                silent,
                len(self._pending),
            )
            if self._proc is not None:
                self._proc.kill()
            self._link.close(f"it sent nothing for {silent:.0f}s")
            return
        self._watch = asyncio.get_running_loop().call_later(1.0, self._check)

    def _on_frame(self, frame: list[Any]) -> None:
        self._heard = time.monotonic()
        kind = frame[0]
        if kind == LOG:
            _, level, name, text = frame
            logging.getLogger(str(name)).log(int(level), "%s", text)
            return
        if kind == READY:
            self._ready = True
            return
        pending = self._pending.get(frame[1])
        if pending is None or pending.future.done():
            return  # cancelled meanwhile
        if kind == EVENT:
            try:
                pending.on_event(frame[2])
            except Exception as exc:
                pending.future.set_exception(exc)
        elif kind == DONE:
            _, _, message, finish_reason, usage, model = frame
            self._pending.pop(frame[1])
            pending.future.set_result(Completion(message, finish_reason, usage, model))
        elif kind == ERROR:
            self._pending.pop(frame[1])
            pending.future.set_exception(_error(*frame[2:]))
        else:
            raise StreamError(f"unknown frame kind {kind!r}")

    def _lost(self, link: Link, reason: str) -> None:
        if self._link is not link:
            return
        self._link, self._ready = None, False
        proc, self._proc = self._proc, None
        pending, self._pending = self._pending, {}
        quiet, self._quiet = self._quiet, False
        if not self._closing and not quiet:
            self._not_before = time.monotonic() + RESTART_PAUSE
            log.warning(
                "model client process stopped (%s); %d request(s) in flight failed",
                reason,
                len(pending),
            )
        for entry in pending.values():
            if not entry.future.done():
                entry.future.set_exception(
                    ModelRequestFailed(
                        None, f"the model client process stopped ({reason})", retryable=True
                    )
                )
        if proc is not None:
            task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._reap, proc))
            self._reapers.add(task)
            task.add_done_callback(self._reapers.discard)

    def _reap(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            status = proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            status = proc.wait()
        if status and not self._closing:
            log.warning("model client process %d exited with status %d", proc.pid, status)

    async def aclose(self, reason: str = "the daemon is stopping") -> None:
        """Stop the process (requests in flight fail, retryable) and wait for it to exit."""
        self._closing = True
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._link is not None:
            self._link.close(reason)
        if self._reapers:
            await asyncio.wait(set(self._reapers))
