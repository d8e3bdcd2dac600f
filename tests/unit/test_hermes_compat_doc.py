"""docs/hermes-compat.md §5 against the hook table the daemon runs on (`hooks.HOOKS`).

The page promises plugins a set of hooks and keyword arguments; these tests fail when the code
and the page drift apart, in either direction.
"""

from __future__ import annotations

import re
from pathlib import Path

from hermesd.runtime.hooks import HOOKS

DOC = Path(__file__).resolve().parents[2] / "docs" / "hermes-compat.md"
_ROW = re.compile(r"^\| `(?P<hook>[a-z_]+)` \|(?P<cells>.*)\|$")


def _rows(name: str) -> list[tuple[str, list[str]]]:
    """The table rows between ``<!-- name: … -->`` and ``<!-- /name -->``: hook, cells."""
    text = DOC.read_text("utf-8")
    start = text.index(f"<!-- {name}: ")
    block = text[start : text.index(f"<!-- /{name} -->", start)]
    rows = []
    for line in block.splitlines():
        match = _ROW.match(line.strip())
        if match:
            rows.append((match["hook"], [c.strip() for c in match["cells"].split("|")]))
    return rows


def _names(cell: str) -> list[str]:
    return [name.strip() for name in cell.split(",") if name.strip()]


def test_the_contract_lists_every_hook_of_the_hook_table_in_its_order() -> None:
    assert [hook for hook, _ in _rows("hooks")] == list(HOOKS)


def test_every_keyword_argument_the_contract_lists_is_passed_by_hermesd() -> None:
    for hook, (_when, kwargs, _returns) in _rows("hooks"):
        missing = set(_names(kwargs)) - set(HOOKS[hook].kwargs)
        assert not missing, f"{hook}: the contract lists {sorted(missing)}, HOOKS lacks them"


def test_the_contract_says_how_each_hook_return_value_is_used_as_the_hook_table_does() -> None:
    for hook, (_when, _kwargs, returns) in _rows("hooks"):
        assert returns == HOOKS[hook].returns, hook


def test_arguments_listed_as_reference_only_are_not_declared_by_hermesd() -> None:
    rows = _rows("hooks-reference-only")  # raises when the marker is gone; may be empty
    for hook, (kwargs,) in rows:
        declared = set(_names(kwargs)) & set(HOOKS[hook].kwargs)
        assert not declared, f"{hook}: {sorted(declared)} moved into HOOKS; move them in §5 too"


#: the ctx members upstream added after 0.19 (issue 32), each of which the page must list
NEWER_CTX = (
    "plugin_id",
    "get_config",
    "set_config",
    "state",
    "emit",
    "subscribe",
    "spawn_task",
    "has_capability",
    "register_system_prompt_section",
    "register_redaction_patterns",
    "register_approval_transport",
    "register_context_reference",
    "platform_actions",
    "subagent_lifecycle",
    "call_mcp",
    "has_plugin",
)


def test_the_newer_ctx_table_lists_every_member_with_a_status_and_ctx_has_it() -> None:
    from hermesd.plugins.registrar import PluginContext

    text = DOC.read_text("utf-8")
    start = text.index("<!-- newer-ctx: ")
    block = text[start : text.index("<!-- /newer-ctx -->", start)]
    listed = re.findall(r"^\| `ctx\.([a-z_]+)", block, re.MULTILINE)
    assert listed == list(NEWER_CTX)
    for name in NEWER_CTX:
        assert hasattr(PluginContext, name), name
        assert re.search(rf"^\| `ctx\.{name}[^|]*\| (built|declared|warned)", block, re.M), name
