"""The ``hermesctl`` command line: parses arguments, calls the daemon, prints for people or --json.

Exit status: 0 success, 1 the daemon answered with an error (or the command failed), 2 usage
error, 3 the daemon is not running. Each area's commands live in a module of
``hermesctl.commands`` that adds its sub-parsers (``add_parsers``) and registers one handler
per command name in ``COMMANDS`` (see ``hermesctl.commands.base``).
"""

from __future__ import annotations

import argparse
import sys

from hermesd.protocol import RpcError

from .client import Client, ConnectionClosed, DaemonNotRunning
from .commands import AREAS
from .commands.base import (COMMANDS, EXIT_ERROR, EXIT_NOT_RUNNING, EXIT_USAGE, UsageError,
                            command, emit_json)

__all__ = ["main", "build_parser", "COMMANDS", "command", "emit_json"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermesctl",
        description="Talk to the hermesd agent daemon.",
        epilog="Exit status: 0 ok, 1 error, 2 usage, 3 daemon not running.",
    )
    parser.add_argument("--socket", help="daemon socket (default: as hermesd finds it; "
                        "HERMES_SOCKET overrides)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for area in AREAS:
        area.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hermesctl`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    try:
        with Client.connect(args.socket) as client:
            return COMMANDS[args.command](args, client)
    except UsageError as exc:
        parser.error(str(exc))
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
