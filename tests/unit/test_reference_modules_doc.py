"""docs/hermes-compat.md §11.2 lists every reference module hermesd provides, and only those."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMPAT = REPO / "hermesd" / "plugins" / "compat"


def _provided() -> set[str]:
    names = set()
    for path in COMPAT.rglob("*.py"):
        parts = path.relative_to(COMPAT).with_suffix("").parts
        if parts == ("__init__",):
            continue
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _documented() -> set[str]:
    text = (REPO / "docs" / "hermes-compat.md").read_text()
    table = text.split("<!-- reference-modules -->", 1)[1].split("<!-- /reference-modules -->")[0]
    return set(re.findall(r"^\| `([a-z_.]+)` \|", table, re.MULTILINE))


def test_every_reference_module_provided_is_in_the_table() -> None:
    assert _provided() == _documented()
