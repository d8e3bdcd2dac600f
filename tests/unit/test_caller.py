"""Who is asking is a value: only the RPC layer and the services' RPC edges read the connection.

Domain code gets a `hermesd.caller.Caller` (in its `Call`, as an argument, or for a turn's
tool calls in ``current_caller``); ``current_connection`` is read in ``hermesd/rpc/`` and the
``*/service.py`` files only.
"""

from __future__ import annotations

import ast

from tests.support.daemon import REPO


def _reads_current_connection(path: str) -> list[int]:
    tree = ast.parse((REPO / path).read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id == "current_connection")
        or (isinstance(node, ast.Attribute) and node.attr == "current_connection")
        or (
            isinstance(node, ast.ImportFrom)
            and any(alias.name == "current_connection" for alias in node.names)
        )
    ]


def test_current_connection_is_read_only_in_rpc_and_service_edges() -> None:
    outside = {}
    for file in sorted((REPO / "hermesd").rglob("*.py")):
        path = str(file.relative_to(REPO))
        if path.startswith("hermesd/rpc/") or path.endswith("/service.py"):
            continue
        lines = _reads_current_connection(path)
        if lines:
            outside[path] = lines
    assert outside == {}


def test_the_check_sees_a_read_where_there_is_one() -> None:
    # the rule would pass vacuously if the name changed: the declaration is still found
    assert _reads_current_connection("hermesd/rpc/connection.py")


def test_commands_declare_access_in_the_method_tables_words() -> None:
    from hermesd.commands.registry import ANY, OWNER, PERSON
    from hermesd.rpc.protocol import Access

    assert (OWNER, PERSON, ANY) == (Access.OWNER, Access.PERSON, Access.ANY)
