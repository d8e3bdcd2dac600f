"""`HttpService`: the optional HTTP listener, started and stopped with the daemon.

``http.listen`` (``HOST:PORT``; unset: no listener, unless systemd hands over a socket named
``http``) and ``http.token_file`` (`hermesd.http.tokens`). uvicorn serves the Starlette app
(`hermesd.http.app`) on the daemon's own event loop from a socket this service binds (or the
activated one). A reload re-reads the token file; a changed address needs a restart. No token
file, or one without a usable token: the listener still answers ``/health`` and refuses the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.http import tokens
from hermesd.rpc.connection import Connection, Limits
from hermesd.rpc.service import RpcService

if TYPE_CHECKING:  # imported in start(): a daemon without the door never loads uvicorn
    import uvicorn

    from hermesd.http.app import HttpApp
    from hermesd.http.metrics import EventMetrics
    from hermesd.rpc.connection import Router

log = logging.getLogger(__name__)


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port); ValueError otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"http.listen must be HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class HttpService(RpcService):
    """The HTTP door's listener; binds no methods of its own."""

    def __init__(
        self,
        settings: Callable[[str], Any],
        limits: Limits,
        on_close: Callable[[Connection], None],
        activated: Callable[[], list[int]],
        home: Path,
        observed: tuple[list[Callable[[dict[str, Any]], None]], list[Callable[[str], None]]],
        auth_providers: Callable[[], dict[str, Any]],
        tool_known: Callable[[str], bool] = lambda name: False,
    ) -> None:
        self._settings = settings
        self._limits = limits
        self._on_close = on_close
        self._activated = activated
        self._home = home
        self._observed = observed  # (session events, cron runs): fed to /metrics while on
        self._metrics: EventMetrics | None = None
        self._auth_providers = auth_providers  # dashboard_auth plugins, by name
        self._tool_known = tool_known  # a registered tool's name (else /metrics says "other")
        self.app: HttpApp | None = None
        self.address: str | None = None
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    def bind(self, router: Router) -> None:
        """Keep the router the door calls into (the door declares no methods)."""
        self._router = router

    def _socket(self) -> socket.socket | None:
        fds = self._activated()
        if fds:
            sock = socket.socket(fileno=fds[0])
            sock.setblocking(False)
            return sock
        listen = self._settings("http.listen")
        if not listen:
            return None
        host, port = parse_listen(str(listen))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that name it, and
        # without it a response's head and body meet a client's delayed ACK (+40 ms a request)
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
        return sock

    def _load_tokens(self) -> None:
        assert self.app is not None
        path = self._settings("http.token_file")
        if not path:
            log.warning("http.token_file is not set: every HTTP request but /health is refused")
            self.app.tokens = []
            return
        full = Path(str(path)).expanduser()
        if not full.is_absolute():
            full = self._home / full
        try:
            self.app.tokens = tokens.load(full)
        except OSError as exc:
            log.error(
                "http.token_file %s cannot be read (%s): HTTP requests are refused", full, exc
            )
            self.app.tokens = []
            return
        log.info("HTTP door: %d token(s) from %s", len(self.app.tokens), full)

    async def start(self) -> None:
        """Bind (or adopt) the listener and serve it on this event loop."""
        sock = self._socket()
        if sock is None:
            return
        from hermesd.http.app import HttpApp, QuietServer
        from hermesd.http.auth_provider import ProviderAuth
        from hermesd.http.common import BodyBounds
        from hermesd.http.door import Door
        from hermesd.http.metrics import EventMetrics
        from hermesd.http.slow_heads import head_timed

        door = Door(self._router, self._limits, self._on_close)
        seconds = float(self._settings("http.body_timeout"))
        bounds = BodyBounds(int(self._settings("http.max_body")), seconds)
        uploads = BodyBounds(
            int(self._settings("http.max_upload_mb")) << 20, seconds, "http.max_upload_mb"
        )
        self._metrics = metrics = EventMetrics(self._tool_known)
        self._observed[0].append(metrics.event)
        self._observed[1].append(metrics.cron_run)
        self.app = HttpApp(
            door, bounds, metrics, web=bool(self._settings("http.web")), uploads=uploads
        )
        self._observed[0].append(self.app.feed.observe)
        self.app.provider_auth = ProviderAuth(lambda key: self._settings(key), self._auth_providers)
        self._load_tokens()
        import uvicorn

        config = uvicorn.Config(
            self.app.app,
            http=head_timed(float(self._settings("http.header_timeout"))),
            lifespan="off",
            log_config=None,
            access_log=False,
            timeout_keep_alive=30,
            timeout_graceful_shutdown=2,
            h11_max_incomplete_event_size=64 * 1024,
            limit_concurrency=int(self._settings("http.max_connections")),
        )
        self._server = QuietServer(config)
        name = sock.getsockname()
        self.address = f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        while not self._server.started and not self._task.done():  # noqa: ASYNC110 (uvicorn has no event)
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()  # a failure to serve stops the start-up, with its reason
        log.info("HTTP door listening on %s", self.address)
        if self._settings("http.web"):
            log.info("web page: %s (docs/web.md)", self.web_url())

    async def stop(self) -> None:
        """Stop serving: open event streams end, then the listener closes."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        if self.app is not None:
            for link in list(self.app.door.links):
                link.close()
            self.app.feed.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._task, 10)
        if self.app is not None and self.app.feed.observe in self._observed[0]:
            self._observed[0].remove(self.app.feed.observe)
        if self._metrics is not None:
            self._observed[0].remove(self._metrics.event)
            self._observed[1].remove(self._metrics.cron_run)
            self._metrics = None

    def web_url(self) -> str | None:
        """The address of the web page (docs/web.md), or None when it is off."""
        if self.address is None or not self._settings("http.web"):
            return None
        host, _, port = self.address.rpartition(":")
        host = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, host)
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return f"http://{host}:{port}/"

    def status(self) -> dict[str, Any]:
        """Where the door listens and how many links are open."""
        if self.app is None:
            return {"http": None}
        return {
            "http": {
                "listen": self.address,
                "tokens": len(self.app.tokens),
                "links": len(self.app.door.links),
                "event_streams": self.app.sessions.streams,
                "web": self.web_url(),
            }
        }

    def reload(self, cfg: Any) -> None:
        """Re-read the token file (the address stays until a restart)."""
        self._settings = cfg.get
        if self.app is not None:
            self._load_tokens()
