"""``hermesctl acp``: serve the Agent Client Protocol on stdin/stdout for an editor.

The bridge itself is ``hermesctl.acp_agent``; this module only declares the command. It needs
the running daemon: without one it says so on stderr and exits 3 before reading stdin.
"""

from __future__ import annotations

import argparse

from hermesctl.client import Client
from hermesctl.subcommands.base import command


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser(
        "acp",
        help="speak the Agent Client Protocol on stdio (for Zed and other editors)",
        description="Serve the Agent Client Protocol (JSON-RPC on stdin/stdout) and bridge it "
        "to hermesd: the editor's sessions are the daemon's, shared with hermesctl chat. "
        "Editors start this command themselves; see docs/clients.md.",
    )


@command("acp")
def cmd_acp(args: argparse.Namespace, client: Client) -> int:
    import asyncio
    import logging
    import sys

    from hermesctl.acp_agent import serve

    # stdout carries the protocol: everything else (the SDK's logs too) goes to stderr
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="hermesctl acp: %(message)s"
    )
    client.hello("hermesctl-acp")
    return asyncio.run(serve(client))
