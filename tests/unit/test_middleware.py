"""The middleware bus on its own: request rewrites, nesting, next_call, failures
(docs/hermes-compat.md §11.1). The end-to-end behaviour is tests/e2e/test_middleware.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hermesd.runtime.middleware import MiddlewareBus, MiddlewareTimeout
from hermesd.runtime.workers import WorkerPool


@pytest.fixture
def bus() -> MiddlewareBus:
    return MiddlewareBus(WorkerPool(4), timeout=2.0)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_request_callbacks_see_a_copy_they_cannot_change_in_place(bus: MiddlewareBus) -> None:
    def meddle(*, args: dict[str, Any], **_: Any) -> None:
        args["x"] = "changed"

    bus.register("p", "tool_request", meddle)
    payload = {"x": "kept"}
    out = run(bus.apply_request("tool_request", "args", payload, {"tool_name": "t"}))
    assert out.payload == {"x": "kept"} and payload == {"x": "kept"}
    assert out.trace == []


def test_a_valid_return_replaces_the_payload_and_adds_a_trace_entry(bus: MiddlewareBus) -> None:
    bus.register("p", "tool_request", lambda **kw: {"args": {"x": 2}, "reason": "why"})
    bus.register("q", "tool_request", lambda *, args, **_: {"args": {"x": args["x"] + 1}})
    bus.register("r", "tool_request", lambda **kw: {"args": "not a dict"})
    out = run(bus.apply_request("tool_request", "args", {"x": 1}, {}))
    assert out.payload == {"x": 3}
    assert out.original == {"x": 1}
    assert out.trace == [{"reason": "why"}, {"source": "plugin"}]


def test_execution_callbacks_nest_in_registration_order(bus: MiddlewareBus) -> None:
    seen: list[str] = []

    def layer(name: str) -> Any:
        def callback(*, request: Any, next_call: Any, **_: Any) -> Any:
            seen.append(f"{name} in")
            result = next_call(request)
            seen.append(f"{name} out")
            return result

        return callback

    bus.register("a", "llm_execution", layer("a"))
    bus.register("b", "llm_execution", layer("b"))

    async def terminal(payload: Any) -> str:
        seen.append("call")
        return "answer"

    out = run(bus.run_execution("llm_execution", "request", {}, terminal, {}))
    assert out == "answer"
    assert seen == ["a in", "b in", "call", "b out", "a out"]


def test_next_call_with_a_payload_passes_it_down(bus: MiddlewareBus) -> None:
    bus.register("p", "tool_execution", lambda *, next_call, **_: next_call({"x": "new"}))

    async def terminal(payload: Any) -> Any:
        return payload

    assert run(bus.run_execution("tool_execution", "args", {"x": "old"}, terminal, {})) == {
        "x": "new"
    }


def test_a_callback_raising_before_next_call_is_skipped(bus: MiddlewareBus) -> None:
    def broken(**_: Any) -> Any:
        raise ValueError("boom")

    bus.register("p", "tool_execution", broken)
    calls: list[Any] = []

    async def terminal(payload: Any) -> str:
        calls.append(payload)
        return "ran"

    assert run(bus.run_execution("tool_execution", "args", {}, terminal, {})) == "ran"
    assert calls == [{}]


def test_a_downstream_failure_passes_through_unchanged(bus: MiddlewareBus) -> None:
    class Provider(Exception):
        pass

    bus.register("p", "llm_execution", lambda *, request, next_call, **_: next_call(request))

    async def terminal(payload: Any) -> Any:
        raise Provider("the endpoint said no")

    with pytest.raises(Provider, match="the endpoint said no"):
        run(bus.run_execution("llm_execution", "request", {}, terminal, {}))


def test_a_callback_that_hangs_before_next_call_refuses(bus: MiddlewareBus) -> None:
    import time

    bus.timeout = 0.5
    bus.register("p", "tool_execution", lambda **kw: time.sleep(3))

    async def terminal(payload: Any) -> str:
        raise AssertionError("must not run")

    with pytest.raises(MiddlewareTimeout, match=r"did not answer within 0\.5s"):
        run(bus.run_execution("tool_execution", "args", {}, terminal, {}))


def test_time_inside_next_call_does_not_count_against_the_callback(bus: MiddlewareBus) -> None:
    bus.timeout = 1.0
    bus.register("p", "llm_execution", lambda *, request, next_call, **_: next_call(request))

    async def terminal(payload: Any) -> str:
        await asyncio.sleep(2.5)  # a model stream longer than the callback's bound
        return "streamed"

    assert run(bus.run_execution("llm_execution", "request", {}, terminal, {})) == "streamed"


def test_unregistering_a_plugin_removes_its_callbacks(bus: MiddlewareBus) -> None:
    bus.register("p", "tool_request", lambda **kw: None)
    bus.register("p", "made_up_kind", lambda **kw: None)
    assert bus.kinds_of("p") == ["tool_request", "made_up_kind"]
    assert bus.unregister_plugin("p") == 2
    assert not bus.has("tool_request") and not bus.has("made_up_kind")
