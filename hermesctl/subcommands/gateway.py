"""``hermesctl gateway status|platforms|pair CODE``: the chat platforms (docs/gateway.md).

``status`` shows each configured platform's state, the chats seen and the paired users;
``platforms`` what could be turned on (built-in and plugins' platforms); ``pair CODE`` admits
the chat user who was sent that pairing code.
"""

from __future__ import annotations

import argparse

from hermesctl.client import Client
from hermesctl.subcommands.base import EXIT_OK, command, emit_json


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("gateway", help="chat platforms: their state, pairing chat users")
    s = p.add_subparsers(dest="gateway_command", metavar="ACTION", required=True)
    for name, help_text in (
        ("status", "each configured platform's state, chats, paired users"),
        ("platforms", "the platforms hermesd could run (built-in and plugins')"),
    ):
        a = s.add_parser(name, help=help_text)
        a.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
        )
    a = s.add_parser("pair", help="admit the chat user who was sent a pairing code")
    a.add_argument("code", help="the 8-character code")


@command("gateway")
def cmd_gateway(args: argparse.Namespace, client: Client) -> int:
    action = args.gateway_command
    if action == "pair":
        paired = client.call("gateway.pair", {"code": args.code})
        who = paired["user_name"] or paired["user_id"]
        print(f"Paired {paired['platform']} user {who} ({paired['user_id']}).")
        return EXIT_OK
    result = client.call(f"gateway.{action}")
    if getattr(args, "json", False):
        emit_json(result)
        return EXIT_OK
    if action == "platforms":
        for p in result["platforms"]:
            mark = "configured" if p["configured"] else "not configured"
            print(f"{p['name']:<12} {p['label']:<14} {p['source']:<20} {mark}: {p['state']}")
        return EXIT_OK
    if not result["platforms"]:
        print("No chat platform is configured (gateway.platforms in config.yaml).")
    for p in result["platforms"]:
        print(f"{p['name']:<12} {p['state']}")
    print(f"Chats: {result['chats']}")
    for platform, users in sorted(result["paired"].items()):
        print(f"Paired on {platform}: {', '.join(users) or '-'}")
    for request in result["pairing_pending"]:
        print(f"Waiting: {request['platform']} user {request['user_name']} ({request['user_id']})")
    return EXIT_OK
