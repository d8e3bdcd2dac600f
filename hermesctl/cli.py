"""The ``hermesctl`` command line: parses arguments, calls the daemon, prints for people or --json.

Exit status: 0 success, 1 the daemon answered with an error (or the command failed), 2 usage
error, 3 the daemon is not running. Commands live in small functions registered in
``COMMANDS``; each gets the parsed arguments and a connected client and returns an exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from hermesd.protocol import RpcError

from .client import Client, ConnectionClosed, DaemonNotRunning

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_RUNNING = 0, 1, 2, 3

Command = Callable[[argparse.Namespace, Client], int]
COMMANDS: dict[str, Command] = {}


def command(name: str) -> Callable[[Command], Command]:
    def deco(fn: Command) -> Command:
        COMMANDS[name] = fn
        return fn
    return deco


def emit_json(obj: Any) -> None:
    """Print one JSON document."""
    json.dump(obj, sys.stdout, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


@command("status")
def cmd_status(args: argparse.Namespace, client: Client) -> int:
    info = client.call("status")
    if args.json:
        emit_json(info)
        return EXIT_OK
    print(f"hermesd {info['version']} (protocol {info['protocol']}), pid {info['pid']}, "
          f"up {_duration(info['uptime_s'])}")
    print(f"  socket:      {info['socket']}{' (socket-activated)' if info.get('socket_activated') else ''}")
    print(f"  home:        {info['home']}")
    print(f"  connections: {info['connections']}")
    print(f"  sessions:    {info.get('sessions', 0)}")
    print(f"  plugins:     {info.get('plugins', 0)}")
    if info.get("model"):
        print(f"  model:       {info['model']}")
    for warning in info.get("config_warnings") or []:
        print(f"  warning:     {warning}")
    return EXIT_OK


@command("ping")
def cmd_ping(args: argparse.Namespace, client: Client) -> int:
    import time

    times = []
    for _ in range(args.count):
        t0 = time.perf_counter()
        client.call("ping")
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    stats = {
        "count": len(times),
        "min_ms": times[0],
        "p50_ms": times[len(times) // 2],
        "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))],
        "max_ms": times[-1],
        "mean_ms": sum(times) / len(times),
    }
    if args.json:
        emit_json(stats)
    else:
        print(f"{stats['count']} pings to {client.path}: min {stats['min_ms']:.3f} ms, "
              f"p50 {stats['p50_ms']:.3f} ms, p99 {stats['p99_ms']:.3f} ms, "
              f"max {stats['max_ms']:.3f} ms, mean {stats['mean_ms']:.3f} ms")
    return EXIT_OK


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


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
    sub.add_parser("status", help="show daemon status")
    p = sub.add_parser("ping", help="measure round-trip time to the daemon")
    p.add_argument("-n", "--count", type=int, default=10, help="number of pings (default 10)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hermesctl`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    if getattr(args, "count", 1) < 1:
        parser.error("--count must be at least 1")
    try:
        with Client.connect(args.socket) as client:
            return COMMANDS[args.command](args, client)
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
