"""Day-two commands: ``config``, ``reload``, ``logs``, ``doctor`` and ``stop``.

The daemon does the work (``config.*``, ``reload``, ``logs.tail``, ``doctor``, ``shutdown``): it
owns the schema config.yaml is validated against, the log records and the checks. This module
prints what it answers, for people or as --json.
"""

from __future__ import annotations

import argparse
import sys

from hermesctl.confirm import call_confirmed
from hermesctl.subcommands.base import (
    EXIT_ERROR,
    EXIT_OK,
    UsageError,
    command,
    emit_json,
    positive_int,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hermesctl.client import Client


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "config",
        help="show, get, set or check config.yaml",
        description="config.yaml through the daemon: validated against its schema, edited "
        "with comments kept, reloaded after a change.",
    )
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    shown = csub.add_parser("show", help="print config.yaml (secrets redacted)")
    shown.add_argument(
        "--effective", action="store_true", help="every setting's running value instead"
    )
    _json_flag(shown)
    got = csub.add_parser("get", help="print one setting's running value")
    got.add_argument("key", help="dotted name, e.g. model.default")
    _json_flag(got)
    put = csub.add_parser("set", help="set one setting (validated, comments kept) and reload")
    put.add_argument("key", help="dotted name, e.g. model.default")
    put.add_argument("value", help="the value, as YAML: 3, true, [a, b], text")
    _json_flag(put)
    _json_flag(csub.add_parser("path", help="print where config.yaml is"))
    _json_flag(csub.add_parser("check", help="validate config.yaml; every problem (exit 1)"))
    _json_flag(sub.add_parser("reload", help="reload config.yaml, .env and plugins"))
    p = sub.add_parser("logs", help="print the daemon's recent log records")
    p.add_argument("-n", "--lines", type=positive_int, default=100, help="how many (default 100)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    _json_flag(p)
    _json_flag(sub.add_parser("doctor", help="check config, model endpoint, plugins, sandbox"))
    _json_flag(sub.add_parser("stop", help="stop the daemon gracefully"))


def _json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def _text(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# --- config ----------------------------------------------------------------------------------


@command("config")
def cmd_config(args: argparse.Namespace, client: Client) -> int:
    action = args.config_command
    if action == "show":
        return _config_show(args, client)
    if action == "get":
        result = client.call("config.get", {"key": args.key})
        if _json(args):
            emit_json(result)
        elif isinstance(result["value"], dict):
            for dotted, value in result["value"].items():
                print(f"{dotted} = {_text(value)}")
        else:
            print(_text(result["value"]))
        return EXIT_OK
    if action == "set":
        return _config_set(args, client)
    if action == "path":
        path = client.call("config.show")["path"]
        emit_json({"path": path}) if _json(args) else print(path)
        return EXIT_OK
    if action == "check":
        result = client.call("config.check")
        if _json(args):
            emit_json(result)
        elif result["ok"]:
            print(f"{result['path']}: OK")
        for warning in [] if _json(args) else result["warnings"]:
            print(f"  warning: {warning}")
        for problem in [] if _json(args) else result["problems"]:
            print(f"  error: {problem}")
        if not result["ok"] and not _json(args):
            print(f"{result['path']}: {len(result['problems'])} problem(s)")
        return EXIT_OK if result["ok"] else EXIT_ERROR
    raise UsageError(f"unknown config action {action}")


def _config_show(args: argparse.Namespace, client: Client) -> int:
    result = client.call("config.show")
    if _json(args):
        emit_json(result)
    elif args.effective:
        for dotted, value in result["settings"].items():
            print(f"{dotted} = {_text(value)}")
    elif result["exists"]:
        sys.stdout.write(result["text"] if result["text"].endswith("\n") else result["text"] + "\n")
    else:
        print(f"# {result['path']} does not exist: every setting has its default")
    return EXIT_OK


def _config_set(args: argparse.Namespace, client: Client) -> int:
    params = {"key": args.key, "value": args.value}
    result = call_confirmed(client, "config.set", params, timeout=300)
    if _json(args):
        emit_json(result)
        return EXIT_OK if result["reload"]["ok"] else EXIT_ERROR
    print(f"{result['key']} = {_text(result['value'])} (in {result['path']})")
    status = _print_reload(result["reload"])
    if result.get("restart_needed"):
        print(f"note: {result['key']} takes effect when hermesd restarts (hermesctl stop)")
    return status


# --- reload, logs, doctor, stop --------------------------------------------------------------


def _print_reload(outcome: dict[str, Any]) -> int:
    if outcome["config_problems"]:
        print("Configuration not reloaded (the running one stays):")
        for problem in outcome["config_problems"]:
            print(f"  ✗ {problem}")
    else:
        print("Configuration reloaded.")
    for warning in outcome["config_warnings"]:
        print(f"  warning: {warning}")
    print(outcome["plugins"])
    return EXIT_OK if outcome["ok"] else EXIT_ERROR


@command("reload")
def cmd_reload(args: argparse.Namespace, client: Client) -> int:
    outcome = client.call("reload", timeout=300)
    if _json(args):
        emit_json(outcome)
        return EXIT_OK if outcome["ok"] else EXIT_ERROR
    return _print_reload(outcome)


def format_record(entry: dict[str, Any]) -> str:
    """One log record as the daemon writes it to stderr."""
    import time

    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(entry["time"]))
    return f"{when} {entry['level']} {entry['logger']}: {entry['message']}"


@command("logs")
def cmd_logs(args: argparse.Namespace, client: Client) -> int:
    from hermesctl.client import ConnectionClosed

    result = client.call("logs.tail", {"lines": args.lines, "follow": args.follow})
    emit = _emit_record(_json(args))
    for entry in result["records"]:
        emit(entry)
    if not args.follow:
        return EXIT_OK
    try:
        while True:
            note = client.next_notification(timeout=None)
            if note is not None and note.method == "log.record":
                emit(note.params[0])
    except ConnectionClosed:
        print("hermesctl: hermesd closed the connection (stopped?)", file=sys.stderr)
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_OK


def _emit_record(as_json: bool) -> Any:
    import json

    def emit(entry: dict[str, Any]) -> None:
        line = json.dumps(entry, ensure_ascii=False) if as_json else format_record(entry)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    return emit


_MARKS = {"ok": "✓", "warn": "!", "fail": "✗"}


@command("doctor")
def cmd_doctor(args: argparse.Namespace, client: Client) -> int:
    result = client.call("doctor", timeout=60)
    checks = [
        {"name": "connection", "status": "ok", "detail": f"hermesd answers on {client.path}"},
        *result["checks"],
    ]
    if _json(args):
        emit_json({"ok": result["ok"], "checks": checks})
    else:
        width = max(len(c["name"]) for c in checks)
        for check in checks:
            print(f"{_MARKS.get(check['status'], '?')} {check['name']:<{width}}  {check['detail']}")
    return EXIT_OK if result["ok"] else EXIT_ERROR


@command("stop")
def cmd_stop(args: argparse.Namespace, client: Client) -> int:
    import time

    from hermesctl.client import ConnectionClosed
    from hermesd.rpc.protocol import RpcError

    status = client.call("status")
    client.call("shutdown")
    deadline = time.monotonic() + 120
    try:  # the daemon closes the connection once it has stopped
        while time.monotonic() < deadline:
            client.next_notification(timeout=deadline - time.monotonic())
        print(f"hermesctl: hermesd (pid {status['pid']}) is still stopping", file=sys.stderr)
        return EXIT_ERROR
    except (ConnectionClosed, RpcError):
        pass
    if _json(args):
        emit_json({"stopped": True, "pid": status["pid"]})
        return EXIT_OK
    print(f"hermesd (pid {status['pid']}) stopped.")
    if status.get("socket_activated"):
        print(
            "  It was socket-activated: the next connection starts it again "
            "(systemctl stop hermesd.socket hermesd.service stops both)."
        )
    return EXIT_OK
