"""Which top-level sections of config.yaml belong to plugins: the names `plugin_sections`
finds, and what `config.parse` does with a section named like a plugin."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hermesd.daemon import config
from tests.support.plugin_factory import write_plugin

NO_BUNDLED = {"HERMES_BUNDLED_PLUGINS": "/nonexistent"}


def test_a_plugins_key_and_manifest_name_both_own_a_section(tmp_path: Path) -> None:
    write_plugin(tmp_path / "plugins", "psy")
    write_plugin(tmp_path / "plugins", "memory/deep", manifest={"name": "deepmem"})
    assert config.plugin_sections(tmp_path, NO_BUNDLED) == {"psy", "memory/deep", "deepmem"}


def test_finding_the_owners_logs_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_plugin(tmp_path / "plugins", "broken", manifest="name: [unclosed\n")
    write_plugin(tmp_path / "plugins", "odd", manifest={"name": "odd", "colour": "blue"})
    with caplog.at_level(logging.DEBUG, logger="hermesd.plugins"):
        assert config.plugin_sections(tmp_path, NO_BUNDLED) == {"broken", "odd"}
    assert caplog.records == []


def test_our_section_is_still_checked_when_a_plugin_has_its_name() -> None:
    with pytest.raises(config.ConfigError, match=r"'model\.timeout' must be"):
        config.parse("model:\n  timeout: soon\n", plugin_sections={"model"})


def test_a_section_named_like_a_plugin_is_kept_for_it() -> None:
    cfg = config.parse("psy:\n  actor_id: a\npsyy:\n  actor_id: b\n", plugin_sections={"psy"})
    assert cfg.warnings == ["unknown setting 'psyy' ignored"]
    assert cfg.data["psy"] == {"actor_id": "a"}
