"""The dangerous-command table against its corpus (tests/data/approval_corpus.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hermesd.approvals import patterns

CORPUS = json.loads((Path(__file__).parents[1] / "data" / "approval_corpus.json").read_text())


def test_corpus_has_at_least_sixty_dangerous_and_sixty_harmless_commands() -> None:
    assert len(CORPUS["dangerous"]) >= 60 and len(CORPUS["harmless"]) >= 60


def test_every_pattern_has_a_unique_stable_key_and_a_description() -> None:
    keys = [p.key for p in (*patterns.DANGEROUS, *patterns.FLOOR)]
    assert len(keys) == len(set(keys))
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", k) for k in keys)
    assert all(p.description for p in (*patterns.DANGEROUS, *patterns.FLOOR))


def test_every_table_entry_is_exercised_by_the_corpus() -> None:
    covered = {d["key"] for d in CORPUS["dangerous"]} | {d["key"] for d in CORPUS["floor"]}
    assert sorted(set(patterns.by_key()) - covered) == []


@pytest.mark.parametrize("case", CORPUS["dangerous"], ids=lambda c: c["command"][:40])
def test_dangerous_command_matches_its_pattern(case: dict[str, str]) -> None:
    assert case["key"] in [p.key for p in patterns.dangerous(case["command"])]


@pytest.mark.parametrize("command", CORPUS["harmless"], ids=lambda c: c[:40])
def test_harmless_command_does_not_prompt(command: str) -> None:
    assert patterns.dangerous(command) == [] and patterns.floor(command) is None


@pytest.mark.parametrize("case", CORPUS["floor"], ids=lambda c: c["command"][:40])
def test_floor_command_is_caught_by_the_floor(case: dict[str, str]) -> None:
    hit = patterns.floor(case["command"])
    assert hit is not None and hit.key == case["key"]


@pytest.mark.parametrize("command", ["rm\u200b -rf build", "rm  -rf\\\n build", "ＲＭ -rf build"])
def test_spacing_and_unicode_tricks_still_match(command: str) -> None:
    assert "recursive_delete" in [p.key for p in patterns.dangerous(command)]


def test_formatting_the_root_device_is_floor_wherever_root_lives() -> None:
    device = patterns.root_device()
    if not device:
        pytest.skip("/ is not on a /dev block device here")
    assert patterns.floor(f"mkfs.ext4 {device}") is not None
