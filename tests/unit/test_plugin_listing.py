"""The ``/plugins`` text (docs/hermes-compat.md §8) and the ``plugins.list`` dict form."""

from __future__ import annotations

import json
from pathlib import Path

from hermesd.plugins.listing import plugin_dict, plugin_line, plugins_text
from hermesd.plugins.manifest import PluginRecord, RejectedTool
from hermesd.tools.schema import Finding


def record(**fields: object) -> PluginRecord:
    base: dict[str, object] = {
        "key": "calculator",
        "name": "calculator",
        "source": "user",
        "path": "/p",
        "version": "1.0.0",
        "state": "loaded",
    }
    base.update(fields)
    return PluginRecord(**base)  # type: ignore[arg-type]


def test_loaded_plugin_line_matches_the_guide() -> None:
    r = record(tools=["calculate", "unit_convert"], hooks=["post_tool_call"])
    assert plugin_line(r) == "  ✓ calculator v1.0.0 (2 tools, 1 hooks)"


def test_counts_appear_only_when_non_zero_and_commands_follow() -> None:
    assert plugin_line(record(hooks=["a", "b"], commands=["x", "y", "z"])) == (
        "  ✓ calculator v1.0.0 (2 hooks, 3 commands)"
    )
    assert plugin_line(record(skills=["s"])) == "  ✓ calculator v1.0.0"


def test_a_loaded_plugin_that_registered_nothing_says_so() -> None:
    assert plugin_line(record()) == "  ✓ calculator v1.0.0 — registered nothing"


def test_version_appears_only_when_known() -> None:
    assert plugin_line(record(version=None, tools=["t"])) == "  ✓ calculator (1 tools)"


def test_failed_plugin_line_has_a_cross_and_the_reason() -> None:
    r = record(key="weather", state="missing-env", reason="disabled (missing: WEATHER_API_KEY)")
    assert plugin_line(r) == "  ✗ weather v1.0.0 — disabled (missing: WEATHER_API_KEY)"


def test_whole_listing_has_a_count_header() -> None:
    text = plugins_text(
        [record(tools=["t"]), record(key="b", state="error", reason="boom", version=None)],
        Path("/h"),
    )
    assert text == "Plugins (2):\n  ✓ calculator v1.0.0 (1 tools)\n  ✗ b — boom"


def test_empty_listing_names_the_real_plugin_folder() -> None:
    assert plugins_text([], Path("/home/ada/.hermes")) == (
        "No plugins installed.\n"
        "Drop plugin directories into /home/ada/.hermes/plugins/ to get started."
    )


def test_dict_form_is_plain_data_with_state_reason_and_registrations() -> None:
    r = record(
        tools=["t"],
        hooks=["post_tool_call"],
        skills=["calculator:s"],
        rejected_tools=[RejectedTool("bad", "invalid tool name")],
        warnings=[Finding("warning", "t", "x", "parameter has no description")],
    )
    data = plugin_dict(r)
    assert json.loads(json.dumps(data)) == data
    assert data["state"] == "loaded" and data["enabled"] is True
    assert data["rejected_tools"] == [{"name": "bad", "reason": "invalid tool name"}]
    assert data["warnings"] == [
        {
            "severity": "warning",
            "tool": "t",
            "parameter": "x",
            "message": "parameter has no description",
        }
    ]
    assert data["line"] == (
        "✓ calculator v1.0.0 (1 tools, 1 hooks) — rejected tool 'bad': invalid tool name"
    )
