"""docs/protocol.md and protocol.METHODS say the same thing."""

from __future__ import annotations

import re

from hermesd.rpc.protocol import METHODS, Codes
from tests.support.daemon import REPO

DOC = (REPO / "docs" / "protocol.md").read_text()


def _documented_methods() -> dict[str, str]:
    """``### `name` `` headings and the text under each."""
    parts = re.split(r"^### `([a-z][a-z0-9_.]*)`\s*$", DOC, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_declared_method_is_documented() -> None:
    assert sorted(set(METHODS) - set(_documented_methods())) == []


def test_every_documented_method_is_declared() -> None:
    assert sorted(set(_documented_methods()) - set(METHODS)) == []


def test_every_parameter_is_documented_under_its_method() -> None:
    docs = _documented_methods()
    missing = [
        f"{name}.{p.name}"
        for name, spec in METHODS.items()
        for p in spec.params
        if f"`{p.name}`" not in docs.get(name, "")
    ]
    assert missing == []


def test_owner_only_methods_say_so() -> None:
    docs = _documented_methods()
    assert [
        n for n, s in METHODS.items() if s.owner_only and "owner only" not in docs[n].lower()
    ] == []


def test_every_error_code_is_documented() -> None:
    codes = [v for k, v in vars(Codes).items() if k.isupper()]
    assert [c for c in codes if f"`{c}`" not in DOC] == []


def test_every_method_states_its_declared_access() -> None:
    docs = _documented_methods()
    assert [
        n for n, s in METHODS.items() if f"Access: `{s.access}`" not in docs[n].lstrip()[:200]
    ] == []
