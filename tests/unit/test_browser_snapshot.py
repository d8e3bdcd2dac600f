"""The browser snapshot (`hermesd.tools.browser_snapshot.render`): an accessibility tree as CDP
``Accessibility.getFullAXTree`` gives it, written as indented lines with refs."""

from __future__ import annotations

from typing import Any

from hermesd.tools.browser_snapshot import render


def _node(ident: int, role: str, name: str = "", kids: tuple[int, ...] = (), **more: Any) -> Any:
    node = {
        "nodeId": str(ident),
        "role": {"type": "role", "value": role},
        "name": {"type": "computedString", "value": name},
        "childIds": [str(k) for k in kids],
        "backendDOMNodeId": 100 + ident,
    }
    return node | more


LEVEL_1 = {"name": "level", "value": {"value": 1}}
TREE = [
    _node(1, "RootWebArea", "Shop", (2, 3, 6)),
    _node(2, "heading", "Welcome", (7,), parentId="1", properties=[LEVEL_1]),
    _node(3, "generic", "", (4, 5), parentId="1"),
    _node(4, "link", "Second page", (8,), parentId="3"),
    _node(5, "textbox", "Your name", value={"value": "Ada"}, parentId="3"),
    _node(6, "button", "Hidden", ignored=True, parentId="1"),
    _node(7, "StaticText", "Welcome", parentId="2"),
    _node(8, "StaticText", "Second page", parentId="4"),
]


def test_interactive_elements_get_refs_in_document_order() -> None:
    text, refs = render(TREE, full=False)
    assert refs == {"e1": 104, "e2": 105}
    assert '- link "Second page" [ref=e1]' in text
    assert '- textbox "Your name" [ref=e2] value="Ada"' in text


def test_compact_view_drops_the_page_root_unnamed_structure_and_repeated_text() -> None:
    text, _ = render(TREE, full=False)
    assert text.splitlines() == [
        '- heading "Welcome" [level=1]',
        '- link "Second page" [ref=e1]',
        '- textbox "Your name" [ref=e2] value="Ada"',
    ]


def test_full_view_keeps_the_root_and_indents_children_under_it() -> None:
    text, _ = render(TREE, full=True)
    lines = text.splitlines()
    assert lines[0] == '- RootWebArea "Shop"'
    assert '  - heading "Welcome" [level=1]' in lines
    assert not any("Hidden" in line for line in lines)  # ignored nodes stay out


def test_an_empty_tree_is_an_empty_snapshot() -> None:
    assert render([], full=True) == ("", {})
