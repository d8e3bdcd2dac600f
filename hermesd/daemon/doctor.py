"""``doctor``: what a person checks when hermesd does not work, checked by the daemon itself.

Each check is one row ``{name, status, detail}`` with status ``ok``, ``warn`` or ``fail``: the
configuration file as it is now, the model endpoint (reachable, its ``/models`` listed, the
configured model among them), plugins that are missing variables or failed, the sandbox
mechanisms the kernel and the machine offer (bubblewrap runnable, the Landlock ABI — only
whether they are available), what systemd gave the process (notify socket, watchdog, socket
activation, journal), the socket, and versions. Nothing here changes state.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import platform
import shutil
import stat
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any

from hermesd import __version__
from hermesd.daemon import config, logs, sdnotify
from hermesd.model.client import ModelNotConfigured, ModelSettings
from hermesd.rpc.connection import Call, Router
from hermesd.rpc.protocol import PROTOCOL_VERSION
from hermesd.rpc.service import RpcService
from hermesd.runtime.rss import GROWTH, rss_bytes
from hermesd.sandbox.policy import network_mode
from hermesd.store.dbfile import recovery_hint
from hermesd.store.text_check import sessions_with_bad_text

if TYPE_CHECKING:
    from hermesd.daemon.config import SettingsFiles
    from hermesd.daemon.main import Daemon
    from hermesd.mcp.pool import McpPool
    from hermesd.plugins.host import PluginHost
    from hermesd.store.facade import SessionStore

Row = dict[str, str]
MODEL_TIMEOUT = 5.0  # seconds for the endpoint's /models
LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture (a newer syscall)
LANDLOCK_CREATE_RULESET_VERSION = 1


def row(name: str, status: str, detail: str) -> Row:
    return {"name": name, "status": status, "detail": detail}


def check_config(files: SettingsFiles) -> Row:
    try:
        cfg = files.load()
    except config.ConfigError as exc:
        return row("config", "fail", "; ".join(exc.problems))
    where = str(cfg.path or f"{files.config_path} (absent: defaults)")
    if cfg.warnings:
        return row("config", "warn", f"{where}: {'; '.join(cfg.warnings)}")
    return row("config", "ok", where)


async def check_model(cfg: config.Config) -> list[Row]:
    """The endpoint reachable, its models listed, the configured model among them."""
    settings = ModelSettings.from_config(cfg)
    try:
        settings.check()
    except ModelNotConfigured as exc:
        if not settings.base_url or "absolute" in str(exc):
            return [row("model endpoint", "fail", str(exc))]
    import openai

    sdk = openai.AsyncOpenAI(
        base_url=settings.base_url,
        api_key=settings.api_key or "not-needed",
        timeout=MODEL_TIMEOUT,
        max_retries=0,
    )
    try:
        raw = await sdk.models.with_raw_response.list()
        kind = raw.headers.get("content-type", "")
        if "json" not in kind:  # a web page (a proxy's login, a UI's index), not the API
            return [row("model endpoint", "fail", _not_an_api(settings.base_url or "", kind))]
        try:
            names = sorted(str(m.id) for m in raw.parse().data)
        except (AttributeError, TypeError, ValueError):  # JSON, but not a model list
            return [row("model endpoint", "fail", _not_an_api(settings.base_url or "", kind))]
    except openai.APIStatusError as exc:
        return [
            row(
                "model endpoint",
                "fail",
                f"{settings.base_url} answered HTTP {exc.status_code} to /models"
                + (" (the API key was refused)" if exc.status_code in (401, 403) else ""),
            )
        ]
    except openai.APIError as exc:
        return [row("model endpoint", "fail", f"{settings.base_url} is not reachable: {exc}")]
    finally:
        await sdk.close()
    rows = [
        row("model endpoint", "ok", f"{settings.base_url} lists {len(names)} model(s)"),
        row("models", "ok" if names else "warn", ", ".join(names) or "the endpoint lists none"),
    ]
    if not settings.model:
        hint = f"; the endpoint's only model is {names[0]}" if len(names) == 1 else ""
        rows.append(
            row(
                "model name",
                "fail",
                "model.default is not set: hermesctl config set model.default NAME" + hint,
            )
        )
    elif names and settings.model not in names:
        rows.append(
            row(
                "model name",
                "fail",
                f"model.default '{settings.model}' is not one of the endpoint's models",
            )
        )
    else:
        rows.append(row("model name", "ok", f"{settings.model} is served by the endpoint"))
    return rows


def check_plugins(host: PluginHost) -> list[Row]:
    manager = host.plugins
    if manager.safe_mode:
        return [row("plugins", "warn", "safe mode (HERMES_SAFE_MODE=1): no plugins are loaded")]
    records = manager.records()
    rows = []
    for record in records:
        if record.state == "missing-env":
            rows.append(
                row(
                    f"plugin {record.key}",
                    "warn",
                    f"missing {', '.join(record.missing_env)}: "
                    f"hermesctl plugins env {record.key} NAME=VALUE",
                )
            )
        elif record.state == "error":
            rows.append(row(f"plugin {record.key}", "fail", record.reason))
    loaded = sum(r.loaded for r in records)
    rows.insert(0, row("plugins", "ok", f"{len(records)} found, {loaded} loaded"))
    return rows


def landlock_abi() -> tuple[int | None, str]:
    """The kernel's Landlock ABI version, or None and why not."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(
        ctypes.c_long(LANDLOCK_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
    )
    if version >= 0:
        return int(version), f"Landlock ABI {version}"
    err = ctypes.get_errno()
    reason = {
        errno.ENOSYS: "the kernel has no Landlock",
        errno.EOPNOTSUPP: "Landlock is disabled at boot",
    }.get(err, os.strerror(err))
    return None, reason


async def bwrap_runnable() -> tuple[bool, str]:
    """Whether bubblewrap can start a process in new namespaces here."""
    path = shutil.which("bwrap")
    if path is None:
        return False, "bwrap is not installed"
    true = shutil.which("true") or "/bin/true"
    try:
        proc = await asyncio.create_subprocess_exec(
            path,
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--unshare-all",
            true,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(), 10)
    except (OSError, TimeoutError) as exc:
        return False, f"{path} did not run: {exc}"
    if proc.returncode != 0:
        return False, f"{path} cannot run here: {err.decode(errors='replace').strip()}"
    return True, f"{path} runs"


async def check_sandbox(config: Any) -> Row:
    ok_bwrap, bwrap = await bwrap_runnable()
    abi, landlock = await asyncio.to_thread(landlock_abi)
    status = "ok" if ok_bwrap or abi else "warn"
    network = network_mode(config.get("sandbox.network"))  # issue 29
    return row("sandbox", status, f"{bwrap}; {landlock}; network: {network}")


def check_systemd(daemon: Daemon) -> Row:
    interval = sdnotify.watchdog_interval()
    parts = [
        "notify socket " + ("set" if os.environ.get("NOTIFY_SOCKET") else "not set"),
        f"watchdog every {interval:g}s" if interval else "no watchdog",
        "socket-activated" if daemon.server.activated else "socket bound by hermesd",
        "logging to the journal" if logs.stderr_is_journal() else "logging to stderr",
    ]
    return row("systemd", "ok", ", ".join(parts))


def check_socket(daemon: Daemon) -> Row:
    path = daemon.server.path or daemon.socket_path
    try:
        st = os.stat(path)
    except OSError as exc:
        return row("socket", "fail", f"{path}: {exc.strerror}")
    return row("socket", "ok", f"{path} (mode {stat.S_IMODE(st.st_mode):04o}, gid {st.st_gid})")


async def check_storage(store: SessionStore) -> Row:
    """``PRAGMA quick_check`` of state.db, on the store's DB thread (never on the loop)."""
    path = store.path

    def quick_check() -> list[str]:
        rows = store.connection().execute("PRAGMA quick_check(5)").fetchall()
        return [str(r[0]) for r in rows]

    try:
        found = await store.run(quick_check)
    except Exception as exc:  # damage bad enough that the check itself fails
        found = [str(exc.__cause__ or exc)]
    if found == ["ok"]:
        return row("storage", "ok", f"{path}: quick_check ok")
    return row(
        "storage",
        "fail",
        f"{path} is damaged: {'; '.join(found)}. To recover: {recovery_hint(path)}",
    )


async def check_text(store: SessionStore) -> Row:
    """Text cells of the session tables that are not valid UTF-8 (which ``quick_check`` does
    not see), by session, with how to get rid of them; on the store's DB thread."""
    try:
        found = await store.run(lambda: sessions_with_bad_text(store.connection()))
    except Exception as exc:  # a damaged page: check_storage reports it
        return row("text", "warn", f"not checked: {exc.__cause__ or exc}")
    if not found:
        return row("text", "ok", "every session's text is valid UTF-8")
    shown = ", ".join(f"{sid} ({', '.join(tables)})" for sid, tables in found.items())
    first = next(iter(found))
    return row(
        "text",
        "fail",
        f"{store.path}: sessions holding text that is not valid UTF-8 (their history cannot be "
        f"read): {shown}. To recover: keep a copy of {store.path}, then delete each session "
        f"(`hermesctl sessions delete {first}`) or restore a backup of the file",
    )


def check_memory() -> Row:
    """The daemon's resident memory, and the plugins whose calls grew it most."""
    detail = f"resident {rss_bytes() // (1024 * 1024)} MiB"
    grown = GROWTH.largest()
    if grown:
        detail += "; grown over plugin calls: " + ", ".join(
            f"{k} +{v // (1024 * 1024)} MiB" for k, v in grown.items()
        )
    leaking = any(v >= GROWTH.threshold for v in grown.values())
    return row("memory", "warn" if leaking else "ok", detail)


def check_versions() -> Row:
    try:
        sdk = metadata.version("openai")
    except metadata.PackageNotFoundError:
        sdk = "?"
    return row(
        "versions",
        "ok",
        f"hermesd {__version__}, protocol {PROTOCOL_VERSION}, Python "
        f"{platform.python_version()}, openai {sdk}, {platform.system()} {platform.release()}",
    )


def _not_an_api(base_url: str, content_type: str) -> str:
    shown = content_type.split(";")[0].strip() or "no content type"
    return (
        f"{base_url}/models answered with {shown}, not an OpenAI model list: is model.base_url "
        "the API's address (most end in /v1), not a web page's?"
    )


def check_mcp(pool: McpPool | None) -> list[Row]:
    """Each enabled MCP server: ready, or why not (its error and the last line of its stderr)."""
    rows = []
    for server in pool.describe() if pool is not None else []:
        if not server["enabled"]:
            continue
        name = f"mcp {server['name']}"
        if server["state"] == "ready":
            rows.append(row(name, "ok", f"ready, {server['registered']} tools"))
        elif server.get("error"):
            tail = str(server.get("stderr_tail") or "").splitlines()[-1:]
            detail = f"{server['state']}: {server['error']}"
            rows.append(row(name, "fail", detail + (f" (stderr: {tail[0]})" if tail else "")))
        else:
            rows.append(row(name, "ok", f"{server['state']} (starts when first used)"))
    return rows


def check_chat_platforms(states: dict[str, str]) -> list[Row]:
    """Each configured chat platform (docs/gateway.md): connected, or why not."""
    return [
        row(f"gateway {name}", "ok" if state == "connected" else "fail", state)
        for name, state in sorted(states.items())
    ]


class DoctorService(RpcService):
    """The ``doctor`` method."""

    def __init__(
        self,
        daemon: Daemon,
        files: SettingsFiles,
        host: PluginHost,
        store: SessionStore,
        mcp_pool: McpPool | None = None,
        chat_platforms: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        """``chat_platforms()``: each configured chat platform's state (the gateway's)."""
        self.store = store
        self.chat_platforms = chat_platforms
        self.daemon = daemon
        self.files = files
        self.host = host
        self.mcp_pool = mcp_pool

    def bind(self, router: Router) -> None:
        router.bind("doctor", self.rpc_doctor)

    async def rpc_doctor(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        await self.host.gate.wait()  # plugins loading: their state is not known yet
        model = asyncio.ensure_future(check_model(self.daemon.config))
        sandbox = asyncio.ensure_future(check_sandbox(self.daemon.config))
        rows = [check_socket(self.daemon), await asyncio.to_thread(check_config, self.files)]
        rows += await model
        rows += check_plugins(self.host)
        rows += check_mcp(self.mcp_pool)
        if self.chat_platforms is not None:
            rows += check_chat_platforms(self.chat_platforms())
        rows.append(await sandbox)
        rows.append(check_systemd(self.daemon))
        rows.append(await check_storage(self.store))
        rows.append(await check_text(self.store))
        rows.append(check_memory())
        rows.append(check_versions())
        return {"checks": rows, "ok": all(r["status"] != "fail" for r in rows)}
