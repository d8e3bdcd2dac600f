"""Which services a daemon runs, in which order, and how they are connected.

The one place that knows every service. Each object gets what it depends on when it is built
(constructor injection), in dependency order: the threads plugin code runs on and the hook
bus, the session store, the approval broker, the tool and command registries, the model client
and the agent loop, the session service, the plugin host, then the RPC-facing services, which
go to ``daemon.services`` in start-up order (stop runs in reverse). Nothing is connected by
setting attributes after construction. `build_plugin_host` is the same assembly for code that
needs only the plugin host (tests, ``plugins lint``'s child process).
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hermesd import redact
from hermesd.agent.loop import AgentLoop, AgentSettings
from hermesd.agent.sessions import SessionService
from hermesd.approvals.broker import ApprovalBroker
from hermesd.approvals.service import ApprovalService
from hermesd.commands.registry import CommandRegistry
from hermesd.commands.service import CommandService, hermesctl_subcommands
from hermesd.daemon.config import SettingsFiles, load_dotenv_file
from hermesd.mcp.pool import McpPool
from hermesd.mcp.service import McpService
from hermesd.model.client import ModelClient, ModelSettings
from hermesd.plugins.admin import PluginAdminService
from hermesd.plugins.context import Injector, McpCaller
from hermesd.plugins.hooks import DEFAULT_HOOK_TIMEOUT, HookBus
from hermesd.plugins.host import DEFAULT_LOAD_TIMEOUT, PluginHost, PluginManager, ReloadGate
from hermesd.plugins.service import PluginService
from hermesd.plugins.skills import SkillCatalog
from hermesd.plugins.workers import WorkerPool
from hermesd.store.sessions import SessionStore
from hermesd.tools.builtin_files import register_builtin_file_tools
from hermesd.tools.builtin_skills import register_skill_tools
from hermesd.tools.registry import (
    DEFAULT_RESULT_BUDGET,
    DEFAULT_TOOL_TIMEOUT,
    Approver,
    ToolRegistry,
)
from hermesd.tools.results import Redactor

if TYPE_CHECKING:
    from hermesd.daemon.main import Daemon
    from hermesd.rpc.connection import Connection


def _setting(config: Any, dotted: str, default: Any) -> Any:
    """``dotted`` from a `hermesd.daemon.config.Config` or from a plain nested mapping."""
    getter: Callable[..., Any] | None = getattr(config, "get", None)
    if getter is not None and not isinstance(config, Mapping):
        return getter(dotted, default)
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or node.get(part) is None:
            return default
        node = node[part]
    return node


@dataclass
class _Registries:
    pool: WorkerPool
    hooks: HookBus
    tools: ToolRegistry
    commands: CommandRegistry
    skills: SkillCatalog


def _registries(
    home: Path,
    config: Any,
    env: Mapping[str, str],
    dotenv: Mapping[str, str],
    *,
    pool: WorkerPool | None = None,
    hooks: HookBus | None = None,
    approver: Approver | None = None,
    redactor: Redactor | None = None,
) -> _Registries:
    """The worker pool and hook bus (unless given), the tool registry (with the skill tools),
    the command registry and the skill catalog, set up from ``config``."""
    pool = pool or WorkerPool()
    hooks = hooks or HookBus(
        pool, timeout=float(_setting(config, "tools.hook_timeout", DEFAULT_HOOK_TIMEOUT))
    )
    tools = ToolRegistry(
        hooks,
        pool=pool,
        timeout=float(_setting(config, "tools.timeout", DEFAULT_TOOL_TIMEOUT)),
        result_budget=int(_setting(config, "tools.result_budget", DEFAULT_RESULT_BUDGET)),
        env={**dotenv, **env},
        approver=approver,
        redactor=redactor,
    )
    skills = SkillCatalog(home)
    register_skill_tools(tools, skills)
    return _Registries(pool, hooks, tools, CommandRegistry(pool=pool), skills)


def _manager(
    home: Path,
    config: Any,
    env: Mapping[str, str],
    dotenv: Mapping[str, str],
    parts: _Registries,
    *,
    injector: Injector | None = None,
    cwd: Path | None = None,
    mcp_caller: McpCaller | None = None,
) -> PluginManager:
    settings = {
        "enabled": _setting(config, "plugins.enabled", None),
        "disabled": _setting(config, "plugins.disabled", []),
        "load_timeout": _setting(config, "plugins.load_timeout", DEFAULT_LOAD_TIMEOUT),
    }
    return PluginManager(
        home,
        settings,
        env,
        parts.tools,
        parts.hooks,
        parts.commands,
        parts.skills,
        dotenv=dotenv,
        pool=parts.pool,
        cwd=cwd,
        injector=injector,
        mcp_caller=mcp_caller,
    )


def build_plugin_host(
    home: Path,
    config: Any,
    env: Mapping[str, str],
    dotenv: Mapping[str, str] | None = None,
    *,
    injector: Injector | None = None,
    pool: WorkerPool | None = None,
    cwd: Path | None = None,
) -> PluginHost:
    """The plugin host alone (registries, skill tools and manager) from ``config``, a
    `hermesd.daemon.config.Config` or a nested dict. Plugins are not loaded yet: call
    ``host.plugins.load_all()``."""
    dotenv = dict(dotenv or {})
    parts = _registries(home, config, env, dotenv, pool=pool)
    manager = _manager(home, config, env, dotenv, parts, injector=injector, cwd=cwd)
    return PluginHost(parts.pool, parts.hooks, parts.tools, parts.commands, parts.skills, manager)


def build_services(daemon: Daemon) -> None:
    """Build every service for ``daemon`` and append the RPC-facing ones to its list."""
    cfg = daemon.config
    home = daemon.home
    files = SettingsFiles(home)
    dotenv = files.dotenv()
    store = SessionStore.in_home(home, history_messages=cfg.get("agent.history_messages"))
    # Who is attached to which session: the session service keeps it, the broker asks it.
    attached: dict[str, set[Connection]] = {}
    pool = WorkerPool()
    hooks = HookBus(pool, timeout=float(cfg.get("tools.hook_timeout")))
    broker = ApprovalBroker(
        store, hooks, cfg, attached=lambda sid: list(attached.get(sid, ())), hermes_home=home
    )
    parts = _registries(
        home,
        cfg,
        os.environ,
        dotenv,
        pool=pool,
        hooks=hooks,
        approver=broker.approve,
        redactor=redact.redact,
    )
    register_builtin_file_tools(
        parts.tools,
        home=home,
        store=store,
        config=cfg,
        transform_output=functools.partial(hooks.transform, "transform_terminal_output"),
    )
    gate = ReloadGate()
    agent = AgentLoop(
        store,
        parts.tools,
        hooks,
        ModelClient(ModelSettings.from_config(cfg)),
        AgentSettings.from_config(cfg, skills_index=parts.skills.index_text()),
        reloads=gate,
    )
    sessions = SessionService(
        store,
        agent,
        hooks,
        attached=attached,
        on_attach=broker.on_attach,
        on_forget=broker.forget_session,
        redact_event=redact.redact_event,
    )
    # MCP servers: one pool for the daemon, its tools in the same registry (docs/mcp.md)
    mcp_pool = McpPool(
        parts.tools,
        values=functools.partial(_mcp_values, home),
        start=str(cfg.get("mcp.start")),
    )
    manager = _manager(
        home,
        cfg,
        os.environ,
        dotenv,
        parts,
        injector=sessions.inject,
        mcp_caller=mcp_pool.plugin_call,
    )
    host = PluginHost(pool, hooks, parts.tools, parts.commands, parts.skills, manager, gate)
    admin = PluginAdminService(host, files, dotenv)
    approvals = ApprovalService(broker)
    host.commands.reserve_cli_names(hermesctl_subcommands())
    mcp = McpService(mcp_pool, cfg, files.load)
    host.commands.register(
        "reload-mcp",
        mcp.reload_command,
        description="Reload MCP servers from config.yaml",
        aliases=("reload_mcp",),
    )
    daemon.services.append(mcp)
    daemon.services.append(PluginService(host, cfg.get("tools.enabled_toolsets")))
    daemon.services.append(sessions)
    daemon.services.append(admin)
    daemon.services.append(
        CommandService(
            host,
            sessions,
            status=lambda: daemon.status(cast(Any, None), {}),
            reload_plugins=admin.reload_plugins,
            approvals=approvals.slash_command,
            timeout=cfg.get("commands.timeout"),
            cli_timeout=cfg.get("commands.cli_timeout"),
        )
    )
    # Last, so it stops first (pending approvals are answered before the others stop).
    daemon.services.append(approvals)


async def _mcp_values(home: Path) -> dict[str, str]:
    """What ``${VAR}`` in mcp_servers expands from: .env, then the environment (which wins)."""
    dotenv = await asyncio.to_thread(load_dotenv_file, home)
    return {**dotenv, **os.environ}
