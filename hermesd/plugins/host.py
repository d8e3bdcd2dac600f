"""The plugin host: which plugins load, in what order, and what happens when one misbehaves.

`PluginManager.load_all` takes the candidates `loader.discover` found and, for each in load
order, decides (docs/hermes-compat.md §2–3): manifest broken → error; ``plugins.disabled`` →
disabled; not in ``plugins.enabled`` (when that list exists; HERMES_PLUGIN_PATH plugins count as
enabled) → not-enabled; a ``requires_env`` variable missing from both the process environment and
``$HERMES_HOME/.env`` → missing-env. Otherwise the plugin is imported and its ``register(ctx)``
runs on a worker thread, bounded by ``plugins.load_timeout``; if it raises or times out,
everything it registered is rolled back and it is listed with the reason. ``HERMES_SAFE_MODE``
skips all of this. The registries it loads plugins into are built by the daemon
(`hermesd.daemon.services.build_plugin_host`) and handed in.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, cast

from hermesd.plugins import api_version, hostapi
from hermesd.plugins.listing import plugins_payload, plugins_text
from hermesd.plugins.loader import (
    Candidate,
    discover,
    drop_modules,
    env_flag,
    import_plugin,
    module_name,
)
from hermesd.plugins.manifest import PluginRecord, Source
from hermesd.plugins.memory_providers import discover_providers, looks_like_provider
from hermesd.plugins.registrar import Injector, McpCaller, PluginContext, PluginServices
from hermesd.plugins.secret_sources import SecretSources
from hermesd.runtime.hooks import HookBus
from hermesd.runtime.workers import WorkerPool, shared_pool
from hermesd.tools.schema import Finding, ToolsJsonError, lint_tools, load_tools_json
from hermesd.tools.skill_catalog import SkillCatalog

if TYPE_CHECKING:  # the registries sit above this layer; the daemon hands them in
    from hermesd.commands.registry import CommandRegistry
    from hermesd.tools.registry import ToolRegistry

__all__ = ["PluginHost", "PluginManager", "PluginRecord"]

log = logging.getLogger(__name__)

DEFAULT_LOAD_TIMEOUT = 10.0
SAFE_MODE_TEXT = "Safe mode (HERMES_SAFE_MODE=1): no plugins are loaded."
UNLOAD_TIMEOUT = 5.0  # one ctx.on_unload callback


class PluginManager:
    """Discovers, gates, loads and unloads plugins; keeps one `PluginRecord` per plugin."""

    def __init__(
        self,
        home: Path,
        settings: Mapping[str, Any],
        env: Mapping[str, str],
        registry: ToolRegistry,
        hooks: HookBus,
        commands: CommandRegistry,
        skills: SkillCatalog,
        *,
        dotenv: Mapping[str, str] | None = None,
        pool: WorkerPool | None = None,
        cwd: Path | None = None,
        injector: Injector | None = None,
        completer: Callable[..., Any] | None = None,
        mcp_caller: McpCaller | None = None,
    ) -> None:
        """``settings``: the ``plugins`` section of config.yaml (``enabled``, ``disabled``,
        ``load_timeout``), or the whole config mapping. ``env``: the daemon's environment (the
        ``HERMES_*`` switches, ``requires_env``); ``dotenv``: the values of
        ``$HERMES_HOME/.env``. ``injector`` backs ``ctx.inject_message`` and may be set later
        as ``manager.services.injector``."""
        section = settings.get("plugins")
        self.settings: Mapping[str, Any] = section if isinstance(section, Mapping) else settings
        self.home = Path(home)
        self.env = env
        self.dotenv: Mapping[str, str] = dotenv or {}
        self.cwd = cwd
        self.load_timeout = float(self.settings.get("load_timeout") or DEFAULT_LOAD_TIMEOUT)
        self.services = PluginServices(
            self.home, registry, hooks, commands, skills, injector, mcp_caller
        )
        self.services.completer = completer
        self._pool = pool or shared_pool()
        self._records: dict[str, PluginRecord] = {}
        #: ``name -> {active, available, reason}`` of a memory provider (the daemon's)
        self.provider_status: Callable[[str], dict[str, Any]] | None = None
        self.secrets = SecretSources()  # what plugin secret sources set in os.environ
        hostapi.install(hostapi.HostState(self.home, self))

    # -- queries ----------------------------------------------------------------------------

    def records(self) -> list[PluginRecord]:
        """Every discovered plugin, loaded or not, in load order."""
        return list(self._records.values())

    def get(self, key: str) -> PluginRecord | None:
        """The record of one plugin."""
        return self._records.get(key)

    @property
    def safe_mode(self) -> bool:
        """Whether ``HERMES_SAFE_MODE`` keeps every plugin from loading."""
        return env_flag(self.env, "HERMES_SAFE_MODE")

    def secret_env_names(self) -> set[str]:
        """The ``requires_env`` variables any discovered plugin marks ``secret``, and the ones a
        plugin secret source supplied."""
        return {
            r.name
            for record in self._records.values()
            if record.manifest is not None
            for r in record.manifest.requires_env
            if r.secret
        } | set(self.secrets.supplied)

    def listing_text(self) -> str:
        """The ``/plugins`` text."""
        if self.safe_mode:
            return SAFE_MODE_TEXT
        self.refresh_provider_status()
        return plugins_text(self.records(), self.home)

    def listing(self) -> list[dict[str, Any]]:
        """The ``plugins.list`` result."""
        self.refresh_provider_status()
        return plugins_payload(self.records())

    # -- loading ----------------------------------------------------------------------------

    def load_all(self) -> list[PluginRecord]:
        """Discover and load every plugin (unloading any loaded before); their records."""
        if self._records:
            self.unload_all()
        if self.safe_mode:
            log.info("HERMES_SAFE_MODE is set: plugin discovery skipped")
            return []
        hostapi.install(hostapi.HostState(self.home, self))
        hostapi.enable_reference_modules()
        enabled_setting = self.settings.get("enabled")
        enabled = None if enabled_setting is None else {str(k) for k in enabled_setting}
        disabled = {str(k) for k in self.settings.get("disabled") or []}
        for candidate in discover(self.home, self.env, self.cwd):
            if _is_memory_provider(candidate):
                continue  # loaded by memory.provider only (listed below)
            record = _record_for(candidate)
            self._records[candidate.key] = record
            if candidate.error is not None:
                record.state, record.reason = "error", candidate.error
            elif {candidate.key, record.name} & disabled:
                record.state, record.reason = "disabled", "disabled in config"
            elif (
                enabled is not None
                and not candidate.declared
                and not {candidate.key, record.name} & enabled
            ):
                record.state, record.reason = "not-enabled", "not enabled in config"
            elif why := api_version.refusal(_requires_hermes(record)):
                record.state, record.reason = "error", why
                log.warning("Plugin '%s' not loaded: %s", candidate.key, why)
            elif self._missing_env(candidate, record):
                pass
            else:
                self._load(candidate, record)
        for provider in discover_providers(self.home, self.env, self.cwd):
            key = f"memory/{provider.name}"
            if provider.name in self._records or key in self._records:
                continue
            self._records[key] = PluginRecord(
                key=provider.name,
                name=provider.name,
                source=cast(Source, provider.source),
                path=provider.location,
                description=provider.description,
                state="memory-provider",
                provider_status=self._provider_status(provider.name),
            )
        loaded = sum(r.loaded for r in self._records.values())
        log.info("Plugins: %d found, %d loaded", len(self._records), loaded)
        self.apply_secret_sources()
        return self.records()

    def apply_secret_sources(self) -> None:
        """Set what the enabled plugin secret sources supply into the environment
        (``secrets:`` in config.yaml; hermesd.plugins.secret_sources)."""
        sources = [e.obj for e in self.services.providers.of_kind("secret_source")]
        self.secrets.apply(sources, hostapi.read_config().get("secrets"), self.home)

    def _provider_status(self, name: str) -> dict[str, Any]:
        status = self.provider_status(name) if self.provider_status is not None else None
        return status or {"active": False, "available": None, "reason": ""}

    def refresh_provider_status(self) -> None:
        """Re-read the memory providers' status into their records (for the listing)."""
        for record in self._records.values():
            if record.state == "memory-provider":
                record.provider_status = self._provider_status(record.key)

    def _missing_env(self, candidate: Candidate, record: PluginRecord) -> bool:
        requirements = candidate.manifest.requires_env if candidate.manifest else []
        missing = [
            r.name for r in requirements if not self.env.get(r.name) and not self.dotenv.get(r.name)
        ]
        if missing:
            record.state, record.missing_env = "missing-env", missing
            record.reason = f"disabled (missing: {', '.join(missing)})"
            log.warning("Plugin %s disabled (missing: %s)", candidate.key, ", ".join(missing))
        return bool(missing)

    def _load(self, candidate: Candidate, record: PluginRecord) -> None:
        declared: dict[str, dict[str, Any]] = {}
        tools_json = candidate.folder / "tools.json" if candidate.folder else None
        if tools_json is not None and tools_json.is_file():
            try:
                declared = load_tools_json(tools_json)
            except ToolsJsonError as exc:
                self._fail(candidate, record, None, exc)
                return
        ctx = PluginContext(record, self.services, declared)

        def work() -> None:
            hostapi.loading.set(ctx)  # this worker's own context: nothing to reset
            result = import_plugin(candidate)(ctx)
            if asyncio.iscoroutine(result):
                asyncio.run(result)

        future = self._pool.submit(work, f"load:{record.key}")
        done, _ = futures_wait([future], self.load_timeout)
        if not done:
            self._pool.abandon(future)
            self._fail(
                candidate,
                record,
                ctx,
                TimeoutError(f"register() did not finish within {self.load_timeout:g}s"),
            )
            return
        error = future.exception()
        if error is not None:
            self._fail(candidate, record, ctx, error)
            return
        record.state = "loaded"
        record.warnings.extend(self._findings(candidate, record, declared))
        log.info(
            "Loaded plugin '%s' (%d tools, %d hooks, %d middleware, %d commands, "
            "%d CLI commands, %d skills)",
            record.key,
            len(record.tools),
            len(record.hooks),
            len(record.middleware),
            len(record.commands),
            len(record.cli_commands),
            len(record.skills),
        )

    def _fail(
        self,
        candidate: Candidate,
        record: PluginRecord,
        ctx: PluginContext | None,
        error: BaseException,
    ) -> None:
        if ctx is not None:
            ctx.close()  # a hung register() that wakes up later registers nothing
        self._rollback(record)
        if candidate.folder is not None:
            drop_modules(module_name(candidate.key))
        reason = " ".join(f"{type(error).__name__}: {error}".split())  # one listing line
        record.state, record.reason = "error", reason[:300]
        log.warning("Failed to load plugin '%s': %s", record.key, error)
        log.debug("Traceback of plugin '%s'", record.key, exc_info=error)

    def _rollback(self, record: PluginRecord) -> None:
        services = self.services
        services.memory_providers.drop_owner(record.key)
        services.context_engines.drop_owner(record.key)
        services.providers.drop_owner(record.key)
        for fn in services.unload_callbacks.pop(record.key, []):  # ctx.on_unload, newest first
            try:
                self._pool.call(fn, UNLOAD_TIMEOUT, f"plugin:{record.key}")
            except Exception as exc:
                log.warning("on_unload callback of plugin '%s' failed: %s", record.key, exc)
        services.tools.unregister_owner(record.key)
        services.hooks.unregister_plugin(record.key)
        services.commands.unregister_owner(record.key)
        services.skills.unregister_plugin(record.key)
        record.clear_registrations()

    def _findings(
        self, candidate: Candidate, record: PluginRecord, declared: Mapping[str, Any]
    ) -> list[Finding]:
        registry = self.services.tools
        entries = [
            e
            for e in (registry.get(n) for n in record.tools)
            if e is not None and e.owner == record.key
        ]
        findings = lint_tools((e.name, e.toolset, e.schema) for e in entries)
        for name in declared:
            if name not in record.tools:
                findings.append(
                    Finding(
                        "warning",
                        name,
                        "",
                        "declared in tools.json but no handler was registered for it",
                    )
                )
        manifest = candidate.manifest
        drift = []
        if manifest is not None and manifest.provides_tools:
            drift += _drift("tool", manifest.provides_tools, record.tools, "provides_tools")
        if manifest is not None and manifest.provides_hooks:
            drift += _drift("hook", manifest.provides_hooks, record.hooks, "provides_hooks")
        for finding in drift:
            log.warning("Plugin '%s': %s", record.key, finding.message)
        for finding in findings:
            where = "/".join(p for p in (finding.tool, finding.parameter) if p)
            log.info(
                "Plugin '%s' tool check: %s%s",
                record.key,
                f"{where}: " if where else "",
                finding.message,
            )
        return findings + drift

    def unload(self, key: str) -> None:
        """Remove one plugin's registrations and forget its modules (before deleting it)."""
        record = self._records.get(key)
        if record is None:
            return
        self._rollback(record)
        if record.source != "entrypoint":
            drop_modules(module_name(key))
        record.state, record.reason = "not-enabled", "unloaded"

    def unload_all(self) -> None:
        """Remove every plugin's registrations and forget its modules (for reload)."""
        for record in self._records.values():
            self._rollback(record)
        drop_modules()
        self._records.clear()

    def reload(self) -> list[PluginRecord]:
        """Unload everything, then discover and load again."""
        self.unload_all()
        return self.load_all()


def _is_memory_provider(candidate: Candidate) -> bool:
    """A user or project folder whose plugin.yaml says ``kind: exclusive``, or declares no kind
    and names a memory provider marker: the reference's loader leaves it to memory.provider."""
    if candidate.folder is None or candidate.source not in ("user", "project"):
        return False
    manifest = candidate.manifest
    if manifest is not None and manifest.kind_declared:
        return manifest.kind == "exclusive"
    return looks_like_provider(candidate.folder)


def _requires_hermes(record: PluginRecord) -> str | None:
    """The manifest's ``requires_hermes`` range, if it has one."""
    return record.manifest.requires_hermes if record.manifest is not None else None


def _record_for(candidate: Candidate) -> PluginRecord:
    manifest = candidate.manifest
    return PluginRecord(
        key=candidate.key,
        name=manifest.name if manifest else candidate.key,
        source=candidate.source,
        path=str(candidate.folder) if candidate.folder else (manifest.path if manifest else None),
        version=manifest.version if manifest else None,
        description=manifest.description if manifest else "",
        author=manifest.author if manifest else "",
        manifest=manifest,
        shadows=list(candidate.shadows),
        warnings=[s.warning for s in candidate.shadows],
    )


def _drift(kind: str, declared: list[str], actual: list[str], field: str) -> list[Finding]:
    findings = [
        Finding("warning", "", "", f"{kind} '{n}' is listed in {field} but was not registered")
        for n in declared
        if n not in actual
    ]
    findings += [
        Finding("warning", "", "", f"{kind} '{n}' was registered but is not listed in {field}")
        for n in actual
        if n not in declared
    ]
    return findings


class ReloadGate:
    """Closed while a reload has the plugins' registrations half undone.

    A reload unloads every plugin, then loads them again on a worker thread; in between,
    tools, hooks, commands and skills are missing. Requests that read them wait at the gate
    (`guard`, `wait`) until the reload ends instead of finding a tool unknown; with no reload
    running, passing costs nothing. Opened and closed on the event loop's thread.
    """

    def __init__(self) -> None:
        self._holders = 0
        self._open = asyncio.Event()
        self._open.set()

    def __enter__(self) -> Self:
        self._holders += 1
        self._open.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        self._holders -= 1
        if not self._holders:
            self._open.set()

    async def wait(self) -> None:
        """Return once no reload runs (at once when none does)."""
        while self._holders:
            await self._open.wait()

    def guard(self, handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """An RPC handler that waits at the gate first (sync: it runs at once when open)."""

        def guarded(call: Any, params: Any) -> Any:
            if not self._holders:
                return handler(call, params)
            return self._after(handler, call, params)

        return guarded

    async def _after(self, handler: Callable[[Any, Any], Any], call: Any, params: Any) -> Any:
        await self.wait()
        result = handler(call, params)
        return await result if inspect.isawaitable(result) else result


@dataclass
class PluginHost:
    """Everything plugins plug into, built together."""

    pool: WorkerPool
    hooks: HookBus
    tools: ToolRegistry
    commands: CommandRegistry
    skills: SkillCatalog
    plugins: PluginManager
    gate: ReloadGate = field(default_factory=ReloadGate)
