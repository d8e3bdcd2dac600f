"""``hermesctl cmd "/plugins"`` (slash commands from scripts) and ``hermesctl completion SHELL``.

``cmd`` sends the line to ``command.run`` and prints the output; exit status 0 when the command
succeeded, 1 when it failed or is unknown. ``completion`` prints the script
``hermesctl.completion`` writes from the parser; its ``names`` lists the subcommands, plugin CLI
commands included while the daemon is up.
"""

from __future__ import annotations

import argparse
import sys

from hermesctl.subcommands.base import EXIT_ERROR, EXIT_OK, command, emit_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hermesctl.client import Client


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cmd", help="run a slash command (/help, /plugins, …) and print its output")
    p.add_argument("line", nargs="+", help='the command, e.g. "/plugins" or: title My chat')
    p.add_argument("--session", help="session the command runs in (for /title, /model, …)")
    p.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh, fish)")
    p.add_argument(
        "shell",
        choices=("bash", "zsh", "fish", "names"),
        help="the shell; 'names' lists subcommand names, one per line",
    )


@command("cmd")
def cmd_cmd(args: argparse.Namespace, client: Client) -> int:
    params: dict[str, Any] = {"line": " ".join(args.line)}
    if args.session:
        params["session_id"] = args.session
    result: dict[str, Any] = client.call("command.run", params)
    if getattr(args, "json", False):
        emit_json(result)
    elif result.get("output"):
        out = sys.stdout if result.get("ok", True) else sys.stderr
        print(result["output"], file=out)
    return EXIT_OK if result.get("ok", True) else EXIT_ERROR


def subcommand_names(socket_path: str | None = None) -> list[str]:
    """hermesctl's own subcommands, then the daemon's plugin CLI commands when it is up."""
    from hermesctl.cli import build_parser, plugin_cli_commands

    names: list[str] = []
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            names = list(action.choices)
    return names + [c["name"] for c in plugin_cli_commands(socket_path) if c["name"] not in names]


def completion(shell: str, socket_path: str | None = None) -> int:
    """Print the completion script (or the names); needs no daemon."""
    if shell == "names":
        print("\n".join(subcommand_names(socket_path)))
        return EXIT_OK
    from hermesctl.cli import build_parser
    from hermesctl.completion import script

    sys.stdout.write(script(shell, build_parser()))
    return EXIT_OK
