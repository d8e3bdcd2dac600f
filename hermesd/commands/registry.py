"""Slash commands (``/name args`` inside a session) and plugin CLI commands (``hermesctl name``).

One `CommandRegistry` holds both. Built-in commands register through the same `register` call as
plugin ones, with owner ``builtin``; the daemon replaces their placeholder handlers when it wires
the real ones (`set_handler`). Rules (docs/hermes-compat.md §4): names are normalised
``lower().strip().lstrip("/").replace(" ", "-")``; a plugin may not take a built-in name or alias
(warning, skipped); when two plugins register one name the later one wins, with a warning, and
removing it (rollback, reload) brings the earlier one back. `run` calls a slash command's handler
with its raw argument string, off the event loop and bounded in time.

Every command declares who may run it, in the vocabulary of the RPC method table
(`OWNER`, `PERSON`, `ANY`, the words of ``hermesd.rpc.protocol.Access``): the built-ins in
`BUILTIN_COMMANDS`, a plugin's with
``access=`` (default ``owner``: a plugin command may change state, and only the owner may).
``command.run`` and ``cli.run`` enforce it before the handler runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from hermesd.runtime.workers import WorkerPool, WorkTimeout, call_bounded, shared_pool

log = logging.getLogger(__name__)

BUILTIN = "builtin"
DEFAULT_COMMAND_TIMEOUT = 30.0

Handler = Callable[..., Any]  # (raw_args) or, with takes_caller, (raw_args, caller)

#: Who may run a command, in the words of the RPC method table (``hermesd.rpc.protocol.Access``;
#: ``command.run`` and ``cli.run`` enforce them): the owner only, any client but a tool's
#: process, anyone admitted.
OWNER, PERSON, ANY = "owner", "person", "any"

#: Built-in slash commands: name, aliases, description, args hint, who may run it. The session
#: a command works on is the caller's (``command.run`` is ``Access.SESSION``); ``/model NAME``
#: is the owner's choice on top (the handler says so, ``/model`` alone shows it).
BUILTIN_COMMANDS: tuple[tuple[str, tuple[str, ...], str, str, str], ...] = (
    ("help", (), "Show available commands", "", ANY),
    ("new", ("reset",), "Start a new session", "[title]", ANY),
    ("plugins", (), "List installed plugins and their status", "", ANY),
    ("tools", (), "List available tools", "", ANY),
    ("skills", (), "List available skills", "", ANY),
    ("sessions", (), "List previous sessions", "", ANY),
    ("title", (), "Set a title for the current session", "[title]", ANY),
    ("model", (), "Show or switch the model", "[model]", ANY),
    ("status", (), "Show session and daemon status", "", ANY),
    ("approve", (), "Approve a pending dangerous command", "[session|always]", PERSON),
    ("deny", (), "Deny a pending dangerous command", "[reason]", PERSON),
    ("reload-plugins", (), "Reload all plugins", "", OWNER),  # as plugins.reload
    ("quit", ("exit",), "Leave the session", "", ANY),
    # the everyday chat commands of hermesd.commands.session_commands
    ("retry", (), "Send the last message again (its answer is undone)", "", ANY),
    ("undo", (), "Take the last turn out of the conversation (the record keeps it)", "", ANY),
    ("history", (), "Show this session's messages", "[N]", ANY),
    ("resume", (), "Switch to another session (default: the latest other one)", "[id]", ANY),
    ("usage", (), "Show this session's token usage", "", ANY),
    ("version", (), "Show hermesd's version", "", ANY),
    ("config", (), "Show the running configuration (read-only)", "[key]", ANY),
    (
        "compress",
        ("compact",),
        "Compact this session's context now (nothing is deleted)",
        "[focus]",
        ANY,
    ),
)


class CommandFailed(Exception):
    """A built-in command could not do what was asked; the message is for the user."""


def normalize_command_name(name: str) -> str:
    """The canonical form of a command name."""
    return name.lower().strip().lstrip("/").replace(" ", "-")


@dataclass
class SlashCommand:
    """A ``/name`` command."""

    name: str
    handler: Handler
    description: str = ""
    args_hint: str = ""
    aliases: tuple[str, ...] = ()
    owner: str = BUILTIN
    access: str = OWNER  # who may run it (`OWNER`, `PERSON` or `ANY`)
    takes_caller: bool = False  # a built-in's handler is called (raw_args, caller)


@dataclass
class CliCommand:
    """A ``hermesctl <name> …`` subcommand provided by a plugin, run inside the daemon."""

    name: str
    help: str
    setup_fn: Callable[[Any], Any]
    handler_fn: Callable[[Any], Any] | None = None
    description: str = ""
    owner: str = BUILTIN
    access: str = OWNER  # who may run it (`OWNER`, `PERSON` or `ANY`)


@dataclass
class _Table:
    """Registrations per name; the last one is active, removing it reveals the previous."""

    stacks: dict[str, list[Any]] = field(default_factory=dict)

    def active(self, name: str) -> Any:
        stack = self.stacks.get(name)
        return stack[-1] if stack else None

    def push(self, name: str, item: Any) -> None:
        stack = [e for e in self.stacks.get(name, []) if e.owner != item.owner]
        self.stacks[name] = [*stack, item]

    def drop_owner(self, owner: str) -> list[str]:
        removed = []
        for name, stack in list(self.stacks.items()):
            kept = [e for e in stack if e.owner != owner]
            if len(kept) != len(stack):
                removed.append(name)
            if kept:
                self.stacks[name] = kept
            else:
                del self.stacks[name]
        return removed


def _check_access(access: str) -> None:
    # a session-scoped command is command.run's business: a command itself declares who
    if access not in (OWNER, PERSON, ANY):
        raise ValueError(f"access must be 'owner', 'person' or 'any', not {access!r}")


def _not_wired(raw_args: str) -> str:
    return "This command is not available yet."


class CommandRegistry:
    """Slash commands and CLI commands, built-in and from plugins."""

    def __init__(
        self,
        *,
        pool: WorkerPool | None = None,
        timeout: float = DEFAULT_COMMAND_TIMEOUT,
        builtins: bool = True,
    ) -> None:
        self._pool = pool or shared_pool()
        self.timeout = timeout
        self._lock = threading.Lock()
        self._slash = _Table()
        self._cli = _Table()
        self._aliases: dict[str, str] = {}
        self._reserved_cli: set[str] = set()
        if builtins:
            for name, aliases, description, args_hint, access in BUILTIN_COMMANDS:
                self.register(
                    name,
                    _not_wired,
                    description=description,
                    args_hint=args_hint,
                    aliases=aliases,
                    access=access,
                )

    # -- slash commands ---------------------------------------------------------------------

    def is_builtin(self, name: str) -> bool:
        """True when ``name`` is a built-in command name or alias."""
        name = normalize_command_name(name)
        name = self._aliases.get(name, name)
        return any(e.owner == BUILTIN for e in self._slash.stacks.get(name, []))

    def register(
        self,
        name: str,
        handler: Handler,
        *,
        description: str = "",
        args_hint: str = "",
        aliases: Iterable[str] = (),
        owner: str = BUILTIN,
        access: str = OWNER,
        takes_caller: bool = False,
    ) -> SlashCommand | None:
        """Add a slash command; None (with a warning) when a plugin may not take the name.
        ``access`` says who may run it (default: the daemon's owner only); a handler that
        ``takes_caller`` is called with the `hermesd.caller.Caller` after the text."""
        _check_access(access)
        clean = normalize_command_name(name)
        if not clean:
            log.warning("Plugin '%s' tried to register a command with an empty name.", owner)
            return None
        command = SlashCommand(
            clean,
            handler,
            description,
            args_hint.strip(),
            tuple(normalize_command_name(a) for a in aliases),
            owner,
            access,
            takes_caller,
        )
        with self._lock:
            if owner != BUILTIN:
                if self.is_builtin(clean):
                    log.warning(
                        "Plugin '%s' tried to register command '/%s' which conflicts "
                        "with a built-in command. Skipping.",
                        owner,
                        clean,
                    )
                    return None
                previous = self._slash.active(clean)
                if previous is not None and previous.owner != owner:
                    log.warning(
                        "Plugin '%s' registered command '/%s', replacing the one from plugin '%s'",
                        owner,
                        clean,
                        previous.owner,
                    )
            self._slash.push(clean, command)
            for alias in command.aliases:
                self._aliases[alias] = clean
        return command

    def set_handler(self, name: str, handler: Handler) -> None:
        """Replace the handler of a built-in command (the daemon wires the real ones)."""
        command = self.lookup(name)
        if command is None or command.owner != BUILTIN:
            raise KeyError(f"no built-in command '/{normalize_command_name(name)}'")
        command.handler = handler

    def lookup(self, name: str) -> SlashCommand | None:
        """The active command for a name or alias."""
        clean = normalize_command_name(name)
        active: SlashCommand | None = self._slash.active(self._aliases.get(clean, clean))
        return active

    def slash_commands(self) -> list[SlashCommand]:
        """Active slash commands: built-ins first, then plugin ones, each in registration order."""
        with self._lock:
            active = [stack[-1] for stack in self._slash.stacks.values()]
        return sorted(active, key=lambda c: c.owner != BUILTIN)

    async def run(self, name: str, raw_args: str = "") -> str | None:
        """Run a slash command's handler off the loop, bounded in time; its text or None.

        A failing or slow handler yields a one-line message for the user (the traceback goes to
        the log). Raises KeyError for an unknown command.
        """
        command = self.lookup(name)
        if command is None:
            raise KeyError(f"unknown command '/{normalize_command_name(name)}'")
        try:
            value = await call_bounded(self._pool, command.handler, (raw_args,), {}, self.timeout)
        except WorkTimeout:
            log.warning("Command '/%s' timed out after %gs", command.name, self.timeout)
            return f"Command /{command.name} did not finish within {self.timeout:g}s."
        except Exception as exc:
            log.exception("Command '/%s' failed", command.name)
            return f"Command /{command.name} failed: {type(exc).__name__}: {exc}"
        return None if value is None else str(value)

    # -- CLI commands -----------------------------------------------------------------------

    def reserve_cli_names(self, names: Iterable[str]) -> None:
        """Names of hermesctl's own subcommands, which plugins may not take."""
        self._reserved_cli.update(names)

    def register_cli(
        self,
        name: str,
        help: str,
        setup_fn: Callable[[Any], Any],
        handler_fn: Callable[[Any], Any] | None = None,
        description: str = "",
        owner: str = BUILTIN,
        access: str = OWNER,
    ) -> CliCommand | None:
        """Add a CLI command; None (with a warning) when a plugin may not take the name.
        ``access`` says who may run it (default: the daemon's owner only)."""
        _check_access(access)
        clean = name.strip()
        if not clean or not callable(setup_fn):
            log.warning(
                "Plugin '%s' tried to register CLI command %r without a name or a "
                "callable setup_fn. Skipping.",
                owner,
                name,
            )
            return None
        with self._lock:
            if owner != BUILTIN and clean in self._reserved_cli:
                log.warning(
                    "Plugin '%s' tried to register CLI command '%s' which conflicts "
                    "with a built-in command. Skipping.",
                    owner,
                    clean,
                )
                return None
            previous = self._cli.active(clean)
            if previous is not None and previous.owner != owner:
                log.warning(
                    "Plugin '%s' registered CLI command '%s', replacing the one from plugin '%s'",
                    owner,
                    clean,
                    previous.owner,
                )
            command = CliCommand(clean, help, setup_fn, handler_fn, description, owner, access)
            self._cli.push(clean, command)
        return command

    def cli_command(self, name: str) -> CliCommand | None:
        """The active CLI command called ``name``."""
        active: CliCommand | None = self._cli.active(name.strip())
        return active

    def cli_commands(self) -> list[CliCommand]:
        """Active CLI commands in registration order."""
        with self._lock:
            return [stack[-1] for stack in self._cli.stacks.values()]

    # -- owners -----------------------------------------------------------------------------

    def unregister_owner(self, owner: str) -> tuple[list[str], list[str]]:
        """Remove everything ``owner`` registered; (slash names, CLI names) removed."""
        with self._lock:
            slash = self._slash.drop_owner(owner)
            cli = self._cli.drop_owner(owner)
            self._aliases = {a: n for a, n in self._aliases.items() if n in self._slash.stacks}
        return slash, cli
