"""Schema lint (the tools.json self-check list) and tools.json parsing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hermesd.tools.schema import (
    Finding,
    ToolsJsonError,
    lint_tool,
    lint_tools,
    load_tools_json,
)

GOOD = {
    "name": "send_notification",
    "description": "Send a push notification to the user and return its delivery id",
    "parameters": {
        "type": "object",
        "required": ["message"],
        "properties": {
            "message": {"type": "string", "description": "Text of the notification"},
            "priority": {
                "type": "string",
                "enum": ["low", "normal", "high"],
                "description": "Priority; high alerts loudly",
                "default": "normal",
            },
            "max_results": {
                "type": "integer",
                "description": "Most results to return",
                "default": 10,
                "minimum": 1,
                "maximum": 50,
            },
        },
    },
}


def with_param(**spec: Any) -> dict[str, Any]:
    tool = json.loads(json.dumps(GOOD))
    tool["parameters"]["properties"]["extra"] = spec
    return tool


def messages(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings]


def test_a_tool_following_the_checklist_has_no_findings() -> None:
    assert lint_tool("send_notification", GOOD) == []


@pytest.mark.parametrize("name", ["weather", "tool1", "do_stuff", "calculate"])
def test_names_that_are_not_verb_noun_are_flagged(name: str) -> None:
    [finding] = [f for f in lint_tool(name, GOOD) if f.parameter == ""]
    assert finding.tool == name and finding.severity == "warning"


@pytest.mark.parametrize("name", ["get_weather", "searchFiles", "create-notion-page"])
def test_verb_noun_names_pass(name: str) -> None:
    assert not [f for f in lint_tool(name, GOOD) if "name" in f.message]


def test_missing_tool_description_is_flagged() -> None:
    tool = dict(GOOD, description="")
    assert "tool has no description" in messages(lint_tool("send_notification", tool))


def test_vague_short_description_is_flagged() -> None:
    for text in ("Weather tool", "天气工具"):
        assert any(
            "too short" in m
            for m in messages(lint_tool("get_weather", dict(GOOD, description=text)))
        )


def test_description_not_saying_what_comes_out_is_flagged() -> None:
    tool = dict(GOOD, description="Sends a push notification to the user's phone right away")
    assert any("returns" in m for m in messages(lint_tool("send_notification", tool)))


def test_parameter_without_description_is_flagged() -> None:
    [finding] = lint_tool("send_notification", with_param(type="string"))
    assert (finding.parameter, finding.message) == ("extra", "parameter has no description")


def test_required_name_missing_from_properties_is_flagged() -> None:
    tool = json.loads(json.dumps(GOOD))
    tool["parameters"]["required"].append("ghost")
    [finding] = lint_tool("send_notification", tool)
    assert finding.parameter == "ghost" and "not defined" in finding.message


@pytest.mark.parametrize(
    "text", ["One of low, normal, high", "low|normal|high", "优先级：低、中、高"]
)
def test_values_listed_in_prose_instead_of_enum_are_flagged(text: str) -> None:
    findings = lint_tool("send_notification", with_param(type="string", description=text))
    assert any("enum" in m for m in messages(findings))


def test_examples_in_a_description_are_not_mistaken_for_an_enum() -> None:
    text = "Unit to convert from, e.g. 'km', 'lb', 'F'"
    assert lint_tool("send_notification", with_param(type="string", description=text)) == []


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"type": "integer", "default": "ten"}, "does not match type"),
        ({"type": "string", "enum": ["a", "b"], "default": "c"}, "not one of the enum"),
        ({"type": "integer", "minimum": 5, "maximum": 1}, "greater than maximum"),
        ({"type": "integer", "minimum": 1, "maximum": 5, "default": 9}, "above maximum"),
        ({"type": "number", "minimum": 1, "default": 0}, "below minimum"),
    ],
)
def test_bad_defaults_and_ranges_are_flagged(spec: dict[str, Any], fragment: str) -> None:
    findings = lint_tool("send_notification", with_param(description="An extra knob", **spec))
    assert any(fragment in m for m in messages(findings))


def test_more_than_eight_tools_in_a_toolset_is_flagged() -> None:
    tools = [(f"get_item{i}x", "big", GOOD) for i in range(9)]
    tools.append(("send_notification", "small", GOOD))
    findings = [f for f in lint_tools(tools) if "toolset" in f.message]
    assert messages(findings) == [
        "toolset 'big' has 9 tools; more than 8 makes it hard for the model to choose"
    ]


def test_tools_json_plain_list_is_read(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([GOOD]))
    assert load_tools_json(path) == {"send_notification": GOOD}


def test_tools_json_openai_wrapped_list_is_read(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([{"type": "function", "function": GOOD}]))
    assert load_tools_json(path) == {"send_notification": GOOD}


@pytest.mark.parametrize("content", ["{not json", '{"name": "x"}', '[{"description": "x"}]'])
def test_malformed_tools_json_is_an_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "tools.json"
    path.write_text(content)
    with pytest.raises(ToolsJsonError):
        load_tools_json(path)
