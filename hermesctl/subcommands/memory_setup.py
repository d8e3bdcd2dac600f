"""``hermesctl memory setup PROVIDER [--set KEY=VALUE]…``: configure and select a memory provider.

Asks the daemon for the provider's settings (``memory.setup_schema``), prompts for each one on a
terminal the way the reference's ``hermes memory setup`` does — secrets without echo, a choice
from its list, the current value or default in brackets, blank keeps it — or takes them from
``--set`` (every one not given keeps its current value or default when stdin is not a
terminal), and sends the answers with ``memory.setup``: secrets go to .env, the rest to
config.yaml, and the provider is selected.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from hermesctl.client import Client
from hermesctl.subcommands.base import EXIT_ERROR, EXIT_OK, emit_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _given(pairs: list[str]) -> dict[str, str] | str:
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            return f"--set wants KEY=VALUE, not {pair!r}"
        values[key.strip()] = value
    return values


def _ask(field: dict[str, Any]) -> str:
    """One field on the terminal: blank keeps what is there."""
    label = field["description"]
    if field["secret"]:
        if field.get("url") and not field.get("is_set"):
            print(f"  Get yours at {field['url']}")
        hint = " (set, blank to keep)" if field.get("is_set") else ""
        return getpass.getpass(f"  {label}{hint}: ").strip()
    current = field.get("current", field.get("default"))
    if field.get("choices"):
        print(f"  {label}:")
        for i, choice in enumerate(field["choices"], 1):
            print(f"    {i}. {choice}")
    shown = f" [{current}]" if current not in (None, "") else ""
    answer = input(f"  {label}{shown}: ").strip()
    choices = field.get("choices") or []
    if answer.isdigit() and 1 <= int(answer) <= len(choices):
        return str(choices[int(answer) - 1])
    return answer


def cmd_setup(args: argparse.Namespace, client: Client) -> int:
    """Prompt or take --set values, then memory.setup."""
    given = _given(args.set or [])
    if isinstance(given, str):
        print(f"hermesctl: {given}", file=sys.stderr)
        return EXIT_ERROR
    schema = client.call("memory.setup_schema", {"provider": args.provider})
    fields: list[dict[str, Any]] = schema["fields"]
    values = dict(given)
    interactive = sys.stdin.isatty() and not args.json
    if interactive and any(f["key"] not in values for f in fields):
        print(f"\n  Configuring {args.provider}:\n")
    for field in fields:
        key = field["key"]
        if key in values:
            continue
        answer = _ask(field) if interactive else ""
        if answer:
            values[key] = answer
        elif not field["secret"]:
            kept = field.get("current", field.get("default"))
            if kept not in (None, ""):
                values[key] = str(kept).lower() if isinstance(kept, bool) else str(kept)
    result = client.call("memory.setup", {"provider": args.provider, "values": values})
    if args.json:
        emit_json(result)
        return EXIT_OK
    print(f"\n  Memory provider: {result['provider']}")
    print("  Activation saved to config.yaml")
    if result["config_keys"]:
        print("  Provider config saved")
    if result["env_vars"]:
        print("  API keys saved to .env")
    if result.get("save_config_error"):
        print(f"  Failed to write provider config: {result['save_config_error']}")
    print("\n  Start a new session to activate.\n")
    return EXIT_OK
