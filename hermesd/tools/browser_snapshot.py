"""A page's accessibility tree as text, with a ref (``@e1``, ``@e2``, …) on each element the
model can act on.

`render` takes the nodes of CDP ``Accessibility.getFullAXTree`` and writes one line per node
worth reading, indented by depth: ``- role "name" [ref=e3]``, plus a few properties (a
heading's level, a box's value, checked). Interactive roles (links, buttons, text boxes, …) get
refs, numbered in document order; the map ref -> backend DOM node id is what
``browser_click``/``browser_type`` resolve. The compact view keeps interactive elements,
headings and text, and drops structure without a name; the full view keeps every node that is
not ignored.
"""

from __future__ import annotations

from typing import Any

INTERACTIVE = frozenset(
    {
        "button",
        "checkbox",
        "combobox",
        "link",
        "listbox",
        "menuitem",
        "menuitemcheckbox",
        "menuitemradio",
        "option",
        "radio",
        "searchbox",
        "slider",
        "spinbutton",
        "switch",
        "tab",
        "textbox",
        "treeitem",
    }
)
#: read in the compact view even without being interactive
CONTENT = frozenset({"heading", "StaticText", "img", "image", "cell", "columnheader", "alert"})
#: never a line of their own (their children are shown in their place)
SKIPPED = frozenset({"none", "generic", "InlineTextBox", "LineBreak", "presentation"})
PROPERTIES = ("level", "checked", "disabled", "expanded", "selected", "required")


def _value(field: Any) -> str:
    if isinstance(field, dict):
        value = field.get("value")
        return "" if value is None else str(value)
    return ""


def render(nodes: list[dict[str, Any]], full: bool) -> tuple[str, dict[str, int]]:
    """The snapshot text and its refs (``"e1"`` -> backend DOM node id)."""
    by_id = {str(n.get("nodeId")): n for n in nodes}
    children = {str(n.get("nodeId")): [str(c) for c in n.get("childIds") or []] for n in nodes}
    roots = [n for n in nodes if not n.get("parentId")] or nodes[:1]
    lines: list[str] = []
    refs: dict[str, int] = {}
    stack: list[tuple[str, int, str]] = [(str(r.get("nodeId")), 0, "") for r in reversed(roots)]
    while stack:
        ident, depth, parent_name = stack.pop()
        node = by_id.get(ident)
        if node is None:
            continue
        shown, name = _line(node, depth, full, parent_name, refs)
        if shown:
            lines.append(shown)
        below = depth + 1 if shown else depth
        for child in reversed(children.get(ident, [])):
            stack.append((child, below, name or parent_name))
    return "\n".join(lines), refs


def _line(
    node: dict[str, Any], depth: int, full: bool, parent_name: str, refs: dict[str, int]
) -> tuple[str, str]:
    """One node's line ("" when it is not shown) and its name."""
    role = _value(node.get("role"))
    name = " ".join(_value(node.get("name")).split())
    if node.get("ignored") or role in SKIPPED or not role:
        return "", ""
    if role == "StaticText" and (not name or name == parent_name):
        return "", name  # the text its parent's name already says
    interactive = role in INTERACTIVE
    if not full and not interactive and role not in CONTENT and not (role != "StaticText" and name):
        return "", name
    if role == "RootWebArea" and not full:
        return "", name
    text = f"{'  ' * depth}- {'text' if role == 'StaticText' else role}"
    if name:
        text += f' "{name[:300]}"'
    backend = node.get("backendDOMNodeId")
    if interactive and isinstance(backend, int):
        ref = f"e{len(refs) + 1}"
        refs[ref] = backend
        text += f" [ref={ref}]"
    value = _value(node.get("value"))
    if value and role != "StaticText":
        text += f' value="{value[:200]}"'
    for prop in node.get("properties") or []:
        if prop.get("name") in PROPERTIES:
            said = _value(prop.get("value"))
            if said and said != "false":
                text += f" [{prop['name']}={said}]"
    return text, name
