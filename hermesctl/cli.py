"""The ``hermesctl`` command line: parses arguments, calls the daemon, prints for people or --json.

Exit status: 0 success, 1 the daemon answered with an error (or the command failed), 2 usage
error, 3 the daemon is not running. Each area's commands live in a module of
``hermesctl.subcommands`` that adds its sub-parsers (``add_parsers``) and registers one handler
per command name in ``COMMANDS`` (see ``hermesctl.subcommands.base``).
"""

from __future__ import annotations

import argparse
import os
import sys

from hermesctl.client import Client, ConnectionClosed, DaemonNotRunning
from hermesctl.subcommands import INDEX, areas
from hermesctl.subcommands.base import (
    COMMANDS,
    EXIT_ERROR,
    EXIT_NOT_RUNNING,
    EXIT_USAGE,
    UsageError,
    command,
    emit_json,
)
from hermesd.rpc.protocol import Codes, RpcError

__all__ = ["COMMANDS", "build_parser", "command", "emit_json", "main"]


def _terminal_width() -> int:
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        stdout = sys.__stdout__
        return os.get_terminal_size(stdout.fileno()).columns if stdout else 80
    except (AttributeError, OSError, ValueError):
        return 80


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Sized once per process: the stock formatter imports shutil and asks the terminal for
    its size for every argument declared."""

    width = 0

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        if not _Formatter.width:
            _Formatter.width = max(_terminal_width() - 2, 40)
        super().__init__(prog, indent_increment, max_help_position, width or _Formatter.width)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose sub-parsers share the sized formatter."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


def build_parser(word: str | None = None) -> argparse.ArgumentParser:
    """The parser for one command word (only its areas are imported), or for all of them."""
    parser = _Parser(
        prog="hermesctl",
        description="Talk to the hermesd agent daemon.",
        epilog="Exit status: 0 ok, 1 error, 2 usage, 3 daemon not running.",
    )
    parser.add_argument(
        "--socket", help="daemon socket (default: as hermesd finds it; HERMES_SOCKET overrides)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    import hermesd

    parser.add_argument("--version", action="version", version=f"hermesctl {hermesd.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for area in areas(word):
        area.add_parsers(sub)
    _json_after_any_command(parser)
    return parser


# --- a CLI that behaves like git's and docker's (issue 19) -------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return [
        choice
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for choice in dict.fromkeys(action.choices.values())
    ]


def _json_after_any_command(parser: argparse.ArgumentParser) -> None:
    """``hermesctl sessions list --json`` as well as ``hermesctl --json sessions list``."""
    for child in _subparsers(parser):
        if "--json" not in child._option_string_actions:
            child.add_argument(
                "--json",
                action="store_true",
                default=argparse.SUPPRESS,
                help="machine-readable output",
            )
        _json_after_any_command(child)


def command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``argv`` names, so usage errors show its usage."""
    current = parser
    for word in argv:
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction) and word in action.choices:
                current = action.choices[word]
                break
    return current


def _quiet_broken_pipe() -> int:
    """stdout's reader went away (``| head``): no traceback, and none at exit either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141  # as a shell reports a command SIGPIPE ended


def _split_globals(argv: list[str]) -> tuple[str | None, int]:
    """The --socket value and the index of the first word that is not a global option."""
    socket_path, i = None, 0
    while i < len(argv):
        word = argv[i]
        if word == "--socket" and i + 1 < len(argv):
            socket_path, i = argv[i + 1], i + 2
        elif word.startswith("--socket="):
            socket_path, i = word.split("=", 1)[1], i + 1
        elif word == "--json":
            i += 1
        else:
            break
    return socket_path, i


def plugin_cli_commands(socket_path: str | None, timeout: float = 2.0) -> list[dict[str, str]]:
    """The daemon's plugin CLI commands; empty when it is not reachable."""
    try:
        with Client.connect(socket_path, timeout=timeout) as client:
            commands: list[dict[str, str]] = client.call("cli.list", timeout=timeout)["commands"]
            return commands
    except (DaemonNotRunning, RpcError, ConnectionClosed, TimeoutError, OSError):
        return []


def _forward(socket_path: str | None, argv: list[str], known: list[str]) -> int:
    """``hermesctl NAME args…`` for a plugin CLI command: run it in the daemon, print, exit."""
    try:
        with Client.connect(socket_path) as client:
            result = client.call("cli.run", {"argv": argv})
    except DaemonNotRunning as exc:
        print(
            f"hermesctl: unknown command '{argv[0]}' (plugin commands need the daemon: {exc})",
            file=sys.stderr,
        )
        return EXIT_NOT_RUNNING
    except RpcError as exc:
        if exc.code == Codes.NOT_FOUND:
            choices = ", ".join(known + list((exc.data or {}).get("available") or []))
            print(
                f"usage: hermesctl [-h] [--socket SOCKET] [--json] COMMAND ...\n"
                f"hermesctl: error: unknown command '{argv[0]}' (choose from {choices})",
                file=sys.stderr,
            )
            return EXIT_USAGE
        print(f"hermesctl: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    except (ConnectionClosed, TimeoutError) as exc:
        print(f"hermesctl: {exc}", file=sys.stderr)
        return EXIT_ERROR
    sys.stdout.write(result["stdout"])
    sys.stdout.flush()
    sys.stderr.write(result["stderr"])
    return int(result["exit_status"])


def _plugin_epilog(commands: list[dict[str, str]]) -> str:
    width = max(len(c["name"]) for c in commands)
    lines = [
        f"  {c['name']:<{width}}  {c.get('help') or c.get('description') or ''}".rstrip()
        for c in commands
    ]
    return "plugin commands (from the daemon):\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hermesctl`` command."""
    try:
        status = _main(argv)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        return _quiet_broken_pipe()


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    known = list(INDEX)
    socket_path, first = _split_globals(argv)
    word = argv[first] if first < len(argv) else None
    if word == "__complete":  # the completion scripts' hook (hermesctl.completion)
        from hermesctl.completion import hook

        return hook(argv[first + 1 :], socket_path)
    if word is not None and not word.startswith("-") and word not in known:
        return _forward(socket_path, argv[first:], known)
    parser = build_parser(word if word in INDEX else None)
    if word in ("-h", "--help"):
        extra = plugin_cli_commands(socket_path)
        if extra:
            parser.epilog = f"{_plugin_epilog(extra)}\n\n{parser.epilog}"
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the (sub)command's parser, so its usage is the one shown
        command_parser(parser, argv[first:]).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "completion":
        from hermesctl.subcommands.cmd import completion

        return completion(args.shell, args.socket, args.install)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    try:
        with Client.connect(args.socket) as client:
            return COMMANDS[args.command](args, client)
    except UsageError as exc:
        command_parser(parser, argv[first:]).error(str(exc))
    except DaemonNotRunning as exc:
        print(f"hermesctl: {exc}", file=sys.stderr)
        return EXIT_NOT_RUNNING
    except RpcError as exc:
        print(f"hermesctl: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    except (ConnectionClosed, TimeoutError) as exc:
        print(f"hermesctl: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
