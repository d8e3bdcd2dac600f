"""The ``command.run``, ``commands.list``, ``cli.list`` and ``cli.run`` methods.

Owns what a slash command means to the daemon: parsing ``/name args`` (or ``name args``), the
real handlers of the built-in commands (registered as placeholders in `CommandRegistry`, wired
here with `set_handler`, so built-ins and plugin commands share one registry and one call path),
and running plugin commands with the calling session as ``current_session`` — so a handler's
``ctx.dispatch_tool`` goes through the tool pipeline for that session. Commands never reach the
model. ``/new`` is done server-side for the calling connection (the result carries the new
session). Plugin CLI commands run through `hermesd.commands.cli_runner`.

``/approve`` and ``/deny`` are answered by the approvals service, handed in as ``approvals``;
without one both print ``No pending approvals.``.

A command runs for the peer that asked: its ``session_id`` must be one the peer may use
(``command.run`` is ``Access.SESSION``, checked at the edge), ``/sessions`` lists the peer's
own, and each command's declared access (`SlashCommand.access`, `CliCommand.access`: the
built-ins' in `BUILTIN_COMMANDS`, a plugin's ``owner`` unless it says otherwise) is enforced
here, once, before its handler runs. ``/model NAME`` chooses what the daemon's key pays for:
the owner's choice, as ``session.create``'s ``model`` is.
"""

from __future__ import annotations

import argparse
import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from hermesd.agent.session_service import SessionService
from hermesd.caller import Caller
from hermesd.commands.cli_runner import install_output_router, run_cli_command
from hermesd.commands.registry import (
    BUILTIN,
    CommandFailed,
    SlashCommand,
    normalize_command_name,
)
from hermesd.commands.session_commands import SessionCommands
from hermesd.model.fastjson import valid_text
from hermesd.plugins.host import PluginHost
from hermesd.rpc.access import denied, refusal
from hermesd.rpc.connection import Call, Router
from hermesd.rpc.humanize import duration
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.runtime.session import current_session
from hermesd.runtime.workers import WorkTimeout, call_bounded
from hermesd.store.dbfile import SessionNotFound

log = logging.getLogger(__name__)

DEFAULT_CLI_TIMEOUT = 120.0

#: ``(verb, session_id, raw_args, caller) -> text``: verb is "approve" or "deny".
ApprovalHandler = Callable[[str, str, str, Caller], Awaitable[str]]


#: commands ``pre_command`` is not fired for: a slow plugin must not delay the escape hatches
_NOT_OBSERVED = frozenset({"stop", "approve", "deny"})


@dataclass
class _Outcome:
    """What one ``command.run`` call produced besides its text."""

    call: Call
    session_id: str
    ok: bool = True
    action: str | None = None
    session: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


_outcome: contextvars.ContextVar[_Outcome] = contextvars.ContextVar("hermesd_command_outcome")


def parse_line(line: str) -> tuple[str, str]:
    """``"/title My chat"`` → ``("title", "My chat")``; the leading slash is optional."""
    text = line.strip()
    text = text.removeprefix("/")
    name, _, rest = text.partition(" ")
    return normalize_command_name(name), rest.strip()


class CommandService:
    """Slash commands and plugin CLI commands over RPC."""

    def __init__(
        self,
        host: PluginHost,
        sessions: SessionService,
        *,
        status: Callable[[], dict[str, Any]],
        reload_plugins: Callable[[], Awaitable[dict[str, Any]]],
        timeout: float,
        cli_timeout: float = DEFAULT_CLI_TIMEOUT,
        approvals: ApprovalHandler | None = None,
        config_view: Callable[[], dict[str, Any]] | None = None,
        usage_report: Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        """``approvals`` answers ``/approve`` and ``/deny`` (the approvals service);
        ``config_view`` gives the running settings for ``/config`` (secrets hidden);
        ``usage_report`` is ``usage.get``, for ``/usage``."""
        self.host = host
        self.registry = host.commands
        self.sessions = sessions
        self._status = status
        self._reload_plugins = reload_plugins
        self.registry.timeout = timeout
        self.cli_timeout = cli_timeout
        self.approval_handler = approvals
        self.session_commands = SessionCommands(sessions, status, config_view, usage_report)
        install_output_router()  # before plugins load, so handlers see the routing streams
        for name, handler in self._builtin_handlers().items():
            self.registry.set_handler(name, handler)

    # --- service protocol --------------------------------------------------------------------

    def bind(self, router: Router) -> None:
        guard = self.host.gate.guard  # each waits while a plugin reload runs
        router.bind("command.run", guard(self.rpc_command_run))
        router.bind("commands.list", guard(self.rpc_commands_list))
        router.bind("cli.list", guard(self.rpc_cli_list))
        router.bind("cli.run", guard(self.rpc_cli_run))

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {
            "commands": len(self.registry.slash_commands()),
            "cli_commands": len(self.registry.cli_commands()),
        }

    def reload(self, cfg: Any) -> None:
        self.registry.timeout = float(cfg.get("commands.timeout"))
        self.cli_timeout = float(cfg.get("commands.cli_timeout"))

    # --- methods -----------------------------------------------------------------------------

    async def rpc_command_run(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        name, raw_args = parse_line(p["line"])
        if not name:
            raise RpcError(
                Codes.INVALID_PARAMS, "command.run: the line has no command name", {"param": "line"}
            )
        command = self.registry.lookup(name)
        if command is None:
            raise RpcError(
                Codes.NOT_FOUND,
                f"Unknown command: /{name}. Type /help for the list.",
                {"command": name},
            )
        _check_access(f"/{command.name}", command.access, call.caller)
        outcome = _Outcome(call, p.get("session_id") or "")
        hooks = self.host.hooks
        if hooks.has("pre_command") and command.name not in _NOT_OBSERVED:  # issue 32
            await hooks.invoke(
                "pre_command",
                surface="cli",
                command=command.name,
                alias_used=name if name != command.name else None,
                args_raw=raw_args,
                session_key=outcome.session_id or None,
                platform="cli",
            )
        token = _outcome.set(outcome)
        session_token = current_session.set(outcome.session_id)
        try:
            output = await self._invoke(command, raw_args, outcome)
        finally:
            current_session.reset(session_token)
            _outcome.reset(token)
        return {
            "command": command.name,
            "output": valid_text(output),
            "ok": outcome.ok,
            "action": outcome.action,
            "session": outcome.session,
            **outcome.extra,
        }

    async def _invoke(self, command: SlashCommand, raw_args: str, outcome: _Outcome) -> str:
        timeout = self.registry.timeout
        try:
            value = await call_bounded(
                self.host.pool,
                command.handler,
                (raw_args, outcome.call.caller) if command.takes_caller else (raw_args,),
                {},
                timeout,
                f"command:{command.owner}",
            )
        except WorkTimeout:
            log.warning(
                "Command '/%s' (owner %s) did not finish within %gs",
                command.name,
                command.owner,
                timeout,
            )
            outcome.ok = False
            return f"Command /{command.name} did not finish within {timeout:g}s."
        except CommandFailed as exc:
            outcome.ok = False
            return str(exc)
        except RpcError:
            raise
        except Exception as exc:
            outcome.ok = False
            if command.owner == BUILTIN:
                log.exception("Built-in command '/%s' failed", command.name)
                return f"Command /{command.name} failed: {type(exc).__name__}: {exc}"
            log.exception("Plugin command '/%s' (plugin '%s') raised", command.name, command.owner)
            return f"Plugin command error: {exc}"
        return "" if value is None else str(value)

    def rpc_commands_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return {
            "commands": [
                {
                    "name": c.name,
                    "aliases": list(c.aliases),
                    "description": c.description,
                    "args_hint": c.args_hint,
                    "owner": c.owner,
                    "builtin": c.owner == BUILTIN,
                }
                for c in self.registry.slash_commands()
            ]
        }

    def rpc_cli_list(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return {
            "commands": [
                {"name": c.name, "help": c.help, "description": c.description, "plugin": c.owner}
                for c in self.registry.cli_commands()
            ]
        }

    async def rpc_cli_run(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        argv = p["argv"]
        if not argv or not all(isinstance(a, str) for a in argv):
            raise RpcError(
                Codes.INVALID_PARAMS,
                "cli.run: argv must be a non-empty array of strings, the command name first",
                {"param": "argv"},
            )
        command = self.registry.cli_command(argv[0])
        if command is None:
            raise RpcError(
                Codes.NOT_FOUND,
                f"no plugin CLI command '{argv[0]}'",
                {"command": argv[0], "available": [c.name for c in self.registry.cli_commands()]},
            )
        _check_access(f"hermesctl {command.name}", command.access, call.caller)
        result = await run_cli_command(self.host.pool, command, list(argv[1:]), self.cli_timeout)
        return result.as_dict()

    # --- built-in commands -------------------------------------------------------------------

    def _builtin_handlers(self) -> dict[str, Callable[[str], Awaitable[str]]]:
        return {
            "help": self._help,
            "new": self._new,
            "plugins": self._plugins,
            "tools": self._tools,
            "skills": self._skills,
            "sessions": self._sessions,
            "title": self._title,
            "model": self._model,
            "status": self._status_cmd,
            "approve": self._approve,
            "deny": self._deny,
            "reload-plugins": self._reload,
            "quit": self._quit,
            **{
                name: functools.partial(self._in_session, handler)
                for name, handler in self.session_commands.handlers().items()
            },
        }

    async def _in_session(self, handler: Any, raw_args: str) -> str:
        text: str = await handler(_outcome.get(), raw_args)
        return text

    def _session_required(self, what: str) -> str:
        sid = _outcome.get().session_id
        if not sid:
            raise CommandFailed(
                f"/{what} needs a session: pass session_id (hermesctl cmd "
                "--session ID) or use it inside hermesctl chat."
            )
        return sid

    async def _help(self, raw_args: str) -> str:
        commands = self.registry.slash_commands()
        lines = ["Commands:"]
        for c in commands:
            if c.owner == BUILTIN:
                lines.append(_help_line(c))
        plugin = [c for c in commands if c.owner != BUILTIN]
        if plugin:
            lines += ["", "Plugin commands:", *(_help_line(c) for c in plugin)]
        return "\n".join(lines)

    async def _new(self, raw_args: str) -> str:
        outcome = _outcome.get()
        params = {"session_id": outcome.session_id} if outcome.session_id else {}
        session = await self.sessions.rpc_reset(outcome.call, params)
        if raw_args:
            session = await self.sessions.rpc_rename(
                outcome.call, {"session_id": session["id"], "title": raw_args}
            )
        outcome.action, outcome.session = "session", session
        return f"New session {session['id']} started."

    async def _plugins(self, raw_args: str) -> str:
        return self.host.plugins.listing_text()

    async def _tools(self, raw_args: str) -> str:
        await self.host.tools.refresh_checks()
        tools = self.host.tools.describe()
        if not tools:
            return "No tools registered."
        lines = [f"Tools ({len(tools)}):"]
        for t in tools:
            hidden = "" if t["available"] else " [unavailable]"
            lines.append(
                f"  {t['name']} ({t['toolset']}){hidden} — "
                f"{_first_sentence(t['description'])}".rstrip(" —")
            )
        return "\n".join(lines)

    async def _skills(self, raw_args: str) -> str:
        skills = self.host.skills.describe()
        if not skills:
            return "No skills installed."
        lines = [f"Skills ({len(skills)}):"]
        lines += [f"  {s['name']} — {s.get('description') or ''}".rstrip(" —") for s in skills]
        return "\n".join(lines)

    async def _sessions(self, raw_args: str) -> str:
        store = self.sessions.store
        scope = _outcome.get().call.caller.scope_uid
        page = await store.run(store.sessions.page, 20, owner_uid=scope)
        sessions = page["sessions"]
        if not sessions:
            return "No sessions yet."
        current = _outcome.get().session_id
        lines = [f"Sessions ({len(sessions)} most recent):"]
        for s in sessions:
            mark = "*" if s["id"] == current else " "
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s["updated_at"]))
            lines.append(
                f" {mark}{s['id']}  {when}  {s['message_count']} messages  "
                f"{s['title'] or '(untitled)'}"
            )
        return "\n".join(lines)

    async def _title(self, raw_args: str) -> str:
        outcome = _outcome.get()
        sid = self._session_required("title")
        if not raw_args:
            session = await self.sessions.rpc_get(outcome.call, {"session_id": sid})
            return f"Title: {session['title'] or '(untitled)'}"
        session = await self.sessions.rpc_rename(
            outcome.call, {"session_id": sid, "title": raw_args}
        )
        outcome.session = session
        return f"Title set to: {session['title']}"

    async def _model(self, raw_args: str) -> str:
        outcome = _outcome.get()
        default = self.sessions.agent.client.settings.model or "(not configured)"
        if not outcome.session_id:
            if raw_args:
                raise CommandFailed("/model NAME sets the model of a session: pass session_id.")
            return f"Model: {default} (default)"
        store = self.sessions.store
        if not raw_args:
            session = await self.sessions.rpc_get(outcome.call, {"session_id": outcome.session_id})
            return f"Model: {session['model'] or default}"
        if not outcome.call.caller.is_owner:
            raise RpcError(
                Codes.PERMISSION_DENIED,
                "/model NAME may only be run by the daemon's owner",
                {"peer_uid": outcome.call.caller.uid, "command": "model"},
            )
        try:
            info = await store.run(store.sessions.set_model, outcome.session_id, raw_args)
        except SessionNotFound:
            raise CommandFailed(f"no session '{outcome.session_id}'") from None
        outcome.session = dict(info)
        return f"Model set to {raw_args} for this session."

    async def _status_cmd(self, raw_args: str) -> str:
        info = self._status()
        lines = [
            f"hermesd {info['version']} (pid {info['pid']}), up {duration(info['uptime_s'])}",
            f"  model:    {info.get('model') or '(not configured)'}",
            f"  sessions: {info.get('sessions', 0)} ({info.get('turns_running', 0)} turns running)",
            f"  plugins:  {info.get('plugins', 0)} loaded, {info.get('tools', 0)} tools",
        ]
        sid = _outcome.get().session_id
        if sid:
            session = await self.sessions.rpc_get(_outcome.get().call, {"session_id": sid})
            lines.append(
                f"  session:  {sid} — {session['title'] or '(untitled)'}, "
                f"{session['message_count']} messages, "
                f"{session['total_tokens']} tokens"
            )
        return "\n".join(lines)

    async def _approval(self, verb: str, raw_args: str) -> str:
        if self.approval_handler is None:
            return "No pending approvals."
        outcome = _outcome.get()
        return await self.approval_handler(verb, outcome.session_id, raw_args, outcome.call.caller)

    async def _approve(self, raw_args: str) -> str:
        return await self._approval("approve", raw_args)

    async def _deny(self, raw_args: str) -> str:
        return await self._approval("deny", raw_args)

    async def _reload(self, raw_args: str) -> str:
        result = await self._reload_plugins()
        text: str = result["summary"]
        return text

    async def _quit(self, raw_args: str) -> str:
        _outcome.get().action = "quit"
        return "/quit is handled by the client: in hermesctl chat it leaves the session."


def _check_access(what: str, access: str, caller: Caller) -> None:
    """Refuse ``caller`` a command whose declared access it does not meet."""
    if refusal(access, caller) is not None:
        raise denied(what, caller, access, verb="run")


def hermesctl_subcommands() -> list[str]:
    """hermesctl's own subcommand names, which plugin CLI commands may not take."""
    try:
        from hermesctl.cli import build_parser
    except ImportError:  # the client is not installed next to the daemon
        return list(_HERMESCTL_FALLBACK)
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return sorted(action.choices)
    return list(_HERMESCTL_FALLBACK)


_HERMESCTL_FALLBACK = (
    "status",
    "ping",
    "chat",
    "sessions",
    "plugins",
    "tools",
    "skills",
    "cmd",
    "completion",
    "help",
    "cron",
    "mcp",
)


def _help_line(c: SlashCommand) -> str:
    usage = f"/{c.name}" + (f" {c.args_hint}" if c.args_hint else "")
    aliases = "".join(f" (alias /{a})" for a in c.aliases)
    return f"  {usage:<26} {c.description}{aliases}"


def _first_sentence(text: str, limit: int = 72) -> str:
    text = " ".join(text.split())
    end = text.find(". ")
    text = text[: end + 1] if end != -1 else text
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
