"""The hermesd process: command line, configuration, the services it runs, signals, systemd.

Owns start-up order (config → logging → services → socket → READY=1), the core methods
(``hello``, ``ping``, ``status``, ``shutdown``, ``config.reload``) and the graceful stop. It holds
no protocol or service logic of its own: those live in the layers it wires together.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from hermesd import PLUGIN_API, __version__, redact
from hermesd.cron.clock import zone
from hermesd.daemon import config, logs, sdnotify
from hermesd.rpc import paths
from hermesd.rpc.budgets import BudgetLimits, Budgets
from hermesd.rpc.connection import Call, Limits, Router
from hermesd.rpc.protocol import PROTOCOL_MAJOR, PROTOCOL_VERSION, Codes, RpcError
from hermesd.rpc.server import EX_UNAVAILABLE, Gatekeeper, SocketInUse, SocketServer, resolve_group
from hermesd.runtime.rss import GROWTH, rss_bytes
from hermesd.sandbox.process import harden_daemon
from hermesd.store.dbfile import StorageCorrupt, StorageUnavailable

log = logging.getLogger(__name__)

EX_NOPERM = 77
EX_CANTCREAT = 73  # the state directory cannot be written (full, read-only, failing)
EX_DATAERR = 65  # state.db is damaged: a restart cannot help (RestartPreventExitStatus)
CAPABILITIES = ["notifications", "server-requests", "out-of-order-responses"]


class Service(Protocol):
    """What the daemon expects of a service it wires in."""

    def bind(self, router: Router) -> None: ...
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def status(self) -> dict[str, Any]: ...
    def reload(self, cfg: config.Config) -> None: ...


class Daemon:
    """One running hermesd."""

    def __init__(
        self, home: Path, cfg: config.Config, socket_path: Path, log_level: str | None = None
    ) -> None:
        self.home = home
        self.log_level = log_level  # --log-level wins over config, across reloads too
        self.config = cfg
        self.socket_path = socket_path
        self.started = time.monotonic()
        self.router = Router()
        self.services: list[Service] = []
        self._stop = asyncio.Event()
        self._watchdog: asyncio.Task[None] | None = None
        group = cfg.get("socket.group")
        self.gid = resolve_group(group)
        limits = Limits(
            max_message=cfg.get("limits.max_message"),
            max_output=cfg.get("limits.max_output"),
            max_inflight=cfg.get("limits.max_inflight"),
            frame_timeout=float(cfg.get("limits.frame_timeout")),
            idle_timeout=float(cfg.get("limits.idle_timeout")),
        )
        budgets = BudgetLimits(
            **{
                f"{kind}_{scope}": int(cfg.get(f"limits.{kind}_{scope}"))
                for kind in ("input", "inflight", "output")
                for scope in ("per_uid", "total")
            }
        )
        self.server = SocketServer(
            self.router,
            limits,
            Gatekeeper(self.gid),
            cfg.get("limits.max_connections"),
            on_close=self._connection_closed,
            max_per_uid=cfg.get("limits.max_connections_per_uid"),
            owner_reserved=cfg.get("limits.owner_reserved_connections"),
            budgets=Budgets(budgets),
        )
        self._bind_core()

    # --- core methods ------------------------------------------------------------------------

    def _bind_core(self) -> None:
        self.router.bind("hello", self.hello)
        self.router.bind("ping", self.ping)
        self.router.bind("status", self.status)
        self.router.bind("shutdown", self.shutdown)
        self.router.bind("config.reload", self.config_reload)

    def hello(self, call: Call, params: dict[str, Any]) -> dict[str, Any]:
        """Check the client's protocol version and describe the daemon."""
        wanted = params.get("protocol") or PROTOCOL_VERSION
        try:
            major = int(str(wanted).split(".")[0])
        except ValueError:
            raise RpcError(
                Codes.INVALID_PARAMS, f"hello: protocol '{wanted}' is not a version"
            ) from None
        if major != PROTOCOL_MAJOR:
            raise RpcError(
                Codes.INCOMPATIBLE_VERSION,
                f"hermesd speaks protocol {PROTOCOL_VERSION}; this client wants {wanted}. "
                "Upgrade the older of the two.",
                {"server": PROTOCOL_VERSION, "client": wanted},
            )
        call.conn.client_protocol = str(wanted)
        call.conn.client_name = str(params.get("client") or "")
        return {
            "protocol": PROTOCOL_VERSION,
            "daemon_version": __version__,
            "pid": os.getpid(),
            "capabilities": CAPABILITIES,
            "methods": self.router.names(),
            "peer_uid": call.conn.peer.uid,
            "owner": call.conn.is_owner,
        }

    def ping(self, call: Call, params: dict[str, Any]) -> Any:
        """Echo, at once or after ``delay_ms`` (a coroutine then, so others are not held up)."""
        reply = {"pong": True, "data": params.get("data")}
        delay = params.get("delay_ms") or 0
        if not 0 <= delay <= 60_000:
            raise RpcError(Codes.INVALID_PARAMS, "ping: delay_ms must be between 0 and 60000")
        if not delay:
            return reply

        async def later() -> dict[str, Any]:
            await asyncio.sleep(delay / 1000)
            return reply

        return later()

    def status(self, call: Call, params: dict[str, Any]) -> dict[str, Any]:
        """Daemon facts, plus what each service reports."""
        out: dict[str, Any] = {
            "version": __version__,
            "plugin_api": PLUGIN_API,
            "protocol": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "uid": os.geteuid(),
            "uptime_s": round(time.monotonic() - self.started, 3),
            "home": str(self.home),
            "socket": str(self.server.path or self.socket_path),
            "socket_activated": self.server.activated,
            "connections": len(self.server.connections),
            "sessions": 0,
            "plugins": 0,
            "config_warnings": list(self.config.warnings),
            "redacted_secrets": redact.secret_count(),
            "rss_bytes": rss_bytes(),  # resident memory, against the unit's MemoryHigh=
            "plugin_memory_growth": GROWTH.largest(),
            **self.server.status(),
        }
        for service in self.services:
            out.update(service.status())
        return out

    def shutdown(self, call: Call, params: dict[str, Any]) -> dict[str, Any]:
        """Begin a graceful stop after this reply is sent."""
        log.info("shutdown requested by uid %d", call.conn.peer.uid)
        asyncio.get_running_loop().call_soon(self.request_stop)
        return {"stopping": True}

    def config_reload(self, call: Call, params: dict[str, Any]) -> dict[str, Any]:
        """Re-read config.yaml and .env."""
        try:
            warnings = self.reload()
        except config.ConfigError as exc:
            raise RpcError(Codes.INVALID_PARAMS, f"config not reloaded: {exc}") from None
        return {"reloaded": True, "warnings": warnings}

    def _connection_closed(self, conn: Any) -> None:
        for service in self.services:
            hook = getattr(service, "connection_closed", None)
            if hook is not None:
                hook(conn)

    # --- lifecycle ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the main loop to stop (signal handlers and ``shutdown`` call this)."""
        self._stop.set()

    def reload(self) -> list[str]:
        """Reload configuration; on error the running configuration stays."""
        sdnotify.reloading()
        try:
            dotenv = config.load_dotenv_file(self.home)
            config.apply_dotenv(dotenv)
            cfg = config.load(self.home)
        except config.ConfigError:
            sdnotify.ready(self._status_line())
            raise
        redact.configure(os.environ, dotenv)  # .env's values may have changed
        self.config = cfg
        logs.set_level(self.log_level or cfg.get("log_level"))
        for warning in cfg.warnings:
            log.warning("config: %s", warning)
        GROWTH.threshold = int(cfg.get("limits.plugin_memory_warn"))
        for service in self.services:
            service.reload(cfg)
        log.info("configuration reloaded")
        sdnotify.ready(self._status_line())
        return list(cfg.warnings)

    def _on_sighup(self) -> None:
        for service in self.services:  # the reload service reloads plugins too, and records it
            handler = getattr(service, "on_sighup", None)
            if handler is not None:
                handler()
                return
        try:
            self.reload()
        except config.ConfigError as exc:
            log.error("config not reloaded, keeping the running one: %s", exc)

    def _status_line(self) -> str:
        return f"Listening on {self.server.path or self.socket_path}"

    async def run(self) -> int:
        """Serve until stopped; returns the exit status."""
        for service in self.services:
            service.bind(self.router)
        missing = self.router.missing()
        if missing:
            raise RuntimeError(f"declared methods without handlers: {', '.join(missing)}")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        sdnotify.status("Starting")
        for service in self.services:
            await service.start()
        mode = (
            config.parse_mode(self.config.get("socket.mode"))
            if self.config.get("socket.mode") is not None
            else (0o660 if self.gid is not None else 0o600)
        )
        assert mode is not None
        try:
            await self.server.start(self.socket_path, mode, sdnotify.listen_fds())
        except SocketInUse as exc:
            log.error("%s", exc)
            await self._stop_services()
            return EX_UNAVAILABLE
        interval = sdnotify.watchdog_interval()
        if interval:
            self._watchdog = loop.create_task(sdnotify.watchdog_loop(interval))
        log.info("hermesd %s ready on %s (pid %d)", __version__, self.server.path, os.getpid())
        sdnotify.ready(self._status_line())
        await self._stop.wait()
        await self._graceful_stop()
        return 0

    async def _graceful_stop(self) -> None:
        timeout = float(self.config.get("shutdown_timeout"))
        sdnotify.stopping()
        log.info("stopping: finishing in-flight requests (up to %.0f s)", timeout)
        self.server.stop_accepting()
        await self.server.drain(timeout)
        await self._stop_services()
        if self._watchdog is not None:
            self._watchdog.cancel()
        log.info("stopped")

    async def _stop_services(self) -> None:
        for service in reversed(self.services):
            try:
                await service.stop()
            except Exception:
                log.exception("stopping %s failed", type(service).__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermesd",
        description="Hermes-compatible agent daemon (msgpack-RPC over a Unix socket).",
        epilog="Exit status: 0 stopped cleanly, 1 unexpected error, 2 usage, 69 socket in use "
        "by another daemon, 73 state directory not writable (read-only or full), 77 refused to "
        "run as root, 78 configuration error.",
    )
    parser.add_argument("--home", help="state directory (default $HERMES_HOME or ~/.hermes)")
    parser.add_argument(
        "--socket",
        help="socket path (default: config, then "
        "$XDG_RUNTIME_DIR/hermes/hermesd.sock, then $HERMES_HOME/hermesd.sock)",
    )
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR (overrides config)")
    parser.add_argument(
        "--check-config", action="store_true", help="validate config.yaml and .env, then exit"
    )
    parser.add_argument(
        "--allow-root",
        action="store_true",
        help="run even as root (not recommended; use a dedicated user)",
    )
    parser.add_argument(
        "--version", action="version", version=f"hermesd {__version__} (plugin API: {PLUGIN_API})"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hermesd`` command."""
    args = build_parser().parse_args(argv)
    home = paths.hermes_home(args.home)
    if os.geteuid() == 0 and not args.allow_root and not args.check_config:
        print(
            "hermesd: refusing to run as root; run it as a dedicated user "
            "(the systemd unit does) or pass --allow-root",
            file=sys.stderr,
        )
        return EX_NOPERM
    if not args.check_config:
        unusable = config.home_problem(home)
        if unusable:
            print(f"hermesd: {unusable}", file=sys.stderr)
            return EX_CANTCREAT
    try:
        dotenv = config.load_dotenv_file(home)
        cfg = config.load(home, {**dotenv, **os.environ})  # the plugins' environment
        if args.log_level and args.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise config.ConfigError("--log-level must be DEBUG, INFO, WARNING or ERROR")
        resolve_group(cfg.get("socket.group"))  # an unknown group is a config error
        env_url = os.environ.get("OPENAI_BASE_URL") or dotenv.get("OPENAI_BASE_URL")
        url_problem = config.url_problem(env_url) if env_url else None
        if url_problem and not cfg.get("model.base_url"):
            raise config.ConfigError(f"OPENAI_BASE_URL {url_problem}")
        zone(cfg.get("cron.timezone"))  # so is an unknown timezone
    except config.ConfigError as exc:
        for problem in exc.problems:  # every one, not only the first
            print(f"hermesd: configuration error: {problem}", file=sys.stderr)
        for warning in exc.warnings:  # a mistyped key often explains the problem
            print(f"hermesd: warning: {warning}", file=sys.stderr)
        return config.EX_CONFIG
    except ValueError as exc:
        print(f"hermesd: configuration error: {exc}", file=sys.stderr)
        return config.EX_CONFIG
    if args.check_config:
        for warning in cfg.warnings:
            print(f"hermesd: warning: {warning}", file=sys.stderr)
        where = cfg.path or (home / "config.yaml (absent: defaults)")
        print(f"hermesd: configuration OK ({where})")
        return 0
    harden_daemon()  # umask 077, not dumpable: a tool cannot read the daemon's memory
    config.apply_dotenv(dotenv)
    redact.configure(os.environ, dotenv)
    logs.setup(args.log_level or cfg.get("log_level"))
    for warning in cfg.warnings:
        log.warning("config: %s", warning)
    socket_path = paths.daemon_socket(home, args.socket, cfg.get("socket.path"))
    raise_fd_limit()
    try:
        return asyncio.run(_run(home, cfg, socket_path, args.log_level))
    except KeyboardInterrupt:
        return 0
    except StorageCorrupt as exc:
        log.error("%s", exc)
        print(f"hermesd: {exc}", file=sys.stderr)
        return EX_DATAERR
    except StorageUnavailable as exc:
        log.error("cannot use the state directory %s: %s", home, exc)
        print(f"hermesd: cannot use the state directory {home}: {exc}", file=sys.stderr)
        return EX_CANTCREAT


def raise_fd_limit() -> None:
    """Raise the soft open-files limit to the hard one: each client is a descriptor."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard or soft == resource.RLIM_INFINITY:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("open-files limit stays at %d (raising it to %d failed: %s)", soft, hard, exc)
        return
    log.info("open-files limit raised from %d to %d", soft, hard)


async def _run(
    home: Path, cfg: config.Config, socket_path: Path, log_level: str | None = None
) -> int:
    daemon = Daemon(home, cfg, socket_path, log_level)
    from hermesd.daemon.services import build_services

    build_services(daemon)
    return await daemon.run()


if __name__ == "__main__":
    sys.exit(main())
