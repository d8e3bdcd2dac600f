"""`McpPool`: the daemon's one set of MCP servers, shared by every session.

Each configured server is one `McpServer` (one process or connection, whatever the number of
sessions). Its tools go into the `ToolRegistry` under owner ``mcp:<server>`` and toolset
``mcp-<server>``, through the same ``register`` call plugin tools use, so hooks, approvals,
redaction and the result budget apply to them. A re-list replaces the server's tools in one
step on the event loop; a turn already running keeps the tool list it was given.

Servers start at daemon start (``mcp.start: eager``) or before the first turn that lists tools
(``lazy``, the default), and that turn waits a bounded time for their first connection.
`configure` applies a new ``mcp_servers`` section: servers whose settings changed are
restarted, new ones added, removed ones stopped and their tools dropped; the rest keep running.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.mcp import naming, results
from hermesd.mcp.connection import McpServer, McpUnavailable
from hermesd.mcp.settings import McpSettingsError, ServerSettings
from hermesd.sandbox.confine import Sandbox
from hermesd.tools.consent import Consent
from hermesd.tools.registry import ToolRegistry
from hermesd.tools.schema import ToolRejected
from hermesd.tools.workspace import resolve_workspace

if TYPE_CHECKING:
    import mcp_types as types

log = logging.getLogger(__name__)

FIRST_TURN_WAIT = 15.0  # seconds the first turn waits for lazily started servers
OWNER_PREFIX = "mcp:"


class McpPool:
    """Every configured MCP server of one daemon, and their tools in the registry."""

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        values: Callable[[], Awaitable[Mapping[str, str]]],
        start: str = "lazy",
        sandbox: Sandbox | None = None,
        home: Path | None = None,
    ) -> None:
        """``values``: the variables ``${VAR}`` expands from (the environment and .env, read
        when a server connects); ``sandbox`` and ``home``: stdio servers run in the tool
        sandbox, their workspace the daemon's default one (``terminal.cwd``, else
        ``$HERMES_HOME/workspace``)."""
        self.registry = registry
        self.sandbox = sandbox
        self.home = home
        self.terminal_cwd: str | None = None  # terminal.cwd, set with each configuration
        self.values = values
        self.start_mode = start
        self.servers: dict[str, McpServer] = {}
        self.rejected: dict[str, list[str]] = {}  # server -> why tools were not registered
        self.allowlists: dict[str, tuple[str, ...]] = {}  # plugin key -> mcp_allowlist
        self.session_servers: dict[str, str] = {}  # an editor's server -> its one session
        self._lock = asyncio.Lock()
        self._started = False
        registry.before_listing.append(self.before_turn)

    # -- lifecycle ------------------------------------------------------------------------

    async def configure(self, settings: Mapping[str, ServerSettings]) -> dict[str, list[str]]:
        """Apply a (new) ``mcp_servers`` section; what was added, removed and restarted."""
        changes: dict[str, list[str]] = {"added": [], "removed": [], "restarted": []}
        async with self._lock:
            dropped = [n for n in self.servers if n not in settings]
            for name in [n for n in dropped if n not in self.session_servers]:
                await self._drop(name)
                changes["removed"].append(name)
            for name, wanted in settings.items():
                current = self.servers.get(name)
                if current is not None and current.settings == wanted:
                    continue
                if current is not None:
                    await self._drop(name)
                    changes["restarted"].append(name)
                else:
                    changes["added"].append(name)
                server = self._server(wanted)
                self.servers[name] = server
                # the raw server name selects its toolset in tools.enabled_toolsets too
                self.registry.toolset_aliases[name] = naming.toolset(name)
                if wanted.enabled and self._started and self._should_run(changes, name):
                    server.start()
        if any(changes.values()):
            log.info("MCP servers: %s", changes)
        return changes

    def _server(self, settings: ServerSettings) -> McpServer:
        return McpServer(
            settings,
            values=self.values,
            on_tools=self._tools_changed,
            sandbox=self.sandbox,
            workspace=self._workspace if self.home is not None else None,
        )

    async def add_session_servers(
        self, session_id: str, settings: Mapping[str, ServerSettings]
    ) -> list[str]:
        """Start servers whose tools only ``session_id`` is offered and may call (an editor's,
        `session_server_name`), confined as configured ones are; waits (bounded) for their
        first connection. A server of that name already running is replaced."""
        async with self._lock:
            for name, wanted in settings.items():
                if name in self.servers:
                    await self._drop(name)
                self.session_servers[name] = session_id
                self.registry.session_owners[OWNER_PREFIX + name] = session_id
                server = self.servers[name] = self._server(wanted)
                server.start()
        waiting = [
            self.servers[n].wait_attempted(min(s.connect_timeout, FIRST_TURN_WAIT))
            for n, s in settings.items()
        ]
        await asyncio.wait_for(asyncio.gather(*waiting), FIRST_TURN_WAIT + 1)
        return list(settings)

    async def drop_servers(self, names: list[str]) -> None:
        """Stop servers of a session (its editor went away) and drop their tools."""
        async with self._lock:
            for name in names:
                if name in self.servers and name in self.session_servers:
                    await self._drop(name)

    def _should_run(self, changes: dict[str, list[str]], name: str) -> bool:
        # a restarted server runs again at once; a new one follows mcp.start
        return name in changes["restarted"] or self.start_mode == "eager"

    def _workspace(self) -> Path:
        assert self.home is not None
        return resolve_workspace(self.home, self.terminal_cwd)

    async def start(self) -> None:
        """Daemon start: with ``mcp.start: eager``, connect every enabled server now."""
        self._started = True
        if self.start_mode == "eager":
            for server in self.servers.values():
                if server.settings.enabled:
                    server.start()

    async def before_turn(self) -> None:
        """Start lazy servers; wait (bounded) for the first attempt of any still starting."""
        waiting = []
        for server in self.servers.values():
            if not server.settings.enabled or (server.started and server.attempted):
                continue  # the common case: nothing to do, nothing to wait for
            server.start()
            waiting.append(server.wait_attempted(min(server.settings.connect_timeout, 15.0)))
        if waiting:
            await asyncio.wait_for(asyncio.gather(*waiting), FIRST_TURN_WAIT + 1)

    async def stop(self) -> None:
        """Stop every server (daemon shutdown)."""
        async with self._lock:
            await asyncio.gather(*(s.close() for s in self.servers.values()))

    async def restart(self, name: str) -> None:
        """Reconnect one server now (a stdio server gets a new process)."""
        server = self.servers[name]
        if not server.settings.enabled:
            raise McpSettingsError(f"MCP server '{name}' is disabled (enabled: false)")
        waiting = asyncio.ensure_future(server.wait_next_attempt(server.settings.connect_timeout))
        await asyncio.sleep(0)  # registered before the attempt can end
        server.restart()
        await waiting

    async def _drop(self, name: str) -> None:
        self.registry.toolset_aliases.pop(name, None)
        server = self.servers.pop(name)
        await server.close()
        self.registry.unregister_owner(OWNER_PREFIX + name)
        self.registry.session_owners.pop(OWNER_PREFIX + name, None)
        self.session_servers.pop(name, None)
        self.rejected.pop(name, None)

    # -- tools ----------------------------------------------------------------------------

    async def _tools_changed(self, server: McpServer) -> None:
        """Replace ``server``'s tools in the registry with what it lists now."""
        if self.servers.get(server.name) is not server:
            return  # a server being dropped
        owner = OWNER_PREFIX + server.name
        settings = server.settings
        wanted = [t for t in server.tools if settings.wants_tool(t.name)]
        utilities = self._utilities(server) if wanted or server.tools == [] else []
        rejected: list[str] = []
        self.registry.unregister_owner(owner)
        taken: set[str] = set()
        for tool in wanted:
            name = naming.tool_name(server.name, tool.name)
            if name in taken:
                rejected.append(f"{tool.name}: its name {name} is taken by another of its tools")
                continue
            reason = self._register(server, tool, name)
            if reason:
                rejected.append(f"{tool.name}: {reason}")
            else:
                taken.add(name)
        for suffix, description, parameters, handler in utilities:
            name = naming.tool_name(server.name, suffix)
            if name not in taken:
                self._register_utility(server, suffix, name, description, parameters, handler)
        self.rejected[server.name] = rejected
        for line in rejected:
            log.warning("MCP server '%s': tool not registered: %s", server.name, line)

    def _register(self, server: McpServer, tool: types.Tool, name: str) -> str | None:
        schema = {
            "name": name,
            "description": (tool.description or tool.title or f"{tool.name} ({server.name})"),
            "parameters": dict(tool.input_schema or {"type": "object", "properties": {}}),
        }
        try:
            self.registry.register(
                name,
                naming.toolset(server.name),
                schema,
                functools.partial(self._call_tool, server.name, tool.name),
                owner=OWNER_PREFIX + server.name,
                prepare=functools.partial(_consent, server.settings, tool.name),
                timeout=server.settings.timeout + server.settings.connect_timeout,
                aliases=[naming.legacy_name(server.name, tool.name)],
            )
        except ToolRejected as exc:
            return str(exc)
        return None

    def _register_utility(
        self,
        server: McpServer,
        suffix: str,
        name: str,
        description: str,
        parameters: dict[str, Any],
        handler: Callable[..., Awaitable[str]],
    ) -> None:
        try:
            self.registry.register(
                name,
                naming.toolset(server.name),
                {"name": name, "description": description, "parameters": parameters},
                handler,
                owner=OWNER_PREFIX + server.name,
                prepare=functools.partial(_consent, server.settings, suffix),
                timeout=server.settings.timeout + server.settings.connect_timeout,
            )
        except ToolRejected as exc:
            log.warning("MCP server '%s': %s not registered: %s", server.name, name, exc)

    def _utilities(self, server: McpServer) -> list[tuple[str, str, dict[str, Any], Any]]:
        caps = server.capabilities
        found: list[tuple[str, str, dict[str, Any], Any]] = []
        if caps is None:
            return found
        s = server.name
        empty: dict[str, Any] = {"type": "object", "properties": {}}
        if caps.resources is not None and server.settings.resources:
            found.append(
                (
                    "list_resources",
                    f"List the resources MCP server '{s}' offers",
                    empty,
                    functools.partial(self._utility, s, "list_resources"),
                )
            )
            found.append(
                (
                    "read_resource",
                    f"Read one resource of MCP server '{s}' by its URI",
                    {
                        "type": "object",
                        "properties": {"uri": {"type": "string", "description": "its URI"}},
                        "required": ["uri"],
                    },
                    functools.partial(self._utility, s, "read_resource"),
                )
            )
        if caps.prompts is not None and server.settings.prompts:
            found.append(
                (
                    "list_prompts",
                    f"List the prompts MCP server '{s}' offers",
                    empty,
                    functools.partial(self._utility, s, "list_prompts"),
                )
            )
            found.append(
                (
                    "get_prompt",
                    f"Get one prompt of MCP server '{s}', filled with its arguments",
                    {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "description": "the prompt's name"},
                            "arguments": {"type": "object", "description": "its arguments"},
                        },
                        "required": ["name"],
                    },
                    functools.partial(self._utility, s, "get_prompt"),
                )
            )
        return found

    # -- calls ----------------------------------------------------------------------------

    async def _call_tool(self, server_name: str, tool: str, args: dict[str, Any]) -> str:
        """The handler of every MCP tool: one ``tools/call`` as the tool's result string."""
        server = self.servers.get(server_name)
        if server is None:
            return results.error_json(f"MCP server '{server_name}' is no longer configured")
        try:
            result = await server.call(
                lambda session: session.call_tool(tool, args), server.settings.timeout
            )
        except McpUnavailable as exc:
            return results.error_json(str(exc))
        except Exception as exc:
            log.debug("MCP %s/%s failed", server_name, tool, exc_info=True)
            return results.error_json(f"MCP tool '{tool}' failed: {_text(exc)}")
        return results.tool_result(result, f"mcp:{server_name}/{tool}")

    async def _utility(self, server_name: str, what: str, args: dict[str, Any]) -> str:
        server = self.servers.get(server_name)
        if server is None:
            return results.error_json(f"MCP server '{server_name}' is no longer configured")
        ops: dict[str, tuple[Callable[[Any], Awaitable[Any]], Callable[[Any, str], str]]] = {
            "list_resources": (lambda s: s.list_resources(), results.resources_result),
            "read_resource": (lambda s: s.read_resource(str(args["uri"])), results.read_result),
            "list_prompts": (lambda s: s.list_prompts(), results.prompts_result),
            "get_prompt": (
                lambda s: s.get_prompt(
                    str(args["name"]),
                    {k: str(v) for k, v in (args.get("arguments") or {}).items()},
                ),
                results.prompt_result,
            ),
        }
        op, shape = ops[what]
        try:
            value = await server.call(op, server.settings.timeout)
        except McpUnavailable as exc:
            return results.error_json(str(exc))
        except Exception as exc:
            return results.error_json(f"MCP {what} failed: {_text(exc)}")
        return shape(value, f"mcp:{server_name}/{what}")

    def plugin_call(
        self,
        plugin: str,
        server: str,
        tool: str,
        args: Mapping[str, Any],
        timeout: float,
        session_id: str = "",
    ) -> str:
        """``ctx.call_mcp`` from a plugin thread: allowed by the plugin's ``mcp_allowlist``,
        then the whole tool pipeline (hooks, approvals, redaction, budget)."""
        allowed = self.allowlists.get(plugin, ())
        if not any(_allows(entry, server, tool) for entry in allowed):
            return results.error_json(
                f"plugin '{plugin}' may not call MCP server '{server}' tool '{tool}' "
                f"(plugins.entries.{plugin}.mcp_allowlist)"
            )
        if server not in self.servers:
            return results.error_json(f"no MCP server '{server}' is configured")
        return self.registry.call_sync(
            naming.tool_name(server, tool),
            dict(args),
            session_id=session_id,
            source="plugin",
            timeout=timeout,
        )

    # -- reports --------------------------------------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        """Every server's state (``mcp.list``)."""
        rows = []
        for name, server in sorted(self.servers.items()):
            row = server.describe()
            row["toolset"] = naming.toolset(name)
            row["session_id"] = self.session_servers.get(name)  # an editor's, for one session
            row["registered"] = len(self.registry.tools_of(OWNER_PREFIX + name))
            row["rejected"] = list(self.rejected.get(name, []))
            rows.append(row)
        return rows

    def tools(self, name: str) -> list[dict[str, Any]]:
        """A server's tools: each listed tool with its model-facing name, or why it is not
        offered (filtered out, rejected)."""
        server = self.servers[name]
        registered = set(self.registry.tools_of(OWNER_PREFIX + name))
        rows = []
        for tool in server.tools:
            full = naming.tool_name(name, tool.name)
            if not server.settings.wants_tool(tool.name):
                status = "filtered"
            elif full in registered:
                status = "registered"
            else:
                status = "rejected"
            rows.append(
                {
                    "tool": tool.name,
                    "name": full,
                    "status": status,
                    "description": tool.description or "",
                    "approval": server.settings.asks_for(tool.name),
                }
            )
        listed = {r["name"] for r in rows}
        for extra in sorted(registered - listed):  # the resource/prompt utility tools
            rows.append(
                {
                    "tool": extra.rsplit("__", 1)[-1],
                    "name": extra,
                    "status": "registered",
                    "description": "utility",
                    "approval": server.settings.asks_for(extra),
                }
            )
        return rows

    def status(self) -> dict[str, int]:
        """Counts for ``status``."""
        states = [s.state for s in self.servers.values() if s.settings.enabled]
        return {
            "mcp_servers": len(self.servers),
            "mcp_ready": states.count("ready"),
            "mcp_failed": states.count("failed"),
            "mcp_tools": sum(len(self.registry.tools_of(OWNER_PREFIX + n)) for n in self.servers),
        }


def session_server_name(name: str, session_id: str) -> str:
    """The pool's name of a session's server ``name``: suffixed with the end of the session id
    (two editors' servers of the same name in two sessions must not meet)."""
    return f"{name}.{session_id[-6:]}"


def _consent(settings: ServerSettings, tool: str, args: dict[str, Any], **_: Any) -> Consent:
    """The approval step of an MCP tool: ask unless the server's ``approval`` says not to."""
    if not settings.asks_for(tool):
        return Consent()
    return Consent(
        ask=f"MCP server '{settings.name}' tool '{tool}'",
        rule_key=f"mcp:{settings.name}:{tool}",
    )


def _allows(entry: str, server: str, tool: str) -> bool:
    if ":" in entry:
        glob_server, _, glob_tool = entry.partition(":")
        return fnmatch.fnmatchcase(server, glob_server) and fnmatch.fnmatchcase(tool, glob_tool)
    return fnmatch.fnmatchcase(server, entry)


def _text(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
