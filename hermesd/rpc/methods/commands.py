"""RPC declarations of the command.* and cli.* methods (see hermesd.rpc.protocol)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare

declare(
    MethodSpec(
        "command.run",
        "Run a slash command (built-in or plugin); never sent to the model.",
        (
            Param("line", "str", required=True, doc='"/name args" or "name args"'),
            Param("session_id", "str", doc="the session the command is run in"),
        ),
        "{command, output, ok, action, session}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "commands.list",
        "Every active slash command (for /help and completion).",
        (),
        "{commands: [{name, aliases, description, args_hint, owner, builtin}]}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "cli.list",
        "Plugin CLI commands (hermesctl NAME ...).",
        (),
        "{commands: [{name, help, description, plugin}]}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "cli.run",
        "Run a plugin CLI command with argv; its output and exit status.",
        (Param("argv", "array", required=True, doc="the command name, then its arguments"),),
        "{stdout, stderr, exit_status}",
        access=Access.ANY,
    )
)
