"""Plugin YAML is plain data: no anchors, aliases or merge keys, bounded nesting and size."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml

from hermesd.runtime.plain_yaml import MAX_BYTES, PlainYamlError, load_plain, read_capped
from hermesd.tools.skill_catalog import read_front_matter
from tests.support.plugin_factory import alias_bomb


def leaves(value: Any) -> int:
    return sum(leaves(v) for v in value) if isinstance(value, list) else 1


def test_the_alias_bomb_is_a_real_one_for_the_stock_safe_loader() -> None:
    assert len(alias_bomb()) < 600
    # six levels already stand for a million strings; the eight used below for 10**8 (700 MB
    # as text once anything walks or prints them, as str(name) did)
    assert leaves(yaml.safe_load(alias_bomb(levels=6))["name"]) == 10**6


def test_the_alias_bomb_is_refused_at_its_first_anchor_with_little_memory() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(PlainYamlError, match=r"line 1, column 5: YAML anchors \(&l0\)"):
            load_plain(alias_bomb())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 1024 * 1024


def test_an_alias_is_refused_naming_it() -> None:
    with pytest.raises(PlainYamlError, match=r"line 2, column 4: YAML aliases \(\*x\)"):
        # the anchor check comes first in a document; an alias alone names no anchor
        load_plain("a: 1\nb: *x\n")


def test_an_anchor_alone_is_refused() -> None:
    with pytest.raises(PlainYamlError, match="anchors"):
        load_plain("name: &n demo\n")


def test_a_merge_key_is_refused_even_without_an_alias() -> None:
    with pytest.raises(PlainYamlError, match=r"merge keys \(<<\)"):
        load_plain("name: demo\n<<: {version: 1}\n")


def test_a_quoted_double_angle_key_is_an_ordinary_string() -> None:
    assert load_plain('"<<": 1\n') == {"<<": 1}


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    with pytest.raises(PlainYamlError, match="nested deeper than 32 levels"):
        load_plain("[" * 5000 + "]" * 5000)


def test_nesting_at_a_sane_depth_parses() -> None:
    assert load_plain("a: [[[1]]]\n") == {"a": [[[1]]]}


def test_text_over_the_size_cap_is_refused_before_parsing() -> None:
    with pytest.raises(PlainYamlError, match=f"the limit is {MAX_BYTES}"):
        load_plain("a: b\n" * (MAX_BYTES // 4))


def test_an_integer_of_thousands_of_digits_is_an_error_not_a_crash() -> None:
    with pytest.raises(PlainYamlError, match="unreadable value"):
        load_plain("version: " + "9" * 5000 + "\n")


def test_python_tags_are_refused_as_by_the_safe_loader() -> None:
    with pytest.raises(PlainYamlError, match="constructor"):
        load_plain("x: !!python/object/apply:os.system ['true']\n")


def test_syntax_errors_are_one_line() -> None:
    with pytest.raises(PlainYamlError) as err:
        load_plain("name: [unclosed\n")
    assert "\n" not in str(err.value)


def test_plain_data_parses_as_before() -> None:
    assert load_plain("name: demo\nversion: 1.0\nrequires_env: [A]\n") == {
        "name": "demo",
        "version": 1.0,
        "requires_env": ["A"],
    }


def test_a_file_over_the_cap_is_refused_by_its_size_without_being_read(tmp_path: Path) -> None:
    huge = tmp_path / "plugin.yaml"
    with huge.open("wb") as f:
        f.truncate(1024**3)  # sparse: a gigabyte that costs nothing unless read
    tracemalloc.start()
    try:
        with pytest.raises(PlainYamlError, match=r"plugin.yaml is 1073741824 bytes"):
            read_capped(huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


def test_a_file_at_the_cap_is_read(tmp_path: Path) -> None:
    path = tmp_path / "plugin.yaml"
    path.write_bytes(b"#" * MAX_BYTES)
    assert len(read_capped(path)) == MAX_BYTES


def test_a_file_that_is_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "plugin.yml"
    path.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(PlainYamlError, match=r"plugin\.yml is not UTF-8 text"):
        read_capped(path)


def test_skill_front_matter_with_an_alias_bomb_is_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = f"---\n{alias_bomb()}description: d\n---\n# body\n"
    assert read_front_matter(text, "skills/bomb/SKILL.md") == {}
    assert any(
        "Ignoring the front matter of skills/bomb/SKILL.md: " in m and "anchors" in m
        for m in caplog.messages
    )


def test_plain_skill_front_matter_still_parses() -> None:
    assert read_front_matter("---\nname: s\ndescription: d\n---\nbody\n") == {
        "name": "s",
        "description": "d",
    }
