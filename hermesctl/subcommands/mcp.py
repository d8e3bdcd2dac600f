"""``hermesctl mcp list|tools NAME|restart NAME|reload|logs NAME``: the daemon's MCP servers.

Thin wrappers over the ``mcp.*`` methods (docs/mcp.md). Text a server supplied (its errors,
tool descriptions, stderr) is shown with control characters made visible, so a server cannot
drive the terminal.
"""

from __future__ import annotations

import argparse
import sys

from hermesctl.approval_prompt import visible
from hermesctl.client import Client
from hermesctl.subcommands.base import COMMANDS, EXIT_ERROR, EXIT_OK, emit_json, table

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up
    from typing import Any


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("mcp", help="MCP servers: state, tools, restart, reload, logs")
    s = p.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str, named: bool = False) -> argparse.ArgumentParser:
        a = s.add_parser(name, help=help_text)
        a.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
        )
        if named:
            a.add_argument("name", help="the server's name in mcp_servers")
        return a

    action("list", "every configured server and its state")
    action("tools", "one server's tools and their model-facing names", named=True)
    action("restart", "reconnect one server now", named=True)
    action("reload", "apply mcp_servers from config.yaml (changed servers only)")
    a = action("logs", "what a server wrote to stderr", named=True)
    a.add_argument("--tail", type=int, metavar="BYTES", help="at most this many bytes")


def cmd_list(args: argparse.Namespace, client: Client) -> int:
    servers: list[dict[str, Any]] = client.call("mcp.list")["servers"]
    if args.json:
        emit_json(servers)
        return EXIT_OK
    if not servers:
        print("no MCP servers configured (mcp_servers in config.yaml)")
        return EXIT_OK
    rows = [
        [
            row["name"],
            row["state"] if row["enabled"] else "disabled",
            row["kind"],
            f"{row['registered']} tools",
            row["toolset"],
        ]
        for row in servers
    ]
    print(table(["NAME", "STATE", "KIND", "TOOLS", "TOOLSET"], rows))
    for row in servers:
        for line in why_not_running(row):
            print(f"  {row['name']}: {line}")
        for line in row.get("rejected") or []:
            print(f"  {row['name']}: not registered: {visible(line)}")
    return EXIT_OK


def why_not_running(row: dict[str, Any]) -> list[str]:
    """For a server with an error: the error, and the last lines it wrote to stderr."""
    if not row.get("error"):
        return []
    out = [f"error: {visible(row['error'])}"]
    tail = [visible(line) for line in str(row.get("stderr_tail") or "").splitlines()]
    if tail:
        out.append("stderr (last lines):")
        out += [f"  {line}" for line in tail]
    return out


def cmd_tools(args: argparse.Namespace, client: Client) -> int:
    result = client.call("mcp.tools", {"name": args.name})
    if args.json:
        emit_json(result)
        return EXIT_OK
    for row in result["tools"]:
        ask = "asks" if row["approval"] else "    "
        print(f"{row['name']:<64} {row['status']:<10} {ask}  {visible(row['description'])[:60]}")
    if not result["tools"]:
        print(f"{args.name} lists no tools (is it connected? see `hermesctl mcp list`)")
    return EXIT_OK


def cmd_restart(args: argparse.Namespace, client: Client) -> int:
    result = client.call("mcp.restart", {"name": args.name}, timeout=120)
    if args.json:
        emit_json(result)
    else:
        error = f": {visible(result['error'])}" if result.get("error") else ""
        print(f"{args.name}: {result['state']}{error}")
    # a server that did not come back is a failure for scripts too
    return EXIT_OK if result.get("state") == "ready" else EXIT_ERROR


def cmd_reload(args: argparse.Namespace, client: Client) -> int:
    result = client.call("mcp.reload", timeout=120)
    if args.json:
        emit_json(result)
        return EXIT_OK
    parts = [f"{what} {', '.join(names)}" for what, names in result.items() if names]
    print("MCP servers: " + ("; ".join(parts) if parts else "no changes"))
    return EXIT_OK


def cmd_logs(args: argparse.Namespace, client: Client) -> int:
    params: dict[str, Any] = {"name": args.name}
    if args.tail:
        params["tail"] = args.tail
    result = client.call("mcp.logs", params)
    if args.json:
        emit_json(result)
    else:
        sys.stdout.write(visible(result["text"]))
    return EXIT_OK


_ACTIONS = {
    "list": cmd_list,
    "tools": cmd_tools,
    "restart": cmd_restart,
    "reload": cmd_reload,
    "logs": cmd_logs,
}


def _run(args: argparse.Namespace, client: Client) -> int:
    return _ACTIONS[args.mcp_command](args, client)


COMMANDS["mcp"] = _run
