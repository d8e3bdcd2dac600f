"""The tool call pipeline: arguments, hooks, approval, handler bounds, results, sync entry."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from hermesd.runtime.hooks import HookBus
from hermesd.runtime.session import current_session
from hermesd.runtime.workers import WorkerPool
from hermesd.tools.registry import ToolRegistry
from tests.support.plugin_factory import schema


@pytest.fixture
def registry() -> ToolRegistry:
    pool = WorkerPool(16)
    return ToolRegistry(HookBus(pool, timeout=0.5), pool=pool, timeout=0.5, env={})


@pytest.fixture
def release() -> Any:
    event = threading.Event()
    yield event
    event.set()


def call(registry: ToolRegistry, name: str, args: Any, **kw: Any) -> Any:
    return json.loads(asyncio.run(registry.call(name, args, session_id="s1", **kw)))


def echo(args: dict[str, Any], **kwargs: Any) -> str:
    return json.dumps({"args": args})


def observe(registry: ToolRegistry, hook: str = "post_tool_call") -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    registry.hooks.register("observer", hook, lambda **kw: seen.append(kw))
    return seen


COUNT = {
    "name": "count_things",
    "description": "Count things and return the count",
    "parameters": {
        "type": "object",
        "required": ["count"],
        "properties": {
            "count": {"type": "integer", "description": "how many"},
            "mode": {"type": "string", "enum": ["fast", "slow"], "description": "speed"},
            "note": {"type": "string", "description": "optional note"},
        },
    },
}


def test_unknown_tool_returns_the_reference_error(registry: ToolRegistry) -> None:
    assert asyncio.run(registry.call("nope", {})) == '{"error": "Unknown tool: nope"}'


def test_arguments_given_as_a_json_string_are_parsed(registry: ToolRegistry) -> None:
    registry.register("echo_args", "t", schema("echo_args", text="string"), echo)
    assert call(registry, "echo_args", '{"text": "hi"}') == {"args": {"text": "hi"}}


def test_unparseable_arguments_become_an_error_result(registry: ToolRegistry) -> None:
    ran: list[bool] = []
    registry.register("echo_args", "t", schema("echo_args"), lambda a: ran.append(True) or "{}")
    result = call(registry, "echo_args", '{"text": ')
    assert "not valid JSON" in result["error"] and not ran


def test_arguments_that_are_not_an_object_are_an_error(registry: ToolRegistry) -> None:
    registry.register("echo_args", "t", schema("echo_args"), echo)
    assert "must be a JSON object" in call(registry, "echo_args", "[1, 2]")["error"]


def test_empty_argument_string_means_no_arguments(registry: ToolRegistry) -> None:
    registry.register("echo_args", "t", schema("echo_args"), echo)
    assert call(registry, "echo_args", "") == {"args": {}}


def test_missing_required_parameter_is_named(registry: ToolRegistry) -> None:
    registry.register("count_things", "t", COUNT, echo)
    assert call(registry, "count_things", {"mode": "fast"}) == {
        "error": "Invalid arguments for tool 'count_things': missing required parameter 'count'"
    }


@pytest.mark.parametrize(
    "args, message",
    [
        ({"count": "3"}, "parameter 'count' must be integer, got string"),
        ({"count": True}, "parameter 'count' must be integer, got boolean"),
        ({"count": 1.5}, "parameter 'count' must be integer, got number"),
        ({"count": 1, "note": 7}, "parameter 'note' must be string, got integer"),
        ({"count": 1, "mode": "warp"}, 'parameter \'mode\' must be one of "fast", "slow"'),
    ],
)
def test_wrong_argument_types_are_an_error_naming_the_parameter(
    registry: ToolRegistry, args: dict[str, Any], message: str
) -> None:
    registry.register("count_things", "t", COUNT, echo)
    assert call(registry, "count_things", args)["error"].endswith(message)


def test_integral_float_and_null_optional_arguments_pass(registry: ToolRegistry) -> None:
    registry.register("count_things", "t", COUNT, echo)
    result = call(registry, "count_things", {"count": 3.0, "note": None})
    assert result == {"args": {"count": 3.0, "note": None}}


def test_pre_tool_call_block_stops_the_tool(registry: ToolRegistry) -> None:
    ran: list[bool] = []
    registry.register("rm_files", "t", schema("rm_files"), lambda a: ran.append(True) or "{}")
    registry.hooks.register(
        "guard", "pre_tool_call", lambda tool_name, **kw: {"action": "block", "message": "no rm"}
    )
    seen = observe(registry)
    assert call(registry, "rm_files", {}) == {"error": "no rm"}
    assert not ran and seen[0]["status"] == "blocked"


def test_pre_tool_call_hook_receives_the_call_ids(registry: ToolRegistry) -> None:
    registry.register("echo_args", "t", schema("echo_args"), echo)
    seen = observe(registry, "pre_tool_call")
    call(registry, "echo_args", {}, tool_call_id="call_1")
    assert {
        k: seen[0][k] for k in ("tool_name", "args", "task_id", "session_id", "tool_call_id")
    } == {
        "tool_name": "echo_args",
        "args": {},
        "task_id": "s1",
        "session_id": "s1",
        "tool_call_id": "call_1",
    }


def test_approver_can_block_and_sees_the_call(registry: ToolRegistry) -> None:
    asked: list[tuple[str, dict[str, Any], str]] = []

    async def approver(tool: str, args: dict[str, Any], session: str) -> str | None:
        asked.append((tool, args, session))
        return "BLOCKED: Command denied by user"

    registry.approver = approver
    registry.register("echo_args", "t", schema("echo_args"), echo)
    assert call(registry, "echo_args", {}) == {"error": "BLOCKED: Command denied by user"}
    assert asked == [("echo_args", {}, "s1")]


def test_approver_that_raises_blocks_the_call(registry: ToolRegistry) -> None:
    async def approver(tool: str, args: dict[str, Any], session: str) -> str | None:
        raise RuntimeError("broker down")

    registry.approver = approver
    registry.register("echo_args", "t", schema("echo_args"), echo)
    assert call(registry, "echo_args", {})["error"].startswith("BLOCKED")


def test_handler_gets_only_the_kwargs_it_accepts(registry: ToolRegistry) -> None:
    registry.register("bare_args", "t", schema("bare_args"), lambda args: json.dumps(args))
    registry.register(
        "with_task",
        "t",
        schema("with_task"),
        lambda args, task_id: json.dumps({"task_id": task_id}),
    )
    registry.register("with_all", "t", schema("with_all"), lambda args, **kw: json.dumps(kw))
    assert call(registry, "bare_args", {}) == {}
    assert call(registry, "with_task", {}) == {"task_id": "s1"}
    assert call(registry, "with_all", {}, tool_call_id="c") == {
        "task_id": "s1",
        "session_id": "s1",
        "tool_call_id": "c",
    }


def test_sync_handler_runs_on_a_worker_thread(registry: ToolRegistry) -> None:
    registry.register(
        "where_am_i",
        "t",
        schema("where_am_i"),
        lambda args: json.dumps(threading.current_thread().name),
    )

    async def main() -> tuple[str, str]:
        return (await registry.call("where_am_i", {}), threading.current_thread().name)

    worker, loop_thread = asyncio.run(main())
    assert json.loads(worker) != loop_thread


def test_async_handler_is_awaited(registry: ToolRegistry) -> None:
    async def handler(args: dict[str, Any], session_id: str) -> str:
        await asyncio.sleep(0)
        return json.dumps({"session": session_id})

    registry.register("async_tool", "t", schema("async_tool"), handler, is_async=True)
    assert call(registry, "async_tool", {}) == {"session": "s1"}


def test_is_async_flag_on_a_sync_handler_still_runs_it_off_the_loop(registry: ToolRegistry) -> None:
    registry.register(
        "liar_tool",
        "t",
        schema("liar_tool"),
        lambda args: json.dumps(threading.current_thread().name),
        is_async=True,
    )
    assert call(registry, "liar_tool", {}).startswith("hermesd-plugin")


def test_raising_handler_gives_the_reference_error(registry: ToolRegistry) -> None:
    def broken(args: dict[str, Any]) -> str:
        raise ValueError("bad input")

    registry.register("broken_tool", "t", schema("broken_tool"), broken)
    seen = observe(registry)
    assert call(registry, "broken_tool", {}) == {
        "error": "Tool execution failed: ValueError: bad input"
    }
    assert seen[0]["status"] == "error" and seen[0]["error_type"] == "ValueError"


def test_handler_calling_sys_exit_does_not_stop_the_daemon(registry: ToolRegistry) -> None:
    def quitter(args: dict[str, Any]) -> str:
        raise SystemExit(2)

    registry.register("quit_tool", "t", schema("quit_tool"), quitter)
    assert call(registry, "quit_tool", {}) == {
        "error": "Tool execution failed: PluginAbort: SystemExit: 2"
    }


def test_handler_raising_its_own_timeout_error_is_not_a_pipeline_timeout(
    registry: ToolRegistry,
) -> None:
    def upstream(args: dict[str, Any]) -> str:
        raise TimeoutError("upstream API")

    registry.register("slow_api", "t", schema("slow_api"), upstream)
    assert call(registry, "slow_api", {}) == {
        "error": "Tool execution failed: TimeoutError: upstream API"
    }


def test_hanging_sync_handler_times_out(registry: ToolRegistry, release: threading.Event) -> None:
    registry.register("hang_tool", "t", schema("hang_tool"), lambda args: release.wait(10) and "")
    seen = observe(registry)
    started = time.monotonic()
    assert call(registry, "hang_tool", {}) == {"error": "Tool 'hang_tool' timed out after 0.5s"}
    assert time.monotonic() - started < 3
    assert seen[0]["status"] == "timeout"


def test_a_stuck_handler_does_not_hold_up_other_calls(
    registry: ToolRegistry, release: threading.Event
) -> None:
    registry.register("hang_tool", "t", schema("hang_tool"), lambda args: release.wait(10) and "")
    registry.register("echo_args", "t", schema("echo_args"), echo)

    async def main() -> list[str]:
        return await asyncio.gather(
            registry.call("hang_tool", {}), registry.call("echo_args", {"n": 1})
        )

    started = time.monotonic()
    stuck, fine = asyncio.run(main())
    assert json.loads(fine) == {"args": {"n": 1}} and "timed out" in stuck
    assert time.monotonic() - started < 3


def test_concurrent_sync_calls_run_in_parallel() -> None:
    pool = WorkerPool(16)
    registry = ToolRegistry(HookBus(pool, timeout=10), pool=pool, timeout=10, env={})
    together = threading.Barrier(4, timeout=5)  # breaks unless all four run at once

    def meet(args: dict[str, Any]) -> str:
        together.wait()
        return "{}"

    registry.register("meet_tool", "t", schema("meet_tool"), meet)

    async def main() -> list[str]:
        return await asyncio.gather(*(registry.call("meet_tool", {}) for _ in range(4)))

    assert asyncio.run(main()) == ["{}"] * 4


def test_hanging_async_handler_times_out(registry: ToolRegistry) -> None:
    async def sleepy(args: dict[str, Any]) -> str:
        await asyncio.sleep(10)
        return "{}"

    registry.register("sleepy_tool", "t", schema("sleepy_tool"), sleepy)
    assert call(registry, "sleepy_tool", {}) == {"error": "Tool 'sleepy_tool' timed out after 0.5s"}


def test_dict_and_list_results_are_serialized(registry: ToolRegistry) -> None:
    registry.register("dict_tool", "t", schema("dict_tool"), lambda args: {"n": 42})
    registry.register("list_tool", "t", schema("list_tool"), lambda args: [1, "two"])
    assert call(registry, "dict_tool", {}) == {"n": 42}
    assert call(registry, "list_tool", {}) == [1, "two"]


@pytest.mark.parametrize("value, kind", [(42, "int"), (None, "NoneType"), (b"x", "bytes")])
def test_other_non_string_results_are_an_error(
    registry: ToolRegistry, value: Any, kind: str
) -> None:
    registry.register("odd_tool", "t", schema("odd_tool"), lambda args: value)
    assert call(registry, "odd_tool", {}) == {
        "error": f"Tool 'odd_tool' returned {kind}, not a JSON string"
    }


def test_unserializable_dict_result_is_an_error(registry: ToolRegistry) -> None:
    registry.register("odd_tool", "t", schema("odd_tool"), lambda args: {"x": object()})
    assert "not JSON-serializable" in call(registry, "odd_tool", {})["error"]


def test_huge_result_is_cut_to_the_budget_with_a_note(registry: ToolRegistry) -> None:
    registry.result_budget = 1000
    registry.register("big_tool", "t", schema("big_tool"), lambda args: "x" * 5000)
    seen = observe(registry)
    result = asyncio.run(registry.call("big_tool", {}))
    assert result.startswith("x" * 1000) and not result.startswith("x" * 1001)
    assert "truncated: 4000 more characters" in result
    assert seen[0]["result"] == result


def test_post_tool_call_reports_duration_and_status(registry: ToolRegistry) -> None:
    registry.register(
        "nap_tool", "t", schema("nap_tool"), lambda args: time.sleep(0.05) or '{"ok": true}'
    )
    seen = observe(registry)
    call(registry, "nap_tool", {"a": 1}, tool_call_id="c9")
    [event] = seen
    assert event["tool_name"] == "nap_tool" and event["args"] == {"a": 1}
    assert event["status"] == "ok" and event["duration_ms"] >= 50
    assert event["tool_call_id"] == "c9" and event["result"] == '{"ok": true}'


def test_tool_reporting_an_error_in_its_json_has_status_error(registry: ToolRegistry) -> None:
    registry.register("sad_tool", "t", schema("sad_tool"), lambda args: '{"error": "meh"}')
    seen = observe(registry)
    call(registry, "sad_tool", {})
    assert seen[0]["status"] == "error" and seen[0]["error_message"] == "meh"


def test_transform_tool_result_replaces_the_result(registry: ToolRegistry) -> None:
    registry.register("echo_args", "t", schema("echo_args"), echo)
    registry.hooks.register(
        "t",
        "transform_tool_result",
        lambda result, **kw: json.dumps({"wrapped": json.loads(result)}),
    )
    assert call(registry, "echo_args", {"a": 1}) == {"wrapped": {"args": {"a": 1}}}


def test_redactor_applies_before_hooks_and_model_see_the_result(registry: ToolRegistry) -> None:
    registry.redactor = lambda text: text.replace("hunter2", "***")
    registry.register("leaky_tool", "t", schema("leaky_tool"), lambda args: '{"pw": "hunter2"}')
    seen = observe(registry)
    assert call(registry, "leaky_tool", {}) == {"pw": "***"}
    assert "hunter2" not in seen[0]["result"]


def test_handler_thread_sees_the_current_session(registry: ToolRegistry) -> None:
    registry.register(
        "who_tool", "t", schema("who_tool"), lambda args: json.dumps(current_session.get())
    )
    assert call(registry, "who_tool", {}) == "s1"


# -- the sync entry ----------------------------------------------------------------------------


def test_call_sync_from_a_plugin_thread_runs_on_the_daemon_loop(registry: ToolRegistry) -> None:
    registry.register("loop_tool", "t", schema("loop_tool"), echo)
    seen = observe(registry)
    results: list[str] = []

    async def main() -> None:
        registry.attach_loop(asyncio.get_running_loop())
        thread = threading.Thread(
            target=lambda: results.append(
                registry.call_sync("loop_tool", {"x": 1}, session_id="s2")
            )
        )
        thread.start()
        # the nested call runs on this loop, so wait without blocking it
        await asyncio.to_thread(thread.join)

    asyncio.run(main())
    assert json.loads(results[0]) == {"args": {"x": 1}}
    assert seen[0]["session_id"] == "s2"


def test_call_sync_on_the_loop_thread_does_not_deadlock(registry: ToolRegistry) -> None:
    registry.register("loop_tool", "t", schema("loop_tool"), echo)

    async def main() -> str:
        registry.attach_loop(asyncio.get_running_loop())
        return registry.call_sync("loop_tool", {"y": 2})  # a careless plugin on the loop

    assert json.loads(asyncio.run(main())) == {"args": {"y": 2}}


def test_call_sync_from_inside_a_handler_goes_through_the_pipeline(registry: ToolRegistry) -> None:
    registry.register("inner_tool", "t", schema("inner_tool"), echo)
    registry.register(
        "outer_tool",
        "t",
        schema("outer_tool"),
        lambda args: registry.call_sync("inner_tool", {"n": 1}),
    )
    seen = observe(registry)
    assert call(registry, "outer_tool", {}) == {"args": {"n": 1}}
    assert [e["tool_name"] for e in seen] == ["inner_tool", "outer_tool"]
    assert seen[0]["session_id"] == ""  # call_sync's own session_id argument


def test_call_sync_without_any_loop_runs_inline(registry: ToolRegistry) -> None:
    registry.register("plain_tool", "t", schema("plain_tool"), echo)
    assert json.loads(registry.call_sync("plain_tool", '{"z": 3}')) == {"args": {"z": 3}}
