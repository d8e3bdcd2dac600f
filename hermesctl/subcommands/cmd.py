"""``hermesctl cmd "/plugins"`` (slash commands from scripts) and ``hermesctl completion SHELL``.

``cmd`` sends the line to ``command.run`` and prints the output; exit status 0 when the command
succeeded, 1 when it failed or is unknown. ``completion`` prints the script
``hermesctl.completion`` writes from the parser; its ``names`` lists the subcommands, plugin CLI
commands included while the daemon is up.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

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
    p.add_argument(
        "--install",
        action="store_true",
        help="write the script where the shell looks for it in your home (directories "
        "created) instead of printing it",
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


def completion(shell: str, socket_path: str | None = None, install: bool = False) -> int:
    """Print the completion script (or the names), or install it; needs no daemon."""
    if shell == "names":
        print("\n".join(subcommand_names(socket_path)))
        return EXIT_OK
    from hermesctl.cli import build_parser
    from hermesctl.completion import script

    text = script(shell, build_parser())
    if not install:
        sys.stdout.write(text)
        return EXIT_OK
    path, note = install_path(shell)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"hermesctl: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"wrote {path}{note}")
    return EXIT_OK


def install_path(shell: str) -> tuple[Path, str]:
    """Where a per-user completion script for ``shell`` goes, and what else it needs."""
    home = Path.home()
    data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local/share")
    conf = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    if shell == "bash":  # bash-completion loads it on first use of hermesctl
        return data / "bash-completion/completions/hermesctl", "; open a new shell"
    if shell == "fish":
        return conf / "fish/completions/hermesctl.fish", "; open a new shell"
    return home / ".zfunc/_hermesctl", (
        "; add to ~/.zshrc, before compinit: fpath=(~/.zfunc $fpath)"
    )
