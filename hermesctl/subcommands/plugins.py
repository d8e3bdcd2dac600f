"""Plugin-host commands: ``plugins list``, ``tools list|call``, ``skills list|view``.

The daemon renders what people read (the ``/plugins`` text, skill content); this module only
parses arguments, calls ``plugins.list``, ``tools.list``, ``tools.call``, ``skills.list`` and
``skills.view``, and prints. ``plugins`` is a group of subcommands that other modules extend:
an area module (``hermesctl.subcommands.INDEX``) calls `plugins_subcommand` at import time
with a function that adds its sub-parsers to the ``plugins`` group, and registers each handler with
``@plugins_command("NAME")`` (see docs/plugins.md, "Adding plugins subcommands").
"""

from __future__ import annotations

import argparse
import sys

from hermesctl.subcommands.base import (
    COMMANDS,
    EXIT_ERROR,
    EXIT_OK,
    UsageError,
    emit_json,
    table,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from hermesctl.client import Client
    from hermesctl.subcommands.base import Command

    Setup = Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]

#: Functions adding sub-parsers to the ``plugins`` group, in registration order.
PLUGINS_SUBCOMMANDS: list[Setup] = []
#: Handlers of ``hermesctl plugins NAME``.
PLUGINS_COMMANDS: dict[str, Command] = {}
_TOOLS_COMMANDS: dict[str, Command] = {}
_SKILLS_COMMANDS: dict[str, Command] = {}


def plugins_subcommand(setup: Setup) -> Setup:
    """Register ``setup(plugins_sub)``, called when the ``plugins`` parser is built."""
    PLUGINS_SUBCOMMANDS.append(setup)
    return setup


def _registrar(table: dict[str, Command]) -> Callable[[str], Callable[[Command], Command]]:
    def register(name: str) -> Callable[[Command], Command]:
        def deco(fn: Command) -> Command:
            table[name] = fn
            return fn

        return deco

    return register


#: ``@plugins_command("enable")`` registers the handler of ``hermesctl plugins enable``.
plugins_command = _registrar(PLUGINS_COMMANDS)
_tools_command = _registrar(_TOOLS_COMMANDS)
_skills_command = _registrar(_SKILLS_COMMANDS)


def _json_flag(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: an absent flag here must not reset a ``hermesctl --json …`` given earlier.
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plugins", help="list plugins (and manage them)")
    psub = p.add_subparsers(dest="plugins_command", metavar="SUBCOMMAND", required=True)
    _json_flag(psub.add_parser("list", help="every discovered plugin and its state"))
    for setup in PLUGINS_SUBCOMMANDS:
        setup(psub)

    p = sub.add_parser("tools", help="list and call tools")
    tsub = p.add_subparsers(dest="tools_command", metavar="SUBCOMMAND", required=True)
    t = tsub.add_parser("list", help="every tool: toolset, source, and why the model lacks it")
    t.add_argument("--toolset", help="only this toolset")
    _json_flag(t)
    t = tsub.add_parser(
        "call",
        help="run a tool through the daemon's tool pipeline",
        description="Arguments are key=value pairs (a value that parses as "
        "JSON is taken as JSON: 3, true, [1,2], null; anything else is a "
        "string) or one --args JSON object.",
    )
    t.add_argument("name", help="tool name")
    t.add_argument("pairs", nargs="*", metavar="KEY=VALUE", help="one argument")
    t.add_argument(
        "--args", dest="args_json", metavar="JSON", help="all arguments as a JSON object"
    )
    t.add_argument("--session", help="session id the call belongs to")
    t.add_argument(
        "--approve",
        choices=("deny", "once"),
        default="deny",
        help="answer to an approval request when there is no terminal to ask (default deny)",
    )
    _json_flag(t)

    p = sub.add_parser("skills", help="list and read skills")
    ssub = p.add_subparsers(dest="skills_command", metavar="SUBCOMMAND", required=True)
    _json_flag(ssub.add_parser("list", help="user skills and plugin skills"))
    s = ssub.add_parser("view", help="print a skill (or one file of it)")
    s.add_argument("name", help="skill name, or <plugin>:<skill>")
    s.add_argument(
        "--file", dest="file_path", metavar="PATH", help="a file inside the skill's folder"
    )
    _json_flag(s)


def _dispatch(table: dict[str, Command], key: str) -> Command:
    def run(args: argparse.Namespace, client: Client) -> int:
        return table[getattr(args, key)](args, client)

    return run


COMMANDS["plugins"] = _dispatch(PLUGINS_COMMANDS, "plugins_command")
COMMANDS["tools"] = _dispatch(_TOOLS_COMMANDS, "tools_command")
COMMANDS["skills"] = _dispatch(_SKILLS_COMMANDS, "skills_command")


# --- plugins ---------------------------------------------------------------------------------


@plugins_command("list")
def cmd_plugins_list(args: argparse.Namespace, client: Client) -> int:
    info = client.call("plugins.list")
    if args.json:
        emit_json(info["plugins"])
    else:
        print(info["text"])
    return EXIT_OK


# --- tools -----------------------------------------------------------------------------------


@_tools_command("list")
def cmd_tools_list(args: argparse.Namespace, client: Client) -> int:
    params = {"toolset": args.toolset} if args.toolset else {}
    tools: list[dict[str, Any]] = client.call("tools.list", params)["tools"]
    if args.json:
        emit_json(tools)
        return EXIT_OK
    if not tools:
        print(f"No tools in toolset '{args.toolset}'." if args.toolset else "No tools.")
        return EXIT_OK
    rows = [
        [
            t["name"],
            t["toolset"],
            t.get("source") or "-",
            t.get("status") or ("available" if t.get("available") else "unavailable"),
            _clean(t.get("reason") or ""),
        ]
        for t in tools
    ]
    print(table(["TOOL", "TOOLSET", "SOURCE", "STATUS", "WHY"], rows))
    offered = sum(1 for t in tools if not t.get("reason"))
    print(f"\n{offered} of {len(tools)} tools offered to the model.")
    return EXIT_OK


def _clean(text: str) -> str:
    # a plugin's check_fn message may carry anything: one printable line
    return "".join(c for c in " ".join(text.split()) if c.isprintable())[:160]


def summary(description: str, limit: int = 72) -> str:
    """The first sentence of a tool description, cut to ``limit`` characters."""
    text = " ".join(description.split())
    end = text.find(". ")
    if end != -1:
        text = text[: end + 1]
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def parse_value(text: str) -> Any:
    """A ``key=value`` value: JSON when it parses (3, true, [1], "x"), else the text itself."""
    try:
        import json

        return json.loads(text)
    except ValueError:
        return text


def tool_arguments(pairs: list[str], args_json: str | None) -> dict[str, Any]:
    """The argument map from ``key=value`` pairs or ``--args`` (UsageError when malformed)."""
    if args_json is not None:
        if pairs:
            raise UsageError("give arguments either as key=value pairs or with --args, not both")
        try:
            import json

            parsed = json.loads(args_json)
        except ValueError as exc:
            raise UsageError(f"--args is not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise UsageError(f"--args must be a JSON object, not {type(parsed).__name__}")
        return parsed
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"expected key=value, got '{pair}'")
        arguments[key] = parse_value(value)
    return arguments


@_tools_command("call")
def cmd_tools_call(args: argparse.Namespace, client: Client) -> int:
    params: dict[str, Any] = {"name": args.name, "args": tool_arguments(args.pairs, args.args_json)}
    if args.session:
        params["session_id"] = args.session
    from hermesctl.approval_prompt import request_handler

    client.on_request = request_handler(sys.stdin.isatty(), args.approve)
    result: str = client.call("tools.call", params)["result"]
    try:
        import json

        parsed = json.loads(result)
    except ValueError:
        print(result)
        return EXIT_OK
    emit_json(parsed)
    return EXIT_ERROR if isinstance(parsed, dict) and parsed.get("error") else EXIT_OK


# --- skills ----------------------------------------------------------------------------------


@_skills_command("list")
def cmd_skills_list(args: argparse.Namespace, client: Client) -> int:
    skills: list[dict[str, Any]] = client.call("skills.list")["skills"]
    if args.json:
        emit_json(skills)
        return EXIT_OK
    if not skills:
        print("No skills. Add one as $HERMES_HOME/skills/<name>/SKILL.md.")
        return EXIT_OK
    user = [s for s in skills if not s.get("plugin")]
    plugin = [s for s in skills if s.get("plugin")]
    width = max(len(s["name"]) for s in skills)
    for title, group in (("Skills", user), ("Plugin skills", plugin)):
        if not group:
            continue
        print(f"{title} ({len(group)}):")
        for skill in group:
            print(f"  {skill['name']:<{width}}  {skill.get('description') or ''}".rstrip())
    return EXIT_OK


@_skills_command("view")
def cmd_skills_view(args: argparse.Namespace, client: Client) -> int:
    params = {"name": args.name}
    if args.file_path:
        params["file_path"] = args.file_path
    result: dict[str, Any] = client.call("skills.view", params)
    if args.json:
        emit_json(result)
        return EXIT_OK if result.get("success") else EXIT_ERROR
    if not result.get("success"):
        print(f"hermesctl: {result.get('error') or 'skill not found'}", file=sys.stderr)
        available = result.get("available_skills")
        if available:
            print(f"  available: {', '.join(available)}", file=sys.stderr)
        if result.get("hint"):
            print(f"  {result['hint']}", file=sys.stderr)
        return EXIT_ERROR
    content = str(result.get("content") or "")
    sys.stdout.write(content if content.endswith("\n") else content + "\n")
    return EXIT_OK
