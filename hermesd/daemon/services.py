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
from hermesd.agent.budget import UsageMeter
from hermesd.agent.delegate import Delegations
from hermesd.agent.delegate_spec import DelegationSettings
from hermesd.agent.loop import AgentLoop, AgentSettings
from hermesd.agent.session_service import SessionService
from hermesd.agent.usage_service import UsageService
from hermesd.approvals.broker import ApprovalBroker
from hermesd.approvals.service import ApprovalService
from hermesd.commands.registry import CommandRegistry
from hermesd.commands.service import CommandService, hermesctl_subcommands
from hermesd.context.host import ContextHost, ContextSettings
from hermesd.cron.service import CronService
from hermesd.cron.tool import register_cron_command, register_cron_tool
from hermesd.cron.wake import Activity, ScaleToZero
from hermesd.daemon import config_edit, sdnotify
from hermesd.daemon.config import SettingsFiles, load_dotenv_file
from hermesd.daemon.config_service import ConfigService
from hermesd.daemon.config_view import effective_settings
from hermesd.daemon.doctor import DoctorService
from hermesd.daemon.logring import LogService
from hermesd.daemon.memory_setup import MemorySetupService
from hermesd.daemon.reloads import ReloadService
from hermesd.gateway.actions import GatewayActions
from hermesd.gateway.core import Gateway
from hermesd.gateway.platforms import Platforms, plugin_platforms
from hermesd.gateway.send_tool import register_send_message
from hermesd.gateway.service import GatewayService
from hermesd.gateway.voice import Transcriber
from hermesd.http.service import HttpService
from hermesd.mcp.pool import McpPool
from hermesd.mcp.service import McpService
from hermesd.memory.builtin import BuiltinMemory
from hermesd.memory.providers import MemoryProviders
from hermesd.memory.service import MemoryService
from hermesd.memory.tool import register_memory_tool
from hermesd.model.client import ModelClient, ModelSettings
from hermesd.plugins.admin_service import PluginAdminService
from hermesd.plugins.context_engines import EngineRegistrations
from hermesd.plugins.host import DEFAULT_LOAD_TIMEOUT, PluginHost, PluginManager, ReloadGate
from hermesd.plugins.memory_providers import ProviderRegistrations
from hermesd.plugins.registrar import Injector, McpCaller
from hermesd.plugins.service import PluginService
from hermesd.runtime.hooks import DEFAULT_HOOK_TIMEOUT, HookBus
from hermesd.runtime.rss import GROWTH
from hermesd.runtime.workers import WorkerPool
from hermesd.sandbox.confine import Sandbox
from hermesd.sandbox.service import SandboxService
from hermesd.store.facade import SessionStore
from hermesd.tools.browser import BrowserTools, register_browser_tools
from hermesd.tools.browser_pool import BrowserPool
from hermesd.tools.browser_service import BrowserService
from hermesd.tools.builtin_files import BuiltinFileTools, register_builtin_file_tools
from hermesd.tools.builtin_skills import register_skill_tools
from hermesd.tools.clarify import ClarifyBroker, register_clarify
from hermesd.tools.clarify_service import ClarifyService
from hermesd.tools.code_execution import register_execute_code
from hermesd.tools.process_service import ProcessService, register_processes
from hermesd.tools.provider_tools import register_provider_tools
from hermesd.tools.registry import (
    DEFAULT_RESULT_BUDGET,
    DEFAULT_TOOL_TIMEOUT,
    Approver,
    ToolRegistry,
)
from hermesd.tools.results import Redactor
from hermesd.tools.skill_catalog import SkillCatalog
from hermesd.tools.skill_manage import register_skill_manage
from hermesd.tools.skill_usage import SkillUsage
from hermesd.tools.todo import register_todo
from hermesd.tools.toolsets import ToolSelection
from hermesd.tools.video_tool import register_video_tool
from hermesd.tools.vision import VisionTool, register_vision
from hermesd.tools.web import register_web_tools

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
    tools.selection = ToolSelection.from_config(config)  # issue 33: toolsets, disabled_toolsets
    skills = SkillCatalog(home)
    skills.usage = SkillUsage(skills.root, hooks)  # issue 32: on_skill_lifecycle
    register_skill_tools(tools, skills, skills.usage)
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
    completer: Callable[..., Any] | None = None,
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
        completer=completer,
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


def _browser(
    daemon: Daemon, core: _Core, host: PluginHost, vision: VisionTool, sessions: SessionService
) -> None:
    """issue 32: the browser tools, on the local Chromium or a plugin's browser provider; a
    deleted session's browser is closed, and every one when the daemon stops."""
    providers = host.plugins.services.providers
    pool = BrowserPool(
        core.sandbox,
        lambda: daemon.config,
        lambda: [r.obj for r in providers.of_kind("browser")],
        core.builtin.workspace,
    )
    tools = core.parts.tools
    browser = BrowserTools(pool, vision, core.home, lambda: tools.result_budget)
    register_browser_tools(tools, pool, browser)
    daemon.services.append(BrowserService(pool))
    forget = sessions.on_forget

    def also_browser(sid: str) -> None:
        if forget is not None:
            forget(sid)
        _spawn(pool.forget_session(sid))

    sessions.on_forget = also_browser


def _forget_session(
    broker: ApprovalBroker,
    providers: MemoryProviders,
    context: ContextHost,
    processes: ProcessService,
    sid: str,
) -> None:
    """A deleted session: its approvals dropped, its memory provider and engine ended, its
    background processes killed."""
    broker.forget_session(sid)
    _spawn(processes.forget_session(sid))
    _end_provider(providers, sid)
    _spawn(context.end_session(sid))


def _session_switched(
    providers: MemoryProviders, context: ContextHost, old: str, new: str, reason: str
) -> None:
    """A conversation moved on (/new, /resume, /undo, a fork): the memory provider is told;
    a session left with /new also has its context engine reset."""
    providers.session_switched(old, new, reason)
    if reason == "new_session":
        _spawn(context.reset_session(old))


def _asked_on_attach(
    broker: ApprovalBroker, clarify: ClarifyBroker, sid: str, conn: Connection
) -> None:
    """A client attached: it is asked the session's pending approvals and open questions."""
    broker.on_attach(sid, conn)
    clarify.on_attach(sid, conn)


def _spawn(coro: Any) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _ENDING.add(task)
    task.add_done_callback(_ENDING.discard)


def _end_provider(providers: MemoryProviders, sid: str) -> None:
    """A deleted session: its memory provider is ended."""
    task = asyncio.get_running_loop().create_task(providers.end_session(sid, []))
    _ENDING.add(task)
    task.add_done_callback(_ENDING.discard)


_ENDING: set[asyncio.Task[None]] = set()


async def _set_write_approval(files: SettingsFiles, reloads: ReloadService, on: bool) -> None:
    """``/memory approval on|off``: memory.write_approval in config.yaml, then a reload."""
    text = await asyncio.to_thread(files.edited_text, "memory.write_approval", on)
    await asyncio.to_thread(files.write_config, text)
    await reloads.reload_all("/memory approval")


def _provider_cli(
    commands: CommandRegistry,
    owner: str,
    name: str,
    help_text: str,
    setup: Any,
    handler: Any,
    description: str,
) -> None:
    """The active memory provider's cli.py as ``hermesctl <name>``."""
    commands.register_cli(name, help_text, setup, handler, description, owner=owner)


@dataclass
class _Core:
    """What every area is built on: the home's files, the store, the registries, the broker."""

    home: Path
    cfg: Any
    files: SettingsFiles
    dotenv: dict[str, str]
    store: SessionStore
    attached: dict[str, set[Connection]]  # who is attached to which session
    parents: dict[str, str]  # running sub-agent session -> its delegating session
    parts: _Registries
    broker: ApprovalBroker
    sandbox: Sandbox
    builtin: BuiltinFileTools  # terminal and the file tools (vision_analyze reads files too)
    clarify: ClarifyBroker  # the clarify tool's open questions (issue 33)


@dataclass
class _Memory:
    builtin: BuiltinMemory
    registrations: ProviderRegistrations
    providers: MemoryProviders
    gate: ReloadGate


@dataclass
class _Turns:
    meter: UsageMeter
    engines: EngineRegistrations
    context: ContextHost
    agent: AgentLoop
    sessions: SessionService
    processes: ProcessService  # terminal's background processes
    delegations: Delegations


def build_services(daemon: Daemon) -> None:
    """Build every service for ``daemon`` and append the RPC-facing ones to its list."""
    core = _core(daemon)
    memory = _memory(core)
    turns = _turns(core, memory)
    host, admin, mcp, cron, gateway = _plugins(core, memory, turns)
    # issue 33: web_search (SearXNG or a plugin's provider) and web_extract, fetching through
    # the egress proxy; the web.* keys are read from the configuration of the moment
    providers = host.plugins.services.providers
    register_web_tools(
        core.parts.tools,
        core.sandbox,
        lambda: daemon.config,
        lambda: [r.obj for r in providers.of_kind("web_search")],
        core.home,
    )

    # issue 33: image_generate, text_to_speech, video_generate call the provider config names
    def of_kind(kind: str) -> list[Any]:
        return [r.obj for r in providers.of_kind(kind)]

    register_provider_tools(core.parts.tools, lambda: daemon.config, of_kind, core.home)
    register_video_tool(core.parts.tools, lambda: daemon.config, of_kind, core.home)
    # issue 32: voice messages in chats go through the transcription provider stt.* names;
    # ctx.platform_actions acts through the gateway's adapters on this loop
    gateway.transcriber = Transcriber(lambda: daemon.config, of_kind, gateway.hooks)
    loop = _running_loop()
    if loop is not None:
        host.plugins.services.platform_actions = GatewayActions(gateway, loop)
    # issue 32: a plugin secret source may supply OPENAI_API_KEY: the model settings follow
    if loop is not None:
        sessions = turns.sessions

        def model_settings_follow() -> None:
            loop.call_soon_threadsafe(sessions.reload, daemon.config)

        host.plugins.secrets.on_change = model_settings_follow
        _append_services(daemon, core, memory, turns, host, admin, mcp, cron, gateway)


def _core(daemon: Daemon) -> _Core:
    """The store, the hook bus, the approval broker, the registries and the tool sandbox."""
    cfg, home = daemon.config, daemon.home
    files = SettingsFiles(home)
    dotenv = files.dotenv()
    store = SessionStore.in_home(home)
    store.messages.max_bytes = max(4096, int(cfg.get("sessions.max_message_bytes")))
    # Who is attached to which session: the session service keeps it, the broker asks it.
    attached: dict[str, set[Connection]] = {}
    parents: dict[str, str] = {}  # issue 34: a child's approvals also go to its parent's clients
    pool = WorkerPool()
    GROWTH.threshold = int(cfg.get("limits.plugin_memory_warn"))  # a leaking plugin is named
    hooks = HookBus(pool, timeout=float(cfg.get("tools.hook_timeout")))
    broker = ApprovalBroker(
        store,
        hooks,
        cfg,
        attached=functools.partial(_attached_up, attached, parents),
        hermes_home=home,
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
    # issue 18; issue 29: hosts off sandbox.allowed_domains are asked about like a tool call
    sandbox = Sandbox.for_home(home, cfg, daemon.socket_path, dotenv, approve=broker.approve)
    builtin = register_builtin_file_tools(
        parts.tools,
        home=home,
        store=store,
        config=cfg,
        transform_output=functools.partial(hooks.transform, "transform_terminal_output"),
        sandbox=sandbox,
    )
    clarify = ClarifyBroker(functools.partial(_attached_up, attached, parents), cfg, hooks)
    return _Core(
        home, cfg, files, dotenv, store, attached, parents, parts, broker, sandbox, builtin, clarify
    )


def _attached_up(
    attached: dict[str, set[Connection]], parents: dict[str, str], sid: str
) -> list[Connection]:
    """The connections attached to ``sid`` and to the sessions that delegated to it."""
    conns = list(attached.get(sid, ()))
    seen = {sid}
    while (sid := parents.get(sid, "")) and sid not in seen:
        seen.add(sid)
        conns.extend(attached.get(sid, ()))
    return conns


def _memory(core: _Core) -> _Memory:
    """The built-in memory (its tool and /memory) and the external provider memory.provider
    selects (docs/memory.md)."""
    parts = core.parts
    memory = BuiltinMemory(
        core.home,
        core.store,
        core.cfg,
        attached=core.attached,
        may_answer=core.broker.may_answer_uid,
        redact_text=redact.redact,
    )
    register_memory_tool(parts.tools, memory)
    memory.slash.register(parts.commands)
    registrations = ProviderRegistrations()
    providers = MemoryProviders(
        core.home,
        core.cfg,
        parts.pool,
        os.environ,
        registrations,
        core_tool_names=lambda: [e.name for e in parts.tools.entries()],
        store=core.store,
    )
    memory.write_listeners.append(providers.memory_written)
    gate = ReloadGate()
    providers.ready = gate.wait  # a plugin's ctx.register_memory_provider comes first
    return _Memory(memory, registrations, providers, gate)


def _turns(core: _Core, memory: _Memory) -> _Turns:
    """The model client, usage meter, context engines, agent loop and session service."""
    cfg, store = core.cfg, core.store
    meter = UsageMeter(store)  # usage rows, prices, budget.* (docs/sessions.md)
    meter.reload(cfg)
    client = ModelClient(ModelSettings.from_config(cfg))
    # the sessions' context engines (context.engine; docs/sessions.md "The view model")
    engines = EngineRegistrations()
    context = ContextHost(
        store,
        client,
        ContextSettings.from_config(cfg),
        home=core.home,
        env=dict(os.environ),
        registrations=engines,
        providers=memory.providers,
    )
    context.engines.hooks = core.parts.hooks  # summaries fire pre/post_auxiliary_call
    agent = AgentLoop(
        store,
        core.parts.tools,
        core.parts.hooks,
        client,
        AgentSettings.from_config(cfg, skills_index=core.parts.skills.index_text()),
        reloads=memory.gate,
        memory=memory.builtin,
        providers=memory.providers,
        meter=meter,
        context=context,
    )
    # issue 33: execute_code, and terminal's background processes (process, /ps, process.*)
    register_execute_code(core.parts.tools, core.builtin.terminal, core.sandbox, cfg)
    processes = register_processes(
        core.parts.tools,
        core.parts.commands,
        core.builtin.terminal,
        core.sandbox,
        core.home,
        cfg,
        may_use=lambda caller, sid: sessions.check_access(caller, sid),
    )
    sessions = SessionService(
        store,
        agent,
        core.parts.hooks,
        attached=core.attached,
        on_attach=functools.partial(_asked_on_attach, core.broker, core.clarify),
        on_forget=functools.partial(
            _forget_session, core.broker, memory.providers, context, processes
        ),
        on_switch=functools.partial(_session_switched, memory.providers, context),
        redact_event=redact.redact_event,
    )
    meter.broadcast = sessions.broadcast  # the day's and month's budget warnings
    processes.table.notify = sessions.wake  # notify_on_complete, watch_patterns
    context.emit = sessions.emit
    delegations = _session_tools(core, sessions)
    return _Turns(meter, engines, context, agent, sessions, processes, delegations)


def _session_tools(core: _Core, sessions: SessionService) -> Delegations:
    """The tools that talk to a session's clients: todo, skill_manage, clarify, delegate_task."""

    def running(sid: str) -> str | None:
        return (sessions.turns.get(sid) or (None, None))[0]

    # issue 33: the session's task list, its changes sent to the session's clients
    register_todo(
        core.parts.tools,
        core.parts.commands,
        core.store,
        emit=sessions.emit,
        running_turn=running,
    )
    # issue 33: the agent writes its own skills; script writes asked, every change shown
    register_skill_manage(
        core.parts.tools,
        core.parts.skills,
        emit=sessions.emit,
        running_turn=running,
    )
    # issue 33: the model's questions to the person, asked like approvals
    register_clarify(core.parts.tools, core.clarify)
    # issue 34: delegate_task, its children real sessions (docs/sessions.md "Sub-agents")
    delegations = Delegations(
        sessions,
        DelegationSettings.from_config(core.cfg),
        run_policies=core.broker.run_policies,
        parents=core.parents,
    )
    delegations.register(core.parts.tools)
    delegations.register_stop(core.parts.commands)
    # a child's tokens count above it as they are spent; its ancestors' budgets stop it
    sessions.agent.meter.lineage = delegations.ancestors
    return delegations


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _plugins(
    core: _Core, memory: _Memory, turns: _Turns
) -> tuple[PluginHost, PluginAdminService, McpService, CronService, Gateway]:
    """The MCP pool, the plugin host (with ctx.llm and inject_message), cron and /reload-mcp."""
    parts, providers = core.parts, memory.providers
    # MCP servers: one pool for the daemon, its tools in the same registry (docs/mcp.md)
    mcp_pool = McpPool(
        parts.tools,
        values=functools.partial(_mcp_values, core.home),
        start=str(core.cfg.get("mcp.start")),
        sandbox=core.sandbox,  # stdio servers run in the tool sandbox
        home=core.home,
    )
    manager = _manager(
        core.home,
        core.cfg,
        os.environ,
        core.dotenv,
        parts,
        injector=turns.sessions.inject,
        completer=turns.agent.complete_blocking,
        mcp_caller=mcp_pool.plugin_call,
    )
    manager.services.memory_providers = memory.registrations
    # issue 32: ctx.set_config edits config.yaml (comments kept); ctx.spawn_task uses our loop
    manager.services.config_setter = functools.partial(
        config_edit.set_value, core.files.config_path
    )
    parts.hooks.surfaces.loop = _running_loop()
    manager.services.context_engines = turns.engines
    manager.services.subagents = turns.delegations.snapshots  # ctx.subagent_lifecycle
    manager.provider_status = providers.status
    host = PluginHost(
        parts.pool, parts.hooks, parts.tools, parts.commands, parts.skills, manager, memory.gate
    )
    admin = PluginAdminService(host, core.files)
    host.commands.reserve_cli_names(hermesctl_subcommands())
    providers.cli.sink = functools.partial(_provider_cli, host.commands)
    providers.cli.drop = host.commands.unregister_owner
    # scheduled turns: after the sessions (runs are their turns), before plugins load (their
    # cron.jobs calls need it, even in register()); the tool and /cron register like any
    # plugin's
    # issue 36: chat platforms (hermesd.gateway); cron delivers to them
    registrations = host.plugins.services.providers
    gateway = Gateway(core.home, parts.hooks, Platforms(lambda: plugin_platforms(registrations)))
    register_send_message(parts.tools, gateway, functools.partial(_session_owner, core.store))
    cron = CronService(
        turns.sessions, core.broker, parts.skills, core.cfg, core.home, send_to=gateway.deliver
    )
    register_cron_tool(parts.tools, cron)
    register_cron_command(parts.commands, cron)
    mcp = McpService(mcp_pool, core.cfg, core.files.load)
    host.commands.register(
        "reload-mcp",
        mcp.reload_command,
        description="Reload MCP servers from config.yaml",
        aliases=("reload_mcp",),
    )
    return host, admin, mcp, cron, gateway


def _append_services(
    daemon: Daemon,
    core: _Core,
    memory: _Memory,
    turns: _Turns,
    host: PluginHost,
    admin: PluginAdminService,
    mcp: McpService,
    cron: CronService,
    gateway: Gateway,
) -> None:
    """The RPC-facing services, in start-up order (stop runs in reverse)."""
    cfg, files, sessions = core.cfg, core.files, turns.sessions
    # issue 33: vision_analyze, on auxiliary.vision's model (the live settings) or the main one
    vision = VisionTool(
        core.store, core.builtin, core.sandbox, turns.agent.complete, lambda: daemon.config
    )
    vision.hooks = core.parts.hooks  # issue 32: pre/post_auxiliary_call
    register_vision(core.parts.tools, vision)
    _browser(daemon, core, host, vision, sessions)
    approvals = ApprovalService(core.broker)
    daemon.services.append(SandboxService(core.sandbox, files.dotenv))
    daemon.services.append(mcp)
    daemon.services.append(PluginService(host))
    daemon.services.append(sessions)
    daemon.services.append(turns.processes)  # killed on stop: after the sessions' turns
    daemon.services.append(turns.delegations)  # after the sessions: it runs their turns
    usage = UsageService(turns.meter, sessions)
    daemon.services.append(usage)
    daemon.services.append(admin)
    daemon.services.append(MemoryService(memory.builtin, memory.providers))
    daemon.services.append(
        CommandService(
            host,
            sessions,
            status=lambda: daemon.status(cast(Any, None), {}),
            reload_plugins=admin.reload_plugins,
            approvals=approvals.slash_command,
            timeout=cfg.get("commands.timeout"),
            cli_timeout=cfg.get("commands.cli_timeout"),
            config_view=lambda: effective_settings(daemon.config),
            usage_report=usage.rpc_get,
        )
    )
    # Day-two operations: config.*, reload, logs, doctor (hermesd.daemon's own modules).
    reloads = ReloadService(daemon, admin)
    daemon.services.append(MemorySetupService(memory.providers, files, reloads))
    memory.builtin.slash.set_approval = functools.partial(_set_write_approval, files, reloads)
    daemon.services.append(reloads)
    daemon.services.append(ConfigService(daemon, files, reloads))
    daemon.services.append(LogService())
    daemon.services.append(_doctor(daemon, core, host, mcp, gateway))
    # Late, so it stops early (pending approvals are answered before the others stop).
    daemon.services.append(approvals)
    daemon.services.append(ClarifyService(core.clarify))  # open questions answered at stop
    # chats (issue 36): after what a chat uses, so they stop before it
    daemon.services.append(
        GatewayService(
            gateway, cfg, daemon.server.limits, daemon._connection_closed, host.gate.wait
        )
    )
    # The scheduler starts last (a run may need every other service: approval rules loaded,
    # plugins' tools registered) and stops first (its runs are recorded as stopped).
    daemon.services.append(cron)
    if cfg.get("cron.scale_to_zero"):  # docs/cron.md, "Scale to zero"
        daemon.services.append(_scale_to_zero(daemon, core, sessions, cron))
    # The HTTP door (hermesd.http, docs/clients.md): last, so it stops first.
    auth = host.plugins.services.providers  # dashboard_auth plugins: a token source of the door
    daemon.services.append(
        HttpService(
            daemon.config.get,
            daemon.server.limits,
            daemon._connection_closed,
            sdnotify.http_fds,
            daemon.home,
            (sessions.observers, cron.run_observers),  # the door's /metrics counters
            lambda: {r.name: r.obj for r in auth.of_kind("dashboard_auth")},
            lambda name: core.parts.tools.get(name) is not None,  # /metrics' tool label
        )
    )


def _doctor(
    daemon: Daemon, core: _Core, host: PluginHost, mcp: McpService, gateway: Gateway
) -> DoctorService:
    """``doctor``, with each chat platform's state (the gateway's)."""
    chats = gateway.platforms
    return DoctorService(
        daemon,
        core.files,
        host,
        core.store,
        mcp.pool,
        lambda: {name: chats.state_of(name) for name in chats.states},
    )


def _scale_to_zero(
    daemon: Daemon, core: _Core, sessions: SessionService, cron: CronService
) -> ScaleToZero:
    """The idle exit of a socket-activated daemon (cron.scale_to_zero)."""
    return ScaleToZero(
        activity=lambda: Activity(
            daemon.server.activated,
            len(daemon.server.connections),
            len(sessions.turns),
            len(cron.scheduler.running),
            len(core.broker.pending),
        ),
        next_due=cron.next_due,
        now=cron.clock.now,
        stop=daemon.request_stop,
        socket_path=lambda: daemon.server.path,
        idle_exit=float(core.cfg.get("cron.idle_exit")),
        scope=str(core.cfg.get("cron.systemd_scope")),
    )


async def _session_owner(store: SessionStore, session_id: str) -> int | None:
    """The owner uid of a session (None: the daemon owner's)."""
    owner = (await store.run(store.sessions.get, session_id)).get("owner_uid")
    return owner if isinstance(owner, int) else None


async def _mcp_values(home: Path) -> dict[str, str]:
    """What ``${VAR}`` in mcp_servers expands from: .env, then the environment (which wins)."""
    dotenv = await asyncio.to_thread(load_dotenv_file, home)
    return {**dotenv, **os.environ}
