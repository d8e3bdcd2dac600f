"""Shell completion for ``hermesctl``: scripts for bash, zsh and fish, and the hook they call.

The scripts are written by shtab from hermesctl's own argparse parser, so every subcommand
and flag completes as declared. Words only the daemon knows complete through a hook the
scripts call, ``hermesctl __complete KIND`` (sessions, plugins, tools, approvals, commands):
it asks the running daemon with a short timeout and prints one word per line, or nothing when
the daemon is down. Plugin CLI commands are offered besides the built-in subcommands the same
way. shtab is imported only when a script is printed: hermesctl's start-up does not pay for it.
"""

from __future__ import annotations

import argparse
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

HOOK_TIMEOUT = 1.0  # seconds: completion must not hang a shell when the daemon is stuck
KINDS = ("sessions", "plugins", "tools", "approvals", "commands")

_BASH = """
_hermesctl_ask() { hermesctl __complete "$1" 2>/dev/null; }
_hermesctl_sessions() { compgen -W "$(_hermesctl_ask sessions)" -- "$1"; }
_hermesctl_plugins() { compgen -W "$(_hermesctl_ask plugins)" -- "$1"; }
_hermesctl_tools() { compgen -W "$(_hermesctl_ask tools)" -- "$1"; }
_hermesctl_approvals() { compgen -W "$(_hermesctl_ask approvals)" -- "$1"; }
"""
_BASH_TAIL = """
# plugin CLI commands (from the daemon) beside the built-in subcommands
_hermesctl_with_plugins() {
  _shtab_hermesctl "$@"
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY+=($(compgen -W "$(_hermesctl_ask commands)" -- "${COMP_WORDS[1]}"))
  fi
}
complete -o filenames -F _hermesctl_with_plugins hermesctl
"""
_ZSH = """
_hermesctl_ask() { hermesctl __complete "$1" 2>/dev/null }
_hermesctl_sessions() { compadd -- ${(f)"$(_hermesctl_ask sessions)"} }
_hermesctl_plugins() { compadd -- ${(f)"$(_hermesctl_ask plugins)"} }
_hermesctl_tools() { compadd -- ${(f)"$(_hermesctl_ask tools)"} }
_hermesctl_approvals() { compadd -- ${(f)"$(_hermesctl_ask approvals)"} }
"""
_FISH_TAIL = """
# plugin CLI commands (from the daemon) beside the built-in subcommands
complete -c hermesctl -f -n '__fish_use_subcommand' -a '(hermesctl __complete commands 2>/dev/null)'
"""

SESSION = {"bash": "_hermesctl_sessions", "zsh": "_hermesctl_sessions",
           "fish": "(hermesctl __complete sessions 2>/dev/null)"}  # fmt: skip
PLUGIN = {"bash": "_hermesctl_plugins", "zsh": "_hermesctl_plugins",
          "fish": "(hermesctl __complete plugins 2>/dev/null)"}  # fmt: skip
TOOL = {"bash": "_hermesctl_tools", "zsh": "_hermesctl_tools",
        "fish": "(hermesctl __complete tools 2>/dev/null)"}  # fmt: skip
APPROVAL = {"bash": "_hermesctl_approvals", "zsh": "_hermesctl_approvals",
            "fish": "(hermesctl __complete approvals 2>/dev/null)"}  # fmt: skip


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Any:
    """Every (command path, parser) pair under ``parser``, itself first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, (*path, name))


def _what_completes(path: tuple[str, ...], action: argparse.Action) -> dict[str, str] | None:
    """The daemon-backed completion of one argument, by where it is and what it names."""
    area = path[0] if path else ""
    if action.option_strings:
        takes_value = action.nargs != 0 and not isinstance(action, argparse._StoreConstAction)
        return SESSION if "--session" in action.option_strings and takes_value else None
    if area == "sessions" and action.dest == "id":
        return SESSION
    if area == "plugins" and action.dest == "name":
        return PLUGIN
    if area == "tools" and action.dest == "name":
        return TOOL
    if area == "approvals" and action.dest == "id":
        return APPROVAL
    return None


def tag_dynamic(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Mark the arguments whose values come from the daemon (shtab's ``.complete``)."""
    for path, p in _parsers(parser):
        for action in p._actions:
            found = _what_completes(path, action)
            if found is not None:
                action.complete = found  # shtab reads this attribute
    return parser


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (bash, zsh or fish)."""
    import shtab

    tag_dynamic(parser)
    preamble = {"bash": _BASH, "zsh": _ZSH}.get(shell, "")
    text: str = shtab.complete(parser, shell=shell, preamble=preamble)
    if shell == "bash":
        text += _BASH_TAIL
    elif shell == "fish":
        text += _FISH_TAIL
    return text


def words(kind: str, socket_path: str | None = None) -> list[str]:
    """What ``hermesctl __complete KIND`` prints: the daemon's words of that kind."""
    from hermesctl.client import Client, ConnectionClosed, DaemonNotRunning
    from hermesd.rpc.protocol import RpcError

    calls = {
        "sessions": ("session.list", {"limit": 200}, "sessions", "id"),
        "plugins": ("plugins.list", None, "plugins", "key"),
        "tools": ("tools.list", None, "tools", "name"),
        "approvals": ("approvals.pending", {}, "pending", "id"),
        "commands": ("cli.list", None, "commands", "name"),
    }
    method, params, field, key = calls[kind]
    try:
        with Client.connect(socket_path, timeout=HOOK_TIMEOUT) as client:
            result = client.call(method, params, timeout=HOOK_TIMEOUT)
    except (DaemonNotRunning, RpcError, ConnectionClosed, OSError):
        return []
    found = []
    for item in result.get(field) or []:
        if isinstance(item, dict):
            word = item.get(key) or item.get("name")
            if word:
                found.append(str(word))
    return found


def hook(argv: list[str], socket_path: str | None) -> int:
    """``hermesctl __complete KIND``: one word per line; exit 2 for an unknown kind."""
    if len(argv) != 1 or argv[0] not in KINDS:
        print(f"usage: hermesctl __complete {{{','.join(KINDS)}}}", file=sys.stderr)
        return 2
    for word in words(argv[0], socket_path):
        print(word)
    return 0
