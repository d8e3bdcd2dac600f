"""The ``ctx`` object a plugin's ``register(ctx)`` receives (docs/hermes-compat.md §4).

`PluginContext` keeps the reference's method names and parameter names, because real plugins call
them by keyword. Every registration goes to the shared registries under the plugin's key (so the
loader can roll all of it back) and is noted in the plugin's `PluginRecord` (so the listing can
show it). Registrations are refused with a log line, never an exception — except
`register_skill`, which raises on a bad name as the reference does. After `close` (the loader
gave up on a hung ``register()``), late registrations from the still-running thread are ignored.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd import PLUGIN_API, redact
from hermesd.plugins.context_engines import EngineRegistrations
from hermesd.plugins.ctx_newer import NewerContext, mcp_envelope
from hermesd.plugins.llm import PluginLlm
from hermesd.plugins.manifest import Manifest, PluginRecord, RejectedTool
from hermesd.plugins.memory_providers import ProviderRegistrations, provider_name
from hermesd.plugins.platform_actions import PlatformActionHost
from hermesd.plugins.provider_registrars import ProviderRegistrars
from hermesd.plugins.providers import ProviderRegistry
from hermesd.runtime.hooks import HookBus
from hermesd.runtime.session import current_session
from hermesd.runtime.workers import callable_name
from hermesd.tools.schema import Finding, ToolRejected
from hermesd.tools.skill_catalog import SkillCatalog

if TYPE_CHECKING:  # the registries sit above this layer; the daemon hands them in
    from hermesd.commands.registry import CommandRegistry
    from hermesd.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

#: Puts a message into the active session: ``(content, role) -> accepted``.
Injector = Callable[[str, str], bool]
#: Calls an MCP tool for a plugin: ``(plugin_key, server, tool, args, timeout, session_id)
#: -> result string`` (the daemon's MCP pool; it checks the plugin's ``mcp_allowlist``).
McpCaller = Callable[[str, str, str, Mapping[str, Any], float, str], str]


@dataclass
class PluginServices:
    """What plugins register into, shared by every `PluginContext`."""

    home: Path
    tools: ToolRegistry
    hooks: HookBus
    commands: CommandRegistry
    skills: SkillCatalog
    injector: Injector | None = None
    mcp_caller: McpCaller | None = None
    #: ``(messages, timeout=, model=, options=) -> Completion``: the daemon's model, for
    #: ``ctx.llm`` and ``agent.auxiliary_client.call_llm`` (None: not available)
    completer: Callable[..., Any] | None = None
    #: ``ctx.on_unload`` callbacks by plugin key, run (newest first) when it is unloaded
    unload_callbacks: dict[str, list[Callable[[], Any]]] = field(default_factory=dict)
    #: the memory provider handed to ``ctx.register_memory_provider`` (at most one)
    memory_providers: ProviderRegistrations = field(default_factory=ProviderRegistrations)
    #: the context engine handed to ``ctx.register_context_engine`` (at most one)
    context_engines: EngineRegistrations = field(default_factory=EngineRegistrations)
    #: backends from the 0.19 provider registrars (``register_web_search_provider`` …)
    providers: ProviderRegistry = field(default_factory=ProviderRegistry)
    #: ``(dotted, value)``: sets one key of config.yaml, comments kept (``ctx.set_config``)
    config_setter: Callable[[str, Any], None] | None = None
    #: the live sub-agents as plain dicts (``ctx.subagent_lifecycle``); None: no sub-agents
    subagents: Callable[[], list[dict[str, Any]]] | None = None
    #: the gateway's side of ``ctx.platform_actions`` (None: no gateway in this process)
    platform_actions: PlatformActionHost | None = None


def _takes_ctx(handler: Callable[..., Any]) -> bool:
    """True for a command handler written ``fn(ctx, raw_args)`` rather than ``fn(raw_args)``."""
    try:
        params = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in kinds]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    return len(required) >= 2 or (len(positional) >= 2 and positional[0].name == "ctx")


class PluginContext(ProviderRegistrars, NewerContext):
    """The registration API handed to one plugin's ``register(ctx)``."""

    def __init__(
        self,
        record: PluginRecord,
        services: PluginServices,
        declared_schemas: Mapping[str, dict[str, Any]] | None = None,
    ) -> None:
        self._record = record
        self._services = services
        self._declared = dict(declared_schemas or {})
        self._lock = threading.Lock()
        self._closed = False
        self._llm: PluginLlm | None = None
        #: The plugin's key (its manifest name, or ``<category>/<dir>``).
        self.plugin_name = record.key
        #: The parsed manifest (entry-point plugins get one built from package metadata).
        self.manifest = record.manifest or Manifest(
            name=record.name, version=record.version, description=record.description
        )
        #: ``$HERMES_HOME``, for plugins that keep their own files there.
        self.hermes_home = services.home

    def __getattr__(self, name: str) -> Callable[..., None]:
        """A registrar hermesd does not know yet (a newer plugin API): one warning, then a no-op,
        so the plugin's other registrations still load. Any other missing name is an error."""
        if not name.startswith("register_"):
            raise AttributeError(f"'PluginContext' object has no attribute '{name}'")
        warned = self.__dict__.setdefault("_unknown_registrars", set())
        if name not in warned:
            warned.add(name)
            message = (
                f"ctx.{name} is not part of the plugin API hermesd implements "
                f"({PLUGIN_API}); its calls are ignored"
            )
            log.warning("Plugin '%s': %s", self.plugin_name, message)
            self._record.warnings.append(Finding("warning", "", "", message))

        def ignored(*args: Any, **kwargs: Any) -> None:
            """Stands in for the unknown registrar: does nothing."""

        return ignored

    #: hermesd hands a context engine's tool handlers the live message list (issue 22).
    context_engine_tool_handlers_receive_messages = True

    @property
    def config(self) -> dict[str, Any]:
        """This plugin's settings: ``plugins.entries.<key>``, else ``plugins.<key>``, else a
        top-level ``<key>`` section of config.yaml (read afresh; {} when there is none)."""
        from hermesd.plugins import hostapi  # hostapi imports this module

        data = hostapi.read_config()
        plugins = data.get("plugins")
        plugins = plugins if isinstance(plugins, dict) else {}
        entries = plugins.get("entries")
        entries = entries if isinstance(entries, dict) else {}
        for section in (entries.get(self.plugin_name), plugins.get(self.plugin_name)):
            if isinstance(section, dict):
                return section
        top = data.get(self.plugin_name)
        return top if isinstance(top, dict) else {}

    @property
    def plugin_id(self) -> str:
        """The plugin's key (the newer reference's name for `plugin_name`)."""
        return self.plugin_name

    def get_config(self, key: str, default: Any = None) -> Any:
        """One setting: ``plugins.entries.<plugin>.settings.<key>``, else ``<key>`` of
        `config`, else ``default``."""
        section = self.config
        settings = section.get("settings")
        if isinstance(settings, dict) and key in settings:
            return settings[key]
        return section.get(key, default)

    def has_plugin(self, name: str) -> bool:
        """Whether the plugin with key or name ``name`` is loaded (during ``register()``, only
        plugins loaded before this one are)."""
        from hermesd.plugins import hostapi  # hostapi imports this module

        state = hostapi.state()
        manager = state.manager if state is not None else None
        if manager is None:
            return False
        return any(r.loaded and name in (r.key, r.name) for r in manager.records())

    @property
    def llm(self) -> PluginLlm:
        """Completions against the daemon's model (`hermesd.plugins.llm`)."""
        from hermesd.plugins import hostapi  # hostapi imports this module

        if self._llm is None:

            def settings() -> dict[str, Any]:
                section = self.config.get("llm")
                return section if isinstance(section, dict) else {}

            model = hostapi.read_config().get("model")
            provider = model.get("provider") if isinstance(model, dict) else None
            self._llm = PluginLlm(
                self.plugin_name,
                self._services.completer,
                settings,
                str(provider or "custom"),
                self._auxiliary_task,
            )
        return self._llm

    def _auxiliary_task(self, key: str) -> dict[str, Any] | None:
        """Task ``key``'s defaults overlaid with ``auxiliary.<key>`` from config.yaml, when this
        plugin registered it."""
        from hermesd.plugins import hostapi  # hostapi imports this module

        entry = self._services.providers.get("auxiliary_task", key)
        if entry is None or entry.owner != self.plugin_name:
            return None
        auxiliary = hostapi.read_config().get("auxiliary")
        chosen = auxiliary.get(key) if isinstance(auxiliary, dict) else None
        return {**entry.detail["defaults"], **(chosen if isinstance(chosen, dict) else {})}

    def on_unload(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` before this plugin is unloaded (reload, uninstall, daemon stop)."""
        if not callable(fn):
            raise TypeError("on_unload needs a callable")
        with self._lock:
            if self._refuse_late("unload callback", callable_name(fn)):
                return
            self._services.unload_callbacks.setdefault(self.plugin_name, []).insert(0, fn)

    @property
    def profile_name(self) -> str:
        """hermesd has a single profile per ``HERMES_HOME``."""
        return "default"

    @property
    def bound_tools(self) -> set[str]:
        """Names of the tools this plugin registered successfully."""
        return set(self._record.tools)

    def close(self) -> None:
        """Ignore any registration from now on (the loader abandoned this plugin)."""
        with self._lock:
            self._closed = True

    def _refuse_late(self, kind: str, name: str) -> bool:
        if self._closed:
            log.warning(
                "Plugin '%s' registered %s '%s' after its load was abandoned; ignored",
                self.plugin_name,
                kind,
                name,
            )
        return self._closed

    # -- tools ------------------------------------------------------------------------------

    def register_tool(
        self,
        name: str,
        toolset: str,
        schema: dict[str, Any] | None = None,
        handler: Callable[..., Any] | None = None,
        check_fn: Callable[[], Any] | None = None,
        requires_env: list[str] | None = None,
        is_async: bool = False,
        description: str = "",
        emoji: str = "",
        override: bool = False,
    ) -> None:
        """Add a tool. A schema declared in the plugin's tools.json replaces ``schema``."""
        with self._lock:
            if self._refuse_late("tool", name):
                return
            declared = self._declared.get(name)
            if declared is not None:
                if schema is not None and schema != declared:
                    log.debug(
                        "Plugin '%s' tool '%s': tools.json schema used instead of the one "
                        "passed to register_tool",
                        self.plugin_name,
                        name,
                    )
                schema = declared
            try:
                if schema is None:
                    raise ToolRejected(
                        f"tool '{name}' has no schema (pass schema= or declare it in tools.json)"
                    )
                if handler is None:
                    raise ToolRejected(f"tool '{name}' has no handler")
                self._services.tools.register(
                    name,
                    toolset,
                    schema,
                    handler,
                    check_fn=check_fn,
                    requires_env=requires_env,
                    is_async=is_async,
                    description=description,
                    emoji=emoji,
                    override=override,
                    owner=self.plugin_name,
                )
            except ToolRejected as exc:
                log.error("Plugin '%s': tool registration rejected: %s", self.plugin_name, exc)
                self._record.rejected_tools.append(RejectedTool(str(name), str(exc)))
                return
            if name not in self._record.tools:
                self._record.tools.append(name)

    def dispatch_tool(
        self, tool_name: str, args: dict[str, Any] | str | None, **kwargs: Any
    ) -> str:
        """Call any tool through the full pipeline (hooks, approval, budget); its result."""
        session = str(kwargs.get("session_id") or kwargs.get("task_id") or current_session.get())
        return self._services.tools.call_sync(
            tool_name,
            args,
            session_id=session,
            tool_call_id=kwargs.get("tool_call_id"),
            source="plugin",
        )

    def call_mcp(
        self,
        server: str,
        tool: str,
        args: Mapping[str, Any] | None = None,
        timeout: float = 30,
        *,
        arguments: Mapping[str, Any] | None = None,
    ) -> Any:
        """Call ``tool`` of MCP server ``server`` through the full tool pipeline. Allowed only
        by ``plugins.entries.<key>.mcp_allowlist``. With ``args`` (0.19): the result string;
        with ``arguments=`` (the newer API): the envelope ``{ok, result|error, truncated}``."""
        caller = self._services.mcp_caller
        if caller is None:
            raw = json.dumps({"error": "MCP servers are not available in this process"})
        else:
            given = arguments if arguments is not None else args
            seconds = max(1.0, min(float(timeout), 600.0))
            raw = caller(
                self.plugin_name, server, tool, dict(given or {}), seconds, current_session.get()
            )
        return raw if arguments is None else mcp_envelope(raw)

    # -- hooks ------------------------------------------------------------------------------

    def register_hook(self, hook_name: str, callback: Callable[..., Any]) -> None:
        """Subscribe ``callback`` to a lifecycle hook."""
        with self._lock:
            if self._refuse_late("hook", hook_name):
                return
            self._services.hooks.register(self.plugin_name, hook_name, callback)
            if hook_name not in self._record.hooks:
                self._record.hooks.append(hook_name)

    # -- commands ---------------------------------------------------------------------------

    def register_command(
        self,
        name: str,
        handler: Callable[..., Any],
        description: str = "",
        args_hint: str = "",
        help: str | None = None,
        access: str = "owner",
    ) -> None:
        """Add a ``/name`` command; ``help=`` is a synonym of ``description=``; ``access`` who
        may run it: ``owner`` (default), ``person`` or ``any`` (docs/plugins.md)."""
        with self._lock:
            if self._refuse_late("command", name):
                return
            if _takes_ctx(handler):
                handler = functools.partial(handler, self)
            command = self._services.commands.register(
                name,
                handler,
                description=description or help or "Plugin command",
                args_hint=args_hint,
                owner=self.plugin_name,
                access=access,
            )
            if command is not None and command.name not in self._record.commands:
                self._record.commands.append(command.name)

    def register_cli_command(
        self,
        name: str,
        help: str,
        setup_fn: Callable[[Any], Any],
        handler_fn: Callable[[Any], Any] | None = None,
        description: str = "",
        access: str = "owner",
    ) -> None:
        """Add a ``hermesctl <name> …`` command (argparse tree built by ``setup_fn``);
        ``access`` as for `register_command`."""
        with self._lock:
            if self._refuse_late("CLI command", name):
                return
            command = self._services.commands.register_cli(
                name, help, setup_fn, handler_fn, description, owner=self.plugin_name, access=access
            )
            if command is not None and command.name not in self._record.cli_commands:
                self._record.cli_commands.append(command.name)

    # -- skills -----------------------------------------------------------------------------

    def register_skill(self, name: str, path: Path | str, description: str = "") -> None:
        """Add the read-only skill ``<plugin key>:<name>``; raises ValueError for a bad name."""
        with self._lock:
            if self._refuse_late("skill", name):
                return
            skill = self._services.skills.register_plugin_skill(
                self.plugin_name, name, Path(path), description
            )
            if skill.name not in self._record.skills:
                self._record.skills.append(skill.name)

    # -- middleware -------------------------------------------------------------------------

    def register_middleware(self, kind: str, callback: Callable[..., Any]) -> None:
        """Add middleware of ``kind`` (`hermesd.runtime.middleware`); unknown kinds are kept."""
        with self._lock:
            if self._refuse_late("middleware", kind):
                return
            stored = self._services.hooks.middleware.register(self.plugin_name, kind, callback)
            self._record.middleware.append(stored)

    # -- session ----------------------------------------------------------------------------

    def inject_message(self, content: str, role: str = "user") -> bool:
        """Queue a message into the active session; False when there is none."""
        injector = self._services.injector
        if injector is None:
            log.warning("inject_message from plugin '%s': no active session", self.plugin_name)
            return False
        try:
            # plugin text bound for the model and the history: secrets never go along
            return bool(injector(redact.redact(str(content)), role))
        except Exception:
            log.exception("inject_message from plugin '%s' failed", self.plugin_name)
            return False

    def register_memory_provider(self, provider: Any) -> None:
        """Offer ``provider`` as the memory provider of its ``name`` (used when
        ``memory.provider`` names it); a second one, from any plugin, is rejected."""
        with self._lock:
            name = provider_name(provider)
            if self._refuse_late("memory provider", name):
                return
            if self._services.memory_providers.register(provider, self.plugin_name):
                self._record.memory_providers.append(name)

    def register_context_engine(self, engine: Any) -> None:
        """Offer ``engine`` as the context engine of its ``name`` (used when ``context.engine``
        names it; each session works on its own copy); a second one is rejected."""
        with self._lock:
            if self._refuse_late("context engine", str(getattr(engine, "name", "?"))):
                return
            self._services.context_engines.register(engine, self.plugin_name)
