"""Registering tools: validation, toolset clashes, override, rollback, and the model's list."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from hermesd.runtime.hooks import HookBus
from hermesd.runtime.workers import WorkerPool
from hermesd.tools.registry import BUILTIN, ToolRegistry
from hermesd.tools.schema import ToolRejected
from tests.support.plugin_factory import schema


def handler(args: dict[str, Any], **kwargs: Any) -> str:
    return "{}"


@pytest.fixture
def registry() -> ToolRegistry:
    pool = WorkerPool(8)
    return ToolRegistry(HookBus(pool), pool=pool, check_timeout=0.3, env={})


def test_builtin_and_plugin_tools_share_one_registry(registry: ToolRegistry) -> None:
    registry.register("read_file", "files", schema("read_file", path="string"), handler)
    registry.register(
        "get_weather", "weather", schema("get_weather", city="string"), handler, owner="weather"
    )
    assert [(e.name, e.owner) for e in registry.entries()] == [
        ("read_file", BUILTIN),
        ("get_weather", "weather"),
    ]


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "ünicode", "semi;colon", None])
def test_invalid_tool_names_are_rejected(registry: ToolRegistry, name: Any) -> None:
    with pytest.raises(ToolRejected, match="invalid tool name"):
        registry.register(name, "t", schema("x"), handler)
    assert registry.entries() == []


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("not a dict", "must be a dict"),
        ({"description": "no params"}, "no 'parameters' dict"),
        ({"parameters": {"type": "array"}}, 'must have "type": "object"'),
        ({"parameters": {"properties": {}}}, 'must have "type": "object"'),
        ({"parameters": {"type": "object", "properties": []}}, "properties' of tool"),
    ],
)
def test_schemas_without_an_object_parameters_dict_are_rejected(
    registry: ToolRegistry, bad: Any, reason: str
) -> None:
    with pytest.raises(ToolRejected, match=reason):
        registry.register("get_thing", "t", bad, handler)


def test_non_callable_handler_is_rejected(registry: ToolRegistry) -> None:
    with pytest.raises(ToolRejected, match="not callable"):
        registry.register("get_thing", "t", schema("get_thing"), "nope")  # type: ignore[arg-type]


def test_description_comes_from_schema_else_from_argument(registry: ToolRegistry) -> None:
    no_desc = {"parameters": {"type": "object", "properties": {}}}
    registry.register("a_tool", "t", no_desc, handler, description="from argument")
    registry.register("b_tool", "t", schema("b_tool"), handler, description="ignored")
    functions = {t["function"]["name"]: t["function"] for t in registry.openai_tools()}
    assert functions["a_tool"]["description"] == "from argument"
    assert functions["b_tool"]["description"].startswith("Run b_tool")


def test_name_owned_by_another_toolset_is_rejected_naming_both(registry: ToolRegistry) -> None:
    registry.register("search", "web", schema("search"), handler)
    with pytest.raises(ToolRejected) as raised:
        registry.register("search", "files", schema("search"), handler, owner="p")
    assert "'files'" in str(raised.value) and "'web'" in str(raised.value)
    assert registry.get("search").toolset == "web"  # type: ignore[union-attr]


def test_override_replaces_and_removing_the_overrider_restores(registry: ToolRegistry) -> None:
    registry.register("search", "web", schema("search"), handler)
    registry.register("search", "better", schema("search"), handler, override=True, owner="p")
    assert registry.get("search").toolset == "better"  # type: ignore[union-attr]
    assert registry.unregister_owner("p") == ["search"]
    assert registry.get("search").toolset == "web"  # type: ignore[union-attr]


def test_unregister_owner_removes_only_that_owners_tools(registry: ToolRegistry) -> None:
    registry.register("one_tool", "a", schema("one_tool"), handler, owner="a")
    registry.register("two_tool", "b", schema("two_tool"), handler, owner="b")
    registry.unregister_owner("a")
    assert registry.tools_of("a") == [] and registry.tools_of("b") == ["two_tool"]


def test_openai_tools_have_the_function_wrapper(registry: ToolRegistry) -> None:
    registry.register("get_weather", "weather", schema("get_weather", city="string"), handler)
    [tool] = registry.openai_tools()
    assert tool["type"] == "function"
    assert set(tool["function"]) == {"name", "description", "parameters"}
    assert tool["function"]["parameters"]["required"] == ["city"]


def test_openai_tools_filters_by_enabled_toolsets(registry: ToolRegistry) -> None:
    registry.register("a_tool", "alpha", schema("a_tool"), handler)
    registry.register("b_tool", "beta", schema("b_tool"), handler)
    names = [t["function"]["name"] for t in registry.openai_tools({"beta"})]
    assert names == ["b_tool"]
    assert registry.openai_tools(["alpha", "beta"]) == registry.openai_tools(None)


@pytest.mark.parametrize("check", [lambda: False, lambda: None, lambda: 1 / 0])
def test_falsy_or_raising_check_fn_hides_the_tool(registry: ToolRegistry, check: Any) -> None:
    registry.register("hidden_tool", "t", schema("hidden_tool"), handler, check_fn=check)
    registry.register("shown_tool", "t", schema("shown_tool"), handler, check_fn=lambda: True)
    assert [t["function"]["name"] for t in registry.openai_tools()] == ["shown_tool"]


def test_check_fn_that_hangs_hides_the_tool(registry: ToolRegistry) -> None:
    release = threading.Event()
    registry.register(
        "slow_tool", "t", schema("slow_tool"), handler, check_fn=lambda: release.wait(10)
    )
    try:
        assert registry.openai_tools() == []
    finally:
        release.set()


def test_check_fn_result_is_cached_for_its_ttl(registry: ToolRegistry) -> None:
    calls: list[int] = []
    registry.register(
        "a_tool", "t", schema("a_tool"), handler, check_fn=lambda: calls.append(1) or True
    )
    for _ in range(3):
        assert len(registry.openai_tools()) == 1
    assert calls == [1]
    registry.checks.ttl = 0
    registry.openai_tools()
    assert len(calls) >= 2


def test_check_fn_runs_off_the_calling_thread(registry: ToolRegistry) -> None:
    threads: list[str] = []
    registry.register(
        "a_tool",
        "t",
        schema("a_tool"),
        handler,
        check_fn=lambda: threads.append(threading.current_thread().name) or True,
    )
    registry.openai_tools()
    assert threads and threads[0] != threading.current_thread().name


def test_tool_requires_env_hides_it_until_the_variable_is_set(registry: ToolRegistry) -> None:
    registry.register(
        "get_weather", "w", schema("get_weather"), handler, requires_env=["WEATHER_KEY"]
    )
    assert registry.openai_tools() == []
    registry.env = {"WEATHER_KEY": "k"}
    assert len(registry.openai_tools()) == 1


def test_tool_requires_env_accepts_rich_entries(registry: ToolRegistry) -> None:
    registry.register(
        "get_weather",
        "w",
        schema("get_weather"),
        handler,
        requires_env=[{"name": "WEATHER_KEY", "secret": True}],
    )
    assert registry.get("get_weather").requires_env == ("WEATHER_KEY",)  # type: ignore[union-attr]


def test_describe_lists_hidden_tools_with_their_availability(registry: ToolRegistry) -> None:
    registry.register(
        "a_tool", "t", schema("a_tool"), handler, check_fn=lambda: False, emoji="🔧", owner="p"
    )
    [row] = registry.describe()
    assert row["name"] == "a_tool" and row["available"] is False and row["owner"] == "p"
    assert row["emoji"] == "🔧" and row["enabled"] is True
