"""``hermesctl plugins info|enable|disable|env|install|update|remove|reload|lint``.

Adds its sub-parsers to the ``plugins`` group of `hermesctl.subcommands.plugins` through its
registration hook. The daemon does the work (``plugins.*`` methods); this module prompts for the
``requires_env`` variables an install reports missing — on the terminal, with hidden input for
secrets and an empty answer skipping — and then calls ``plugins.set_env`` and ``plugins.reload``.
``plugins enable`` does the same for a plugin still missing variables; off a terminal (or with
``--no-input``) it exits 1 naming them. ``--no-input`` never prompts: the plugin stays disabled
with the reason shown. ``plugins env`` shows, sets and unsets a plugin's variables in .env.
"""

from __future__ import annotations

import argparse
import sys

from hermesctl.confirm import call_confirmed
from hermesctl.subcommands.base import EXIT_ERROR, EXIT_OK, emit_json
from hermesctl.subcommands.plugins import plugins_command, plugins_subcommand

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hermesctl.client import Client


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )


@plugins_subcommand
def add_plugin_subcommands(psub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, text in (
        ("info", "show one plugin in detail"),
        ("enable", "enable a plugin (config.yaml) and load it"),
        ("disable", "disable a plugin (config.yaml) and unload it"),
        ("update", "git pull --ff-only an installed plugin and reload"),
        ("remove", "unload and delete an installed plugin"),
    ):
        p = psub.add_parser(name, help=text)
        p.add_argument("name", help="plugin key or name")
        _json_flag(p)
        if name == "enable":
            p.add_argument(
                "--no-input",
                action="store_true",
                help="never prompt for missing variables; exit 1 naming them",
            )
    p = psub.add_parser(
        "env",
        help="show, set or unset a plugin's variables in .env",
        description="Without KEY=VALUE or --unset: the plugin's requires_env variables and "
        "whether each is set. Otherwise .env is edited and the plugins reloaded.",
    )
    p.add_argument("name", help="plugin key or name")
    p.add_argument("assignments", nargs="*", metavar="KEY=VALUE", help="variables to set")
    p.add_argument(
        "--unset", action="append", default=[], metavar="KEY", help="remove KEY from .env"
    )
    _json_flag(p)
    p = psub.add_parser(
        "install",
        help="install a plugin from a folder, git URL or owner/repo",
        description="SOURCE is a local folder, a git URL (https://, ssh://, "
        "git@host:path, file://) or owner/repo for GitHub.",
    )
    p.add_argument("source", help="folder, git URL or owner/repo")
    p.add_argument("--force", action="store_true", help="replace an installed plugin")
    p.add_argument(
        "--no-input",
        action="store_true",
        help="never prompt; a plugin missing variables stays disabled",
    )
    _json_flag(p)
    _json_flag(psub.add_parser("reload", help="hot reload every plugin"))
    p = psub.add_parser("lint", help="check a plugin folder (exit 1 on errors)")
    p.add_argument("path", help="the plugin folder")
    _json_flag(p)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Nothing at the top level: the subcommands join the ``plugins`` group."""


def _json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


@plugins_command("info")
def cmd_info(args: argparse.Namespace, client: Client) -> int:
    info: dict[str, Any] = client.call("plugins.info", {"name": args.name})
    if _json(args):
        emit_json(info)
        return EXIT_OK
    print(info["line"])
    for label, key in (
        ("description", "description"),
        ("author", "author"),
        ("source", "source"),
        ("path", "path"),
        ("state", "state"),
    ):
        if info.get(key):
            print(f"  {label + ':':<13}{info[key]}")
    for label in ("tools", "hooks", "commands", "cli_commands", "skills"):
        if info.get(label):
            print(f"  {label.replace('_', ' ') + ':':<13}{', '.join(info[label])}")
    for env in info.get("requires_env") or []:
        mark = "set" if env["present"] else "MISSING"
        print(
            f"  {'env:':<13}{env['name']} ({mark})"
            + (" — " + env["description"] if env["description"] else "")
        )
    for warning in info.get("warnings") or []:
        where = "/".join(p for p in (warning["tool"], warning["parameter"]) if p)
        print(f"  warning:     {where + ': ' if where else ''}{warning['message']}")
    return EXIT_OK


def _toggle(args: argparse.Namespace, client: Client, method: str) -> int:
    return _print_toggle(args, client.call(method, {"name": args.name}))


def _print_toggle(args: argparse.Namespace, result: dict[str, Any]) -> int:
    if _json(args):
        emit_json(result)
        return EXIT_OK
    print(result["message"])
    if result.get("state") not in (None, "loaded", "disabled") and result.get("reason"):
        print(f"  (not loaded: {result['reason']})")
    if not result.get("comments_kept", True):
        print("  note: config.yaml was rewritten without its comments", file=sys.stderr)
    return EXIT_OK


@plugins_command("enable")
def cmd_enable(args: argparse.Namespace, client: Client) -> int:
    result: dict[str, Any] = call_confirmed(client, "plugins.enable", {"name": args.name})
    missing = result.get("missing_env") or []
    if result.get("state") != "missing-env" or not missing:
        return _print_toggle(args, result)
    if not args.no_input and sys.stdin.isatty():
        print(result["message"])
        values = prompt_env(missing)
        if values:
            client.call("plugins.set_env", {"values": values})
            client.call("plugins.reload", timeout=300)
        info = client.call("plugins.info", {"name": args.name})
        if info.get("state") != "missing-env":
            if _json(args):
                emit_json(info)
            else:
                print(info["line"])
            return EXIT_OK if info.get("state") == "loaded" else EXIT_ERROR
        missing = [e for e in info.get("requires_env") or [] if not e.get("present")]
    if _json(args):
        emit_json(result)
    names = [e["name"] for e in missing]
    example = " ".join(f"{n}=..." for n in names)
    print(
        f"hermesctl: plugin {args.name} is enabled but cannot load until "
        f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} set: "
        f"hermesctl plugins env {args.name} {example}",
        file=sys.stderr,
    )
    return EXIT_ERROR


@plugins_command("env")
def cmd_env(args: argparse.Namespace, client: Client) -> int:
    values: dict[str, str] = {}
    for item in args.assignments:
        key, sep, value = item.partition("=")
        if not sep or not key:
            from hermesctl.subcommands.base import UsageError

            raise UsageError(f"'{item}' is not KEY=VALUE")
        values[key] = value
    if values:
        client.call("plugins.set_env", {"values": values})
    if args.unset:
        client.call("plugins.unset_env", {"names": args.unset})
    if values or args.unset:
        client.call("plugins.reload", timeout=300)
    info: dict[str, Any] = client.call("plugins.info", {"name": args.name})
    if _json(args):
        emit_json(info)
        return EXIT_OK
    rows = info.get("requires_env") or []
    if values or args.unset:
        print(info["line"])
    elif not rows:
        print(f"Plugin {info['key']} requires no variables.")
    for env in rows:
        mark = "set" if env["present"] else "MISSING"
        kind = ", secret" if env.get("secret") else ""
        about = f" — {env['description']}" if env.get("description") else ""
        print(f"  {env['name']} ({mark}{kind}){about}")
    return EXIT_OK


@plugins_command("disable")
def cmd_disable(args: argparse.Namespace, client: Client) -> int:
    return _toggle(args, client, "plugins.disable")


def prompt_env(missing: list[dict[str, Any]]) -> dict[str, str]:
    """Ask for each variable on the terminal; an empty answer skips it."""
    import getpass

    values: dict[str, str] = {}
    for env in missing:
        print(f"\n{env['name']}" + (f": {env['description']}" if env.get("description") else ""))
        if env.get("url"):
            print(f"Get yours at: {env['url']}")
        sys.stdout.flush()
        question = f"{env['name']} (empty to skip): "
        answer = getpass.getpass(question) if env.get("secret") else input(question)
        if answer.strip():
            values[env["name"]] = answer.strip()
    return values


@plugins_command("install")
def cmd_install(args: argparse.Namespace, client: Client) -> int:
    params: dict[str, Any] = {"source": args.source}
    if args.force:
        params["force"] = True
    result: dict[str, Any] = call_confirmed(client, "plugins.install", params, timeout=300)
    missing = result.get("missing_env") or []
    print(
        f"Installed plugin {result['name']} into {result['path']}"
        + (" (replaced)" if result.get("replaced") else "")
        + "."
    )
    if missing and not args.no_input and sys.stdin.isatty():
        values = prompt_env(missing)
        if values:
            client.call("plugins.set_env", {"values": values})
            client.call("plugins.reload", timeout=300)
        info = client.call("plugins.info", {"name": result["name"]})
    else:
        info = result.get("plugin") or client.call("plugins.info", {"name": result["name"]})
    if _json(args):
        emit_json(info)
    else:
        print(info["line"])
        if info.get("state") == "missing-env":
            names = ", ".join(info.get("missing_env") or [])
            print(
                f"Set {names} in $HERMES_HOME/.env (or run the install again without "
                "--no-input), then: hermesctl plugins reload"
            )
    return EXIT_OK if info.get("state") in ("loaded", "missing-env") else EXIT_ERROR


@plugins_command("update")
def cmd_update(args: argparse.Namespace, client: Client) -> int:
    result: dict[str, Any] = call_confirmed(
        client, "plugins.update", {"name": args.name}, timeout=300
    )
    if _json(args):
        emit_json(result)
        return EXIT_OK
    if result.get("output"):
        print(result["output"])
    plugin = result.get("plugin")
    print(plugin["line"] if plugin else f"Updated {args.name}.")
    return EXIT_OK if plugin and plugin["state"] == "loaded" else EXIT_ERROR


@plugins_command("remove")
def cmd_remove(args: argparse.Namespace, client: Client) -> int:
    result: dict[str, Any] = client.call("plugins.remove", {"name": args.name})
    if _json(args):
        emit_json(result)
    else:
        print(f"Removed plugin {result['removed']} ({result['path']}).")
    return EXIT_OK


@plugins_command("reload")
def cmd_reload(args: argparse.Namespace, client: Client) -> int:
    result: dict[str, Any] = client.call("plugins.reload", timeout=300)
    if _json(args):
        emit_json(result)
    else:
        print(result["summary"])
    return EXIT_ERROR if result.get("failed") else EXIT_OK


@plugins_command("lint")
def cmd_lint(args: argparse.Namespace, client: Client) -> int:
    import os

    result: dict[str, Any] = client.call(
        "plugins.lint", {"path": os.path.abspath(args.path)}, timeout=120
    )
    if _json(args):
        emit_json(result)
    else:
        print(result["text"])
    return EXIT_ERROR if result.get("errors") else EXIT_OK
