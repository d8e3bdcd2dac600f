"""The agent loop end to end: real model server, real store, small fake registry and hooks."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.agent.loop import AgentLoop, AgentSettings, TurnResult, pre_llm_context
from hermesd.model.client import ModelClient, ModelSettings
from hermesd.runtime.hooks_surfaces import PluginSurfaces
from hermesd.runtime.middleware import MiddlewareBus
from hermesd.store.facade import SessionStore
from hermesd.store.history import repair_history
from hermesd.tools.toolsets import ToolSelection
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    http_error,
    reply,
    tool_call,
)


class FakeRegistry:
    """The ToolRegistry interface the loop codes against, with plain functions as tools."""

    def __init__(self, tools: dict[str, Callable[[dict[str, Any]], Any]]) -> None:
        self.tools = tools
        self.calls: list[tuple[str, Any, str | None]] = []
        self.turn_ids: list[str] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.selection = ToolSelection()  # the config's toolsets: everything

    def config_hides(self, name: str) -> bool:
        """The config hides no tool here."""
        return False

    def pin(self) -> None:
        """Nothing to pin: the tools never change during a test."""

    async def refresh_checks(self) -> None:
        """No check_fns to re-run."""

    def openai_tools(
        self, enabled_toolsets: list[str] | None = None, session_id: str | None = None
    ) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": f"the {name} tool",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
            for name in self.tools
        ]

    async def call(
        self,
        name: str,
        args: Any,
        *,
        session_id: str,
        tool_call_id: str | None = None,
        source: str = "model",
        turn_id: str = "",
        observers: list[Any] | None = None,
    ) -> str:
        self.calls.append((name, args, tool_call_id))
        self.turn_ids.append(turn_id)
        if name not in self.tools:
            return json.dumps({"error": f"Unknown tool: {name}"})
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            return json.dumps({"error": "Invalid JSON arguments"})
        out = self.tools[name](parsed)
        if inspect.isawaitable(out):
            out = await out
        return out if isinstance(out, str) else json.dumps(out)


class FakeHooks:
    """Records every invocation; returns canned results per hook name."""

    def __init__(self, results: dict[str, list[Any]] | None = None) -> None:
        self.results = results or {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.middleware = MiddlewareBus()  # none registered
        self.surfaces = PluginSurfaces()  # no prompt sections, references or stream hooks

    def has(self, hook_name: str) -> bool:
        return True  # every hook is recorded

    async def invoke(self, hook_name: str, **kwargs: Any) -> list[Any]:
        self.calls.append((hook_name, kwargs))
        return list(self.results.get(hook_name, []))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [kw for hook, kw in self.calls if hook == name]


def calculate(args: dict[str, Any]) -> dict[str, Any]:
    return {"result": 65536} if args.get("expression") == "2**16" else {"result": 42}


class Harness:
    def __init__(
        self,
        tmp_path: Path,
        server: ScriptedModelServer,
        *,
        tools: dict[str, Callable[[dict[str, Any]], Any]] | None = None,
        hooks: dict[str, list[Any]] | None = None,
        max_iterations: int = 25,
        base_url: str | None = "",
        **model: Any,
    ) -> None:
        self.server = server
        self.store = SessionStore(tmp_path / "state.db")
        self.registry = FakeRegistry(tools if tools is not None else {"calculate": calculate})
        self.hooks = FakeHooks(hooks)
        self.settings = ModelSettings(
            base_url=server.url if base_url == "" else base_url,
            model="test-model",
            timeout=5.0,
            **{"retry_max_wait": 0.05, **model},
        )
        self.agent_settings = AgentSettings(
            max_iterations=max_iterations,
            system_prompt="You are a test.",
            skills_index="Skills: none",
        )
        self.events: list[dict[str, Any]] = []
        self.sid = self.store.sessions.create()["id"]

    def agent(self) -> tuple[AgentLoop, ModelClient]:
        client = ModelClient(self.settings)
        return AgentLoop(self.store, self.registry, self.hooks, client, self.agent_settings), client

    async def aturn(self, text: str) -> TurnResult:
        agent, client = self.agent()
        try:
            return await agent.run_turn(self.sid, text, emit=self.events.append)
        finally:
            await client.aclose()

    def turn(self, text: str) -> TurnResult:
        return asyncio.run(self.aturn(text))

    def kinds(self) -> list[str]:
        return [e["type"] for e in self.events if e["type"] not in ("text.delta", "usage")]

    def stored(self) -> list[tuple[str, str | None]]:
        return [(m["role"], m["content"]) for m in self.store.messages.read(self.sid)]

    async def cancel_when(self, text: str, kind: str) -> None:
        """Start a turn, cancel it at the first event of ``kind``."""
        seen = asyncio.Event()
        agent, client = self.agent()

        def emit(event: dict[str, Any]) -> None:
            self.events.append(event)
            if event["type"] == kind:
                seen.set()

        task = asyncio.create_task(agent.run_turn(self.sid, text, emit=emit))
        await asyncio.wait_for(seen.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await client.aclose()


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as srv:
        yield srv


@pytest.fixture
def h(tmp_path: Path, server: ScriptedModelServer) -> Iterator[Harness]:
    harness = Harness(tmp_path, server)
    yield harness
    harness.store.close()


def assert_valid(messages: list[dict[str, Any]]) -> None:
    """Every tool call answered, no stray results: what OpenAI requires."""
    assert repair_history(messages) == messages


def test_a_tool_call_then_a_final_answer(h: Harness) -> None:
    h.server.push(
        call_tools(tool_call("calculate", {"expression": "2**16"}, "c1")),
        reply("2 to the 16th is 65536."),
    )
    result = h.turn("What is 2**16?")
    assert (result.status, result.final_text, result.iterations) == (
        "completed",
        "2 to the 16th is 65536.",
        2,
    )
    assert h.stored() == [
        ("user", "What is 2**16?"),
        ("assistant", None),
        ("tool", '{"result": 65536}'),
        ("assistant", "2 to the 16th is 65536."),
    ]
    second = h.server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[3] == {"role": "tool", "tool_call_id": "c1", "content": '{"result": 65536}'}
    assert h.kinds() == [
        "turn.started",
        "tool.started",
        "tool.finished",
        "message",
        "turn.finished",
    ]
    started, finished = (
        h.events[[e["type"] for e in h.events].index("tool.started")],
        next(e for e in h.events if e["type"] == "tool.finished"),
    )
    assert (started["name"], started["tool_call_id"], json.loads(started["arguments"])) == (
        "calculate",
        "c1",
        {"expression": "2**16"},
    )
    assert finished["status"] == "ok" and finished["duration_ms"] >= 0
    assert "65536" in finished["preview"]
    text = "".join(e["text"] for e in h.events if e["type"] == "text.delta")
    assert text == "2 to the 16th is 65536."
    assert all(e["turn_id"] == result.turn_id and e["session_id"] == h.sid for e in h.events)


def test_system_prompt_skills_index_and_tools_are_sent(h: Harness) -> None:
    h.server.push(reply("hi"))
    h.turn("hello")
    request = h.server.last_request
    assert request["messages"][0] == {
        "role": "system",
        "content": "You are a test.\n\nSkills: none",
    }
    assert [t["function"]["name"] for t in request["tools"]] == ["calculate"]
    assert request["model"] == "test-model"


def test_each_message_is_committed_before_the_model_is_asked_again(tmp_path: Path) -> None:
    seen: list[list[str]] = []
    harness: Harness

    def rules(request: dict[str, Any]) -> Any:
        seen.append([m["role"] for m in harness.store.messages.read(harness.sid)])
        if request["messages"][-1]["role"] == "tool":
            return reply("done")
        return call_tools(tool_call("calculate", {"expression": "1"}))

    with ScriptedModelServer(rules=rules) as srv:
        harness = Harness(tmp_path, srv)
        assert harness.turn("go").status == "completed"
        harness.store.close()
    assert seen == [["user"], ["user", "assistant", "tool"]]


def test_a_tool_runs_only_after_its_call_is_committed_even_behind_a_busy_db_thread(
    tmp_path: Path,
) -> None:
    # The old ordering bug: the tool call's write queued behind a long call on the DB thread
    # (indexing, a search) while the tool result's write ran elsewhere and committed first.
    harness: Harness
    held = threading.Event()
    seen_by_tool: list[list[str]] = []

    def hold_the_db_thread() -> None:
        held.set()
        time.sleep(0.3)  # a long search, say

    def rules(request: dict[str, Any]) -> Any:
        if request["messages"][-1]["role"] == "tool":
            return reply("done")
        harness.store.db.thread.submit(hold_the_db_thread)  # busy when the tool call is written
        assert held.wait(5)
        return call_tools(tool_call("look", {}))

    async def look(args: dict[str, Any]) -> str:
        messages = await harness.store.run(harness.store.messages.read, harness.sid)
        seen_by_tool.append([m["role"] for m in messages])
        return "looked"

    with ScriptedModelServer(rules=rules) as srv:
        harness = Harness(tmp_path, srv, tools={"look": look})
        assert harness.turn("go").status == "completed"
        stored = harness.store.messages.read(harness.sid)
        harness.store.close()
    assert seen_by_tool == [["user", "assistant"]]
    assert [(m["seq"], m["role"]) for m in stored] == [
        (1, "user"),
        (2, "assistant"),
        (3, "tool"),
        (4, "assistant"),
    ]
    assert stored[1]["tool_calls"] and stored[2]["tool_call_id"] == stored[1]["tool_calls"][0]["id"]


def test_a_tool_result_that_cannot_be_stored_fails_the_turn_before_the_next_request(
    h: Harness,
) -> None:
    async def delete_session(args: dict[str, Any]) -> str:
        await h.store.run(h.store.sessions.delete, h.sid)
        return "gone"

    h.registry.tools["wipe"] = delete_session
    h.server.push(call_tools(tool_call("wipe", {})), reply("never asked for"))
    result = h.turn("q")
    assert result.status == "failed" and result.error_type == "SessionNotFound"
    assert len(h.server.requests) == 1
    assert h.kinds()[-1] == "turn.finished"


def test_pre_llm_call_context_reaches_the_request_but_not_the_database(h: Harness) -> None:
    h.hooks.results["pre_llm_call"] = [{"context": "CTX-ONE"}, "CTX-TWO", {"other": 1}, "  "]
    h.server.push(reply("first"), reply("second"))
    h.turn("question one")
    assert h.server.requests[0]["messages"][-1] == {
        "role": "user",
        "content": "question one\n\nCTX-ONE\n\nCTX-TWO",
    }
    assert h.server.requests[0]["messages"][0]["content"] == "You are a test.\n\nSkills: none"
    assert ("user", "question one") in h.stored()
    assert not any("CTX" in (content or "") for _, content in h.stored())
    h.turn("question two")
    earlier = h.server.requests[1]["messages"][1]
    assert earlier == {"role": "user", "content": "question one"}


def test_pre_llm_context_joining() -> None:
    assert pre_llm_context([{"context": "a"}, None, "b", {"context": ""}, 3]) == "a\n\nb"
    assert pre_llm_context([]) == ""


def test_turn_hooks_get_the_documented_kwargs(h: Harness) -> None:
    h.server.push(
        call_tools(tool_call("calculate", {"expression": "1"})), reply("one"), reply("two")
    )
    first = h.turn("first")
    h.turn("second")
    [start] = h.hooks.named("on_session_start")
    assert (start["session_id"], start["model"], start["platform"]) == (h.sid, "test-model", "cli")
    pre = h.hooks.named("pre_llm_call")
    assert [p["is_first_turn"] for p in pre] == [True, False]
    assert pre[0]["user_message"] == "first" and pre[0]["conversation_history"] == []
    assert [m["role"] for m in pre[1]["conversation_history"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert {"sender_id", "turn_id", "platform", "model"} <= set(pre[0])
    requests = h.hooks.named("pre_api_request")
    assert len(requests) == 3 and requests[0]["turn_id"] == first.turn_id
    assert requests[0]["request"]["messages"][-1]["content"] == "first"
    assert {
        "api_request_id",
        "api_call_count",
        "message_count",
        "tool_count",
        "approx_input_tokens",
        "provider",
        "base_url",
        "retry_count",
    } <= set(requests[0])
    posts = h.hooks.named("post_api_request")
    assert [p["api_request_id"] for p in posts] == [r["api_request_id"] for r in requests]
    assert posts[0]["finish_reason"] == "tool_calls" and posts[0]["usage"]["total_tokens"] > 0
    ends = h.hooks.named("on_session_end")
    assert [(e["completed"], e["interrupted"], e["turn_exit_reason"]) for e in ends] == [
        (True, False, "completed")
    ] * 2
    [post, _] = h.hooks.named("post_llm_call")
    assert (post["user_message"], post["assistant_response"]) == ("first", "one")
    assert [m["role"] for m in post["conversation_history"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    streamed = ("on_stream_start", "on_stream_delta", "on_stream_end", "on_interim_message")
    order = [name for name, _ in h.hooks.calls if name not in streamed][:6]
    assert order == [
        "on_session_start",
        "pre_llm_call",
        "pre_api_request",
        "post_api_request",
        "pre_api_request",
        "post_api_request",
    ]


def test_transform_llm_output_replaces_the_stored_answer(h: Harness) -> None:
    h.hooks.results["transform_llm_output"] = [None, "REDACTED", "ignored"]
    h.server.push(reply("secret answer"))
    result = h.turn("q")
    assert result.final_text == "REDACTED" and h.stored()[-1] == ("assistant", "REDACTED")
    assert h.hooks.named("transform_llm_output")[0]["response_text"] == "secret answer"
    assert [e["content"] for e in h.events if e["type"] == "message"] == ["REDACTED"]


def test_unknown_tools_and_bad_arguments_become_results(h: Harness) -> None:
    h.server.push(
        call_tools(tool_call("nope", {}), tool_call("calculate", '{"expr": ')), reply("sorry")
    )
    assert h.turn("q").status == "completed"
    results = [
        json.loads(m["content"]) for m in h.server.requests[1]["messages"] if m["role"] == "tool"
    ]
    assert results == [{"error": "Unknown tool: nope"}, {"error": "Invalid JSON arguments"}]
    assert [e["status"] for e in h.events if e["type"] == "tool.finished"] == ["error", "error"]


def test_parallel_tool_calls_run_in_the_models_order(h: Harness) -> None:
    h.registry.tools["unit_convert"] = lambda a: {"result": a["v"]}
    h.server.push(
        call_tools(
            tool_call("unit_convert", {"v": 1}, "a"),
            tool_call("calculate", {"expression": "2**16"}, "b"),
            tool_call("unit_convert", {"v": 3}, "c"),
        ),
        reply("done"),
    )
    turn = h.turn("q")
    assert [c[2] for c in h.registry.calls] == ["a", "b", "c"]
    assert h.registry.turn_ids == [turn.turn_id] * 3
    assert [m.get("tool_call_id") for m in h.server.requests[1]["messages"][3:]] == ["a", "b", "c"]


def test_max_iterations_ends_the_turn_with_a_clear_message(tmp_path: Path) -> None:
    with ScriptedModelServer(rules=lambda r: call_tools(tool_call("calculate", {}))) as srv:
        harness = Harness(tmp_path, srv, max_iterations=3)
        result = harness.turn("loop forever")
    assert len(srv.requests) == 3 and result.iterations == 3
    assert result.status == "completed" and result.exit_reason == "max_iterations"
    assert "agent.max_iterations" in (result.final_text or "")
    history = harness.store.messages.history(harness.sid)
    assert_valid(history) and history[-1]["role"] == "assistant"
    assert harness.hooks.named("on_session_end")[0]["turn_exit_reason"] == "max_iterations"


def test_usage_is_added_to_the_session(h: Harness) -> None:
    h.server.push(
        reply("a", usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})
    )
    result = h.turn("q")
    assert result.usage == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assert h.store.sessions.get(h.sid)["total_tokens"] == 10
    assert [e["total_tokens"] for e in h.events if e["type"] == "usage"] == [10]


def test_chunks_read_together_are_one_delta_paced_ones_stream_one_by_one(h: Harness) -> None:
    burst = "chunk 01 " * 20  # every chunk ends a word: redaction holds nothing back
    h.server.push(reply(burst, chunk_chars=9))  # 20 chunks written back to back
    h.turn("q")
    deltas = [e["text"] for e in h.events if e["type"] == "text.delta"]
    assert "".join(deltas) == burst and len(deltas) < 20
    h.events.clear()
    h.server.push(reply("paced words here", chunk_chars=6, chunk_delay=0.04))
    h.turn("again")
    deltas = [e["text"] for e in h.events if e["type"] == "text.delta"]
    # redaction holds a word back until the next one starts, so the pieces shift by a word;
    # three as they come (a stall on a loaded machine may join two of them)
    assert "".join(deltas) == "paced words here" and 2 <= len(deltas) <= 3


def test_cancel_mid_stream_leaves_a_valid_history(h: Harness) -> None:
    h.server.push(reply("a long answer that streams slowly", chunk_chars=2, chunk_delay=0.05))
    asyncio.run(h.cancel_when("q", "text.delta"))
    assert h.stored() == [("user", "q")]
    finished = h.events[-1]
    assert (finished["type"], finished["status"]) == ("turn.finished", "cancelled")
    [end] = h.hooks.named("on_session_end")
    assert (end["completed"], end["interrupted"]) == (False, True)
    assert h.hooks.named("post_llm_call") == []
    h.server.push(reply("fresh"))
    assert h.turn("again").final_text == "fresh"


def test_cancel_mid_tool_answers_every_unfinished_call(h: Harness) -> None:
    async def stuck(args: dict[str, Any]) -> str:
        await asyncio.Event().wait()
        return "never"

    h.registry.tools["slow"] = stuck
    h.server.push(call_tools(tool_call("slow", {}, "s1"), tool_call("calculate", {}, "c2")))
    asyncio.run(h.cancel_when("q", "tool.started"))
    msgs = h.store.messages.read(h.sid)
    assert [(m["role"], m["tool_call_id"]) for m in msgs] == [
        ("user", None),
        ("assistant", None),
        ("tool", "s1"),
        ("tool", "c2"),
    ]
    assert "cancelled" in json.loads(msgs[2]["content"] or "")["error"]
    assert_valid(h.store.messages.history(h.sid))
    h.server.push(reply("ok"))
    assert h.turn("next").status == "completed"
    assert_valid(h.server.last_request["messages"])


def test_a_crash_mid_tool_is_repaired_before_the_next_request(h: Harness) -> None:
    h.store.messages.append(h.sid, "user", "q")
    h.store.messages.append(
        h.sid,
        "assistant",
        None,
        tool_calls=[
            {"id": "x1", "type": "function", "function": {"name": "calculate", "arguments": "{}"}}
        ],
    )
    h.server.push(reply("resumed"))
    assert h.turn("are you there?").status == "completed"
    sent = h.server.last_request["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    assert "interrupted" in json.loads(sent[3]["content"])["error"]
    assert h.store.messages.read(h.sid)[2]["tool_call_id"] == "x1"  # the repair is persisted


def test_a_429_is_retried_after_its_retry_after(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    harness = Harness(tmp_path, server, retry_max_wait=1.0)
    server.push(http_error(429, "slow down", retry_after=0.2), reply("ok"))
    assert harness.turn("q").final_text == "ok"
    assert server.request_times[1] - server.request_times[0] >= 0.2
    [retry] = [e for e in harness.events if e["type"] == "model.retry"]
    assert retry["delay"] == 0.2 and "slow down" in retry["error"]
    [err] = harness.hooks.named("api_request_error")
    assert (err["status_code"], err["retryable"], err["retry_count"]) == (429, True, 0)


def test_retry_after_is_capped_by_configuration(h: Harness) -> None:
    h.server.push(http_error(429, retry_after=60), reply("ok"))
    assert h.turn("q").final_text == "ok"
    [retry] = [e for e in h.events if e["type"] == "model.retry"]
    assert retry["delay"] == 0.05  # the harness's retry_max_wait, not the server's 60 s


def test_a_failing_model_fails_the_turn_but_keeps_the_question(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    harness = Harness(tmp_path, server, max_retries=1)
    server.push(http_error(500, "kaput"), http_error(500, "kaput"))
    result = harness.turn("q")
    assert result.status == "failed" and "HTTP 500: kaput" in (result.error or "")
    assert result.error_type == "ModelRequestFailed"
    assert harness.stored() == [("user", "q")]
    assert [e["retryable"] for e in harness.hooks.named("api_request_error")] == [True, False]
    [end] = harness.hooks.named("on_session_end")
    assert (end["completed"], end["failed"], end["interrupted"]) == (False, True, False)
    assert harness.events[-1]["status"] == "failed"


def test_an_unconfigured_model_fails_without_storing_anything(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    harness = Harness(tmp_path, server, base_url=None)
    result = harness.turn("q")
    assert result.status == "failed" and result.error_type == "ModelNotConfigured"
    assert "model.base_url" in (result.error or "")
    assert harness.stored() == [] and server.requests == []


def test_an_unknown_session_fails_clearly(h: Harness) -> None:
    h.sid = "missing"
    result = h.turn("q")
    assert result.status == "failed" and result.error == "Session not found: missing"


def test_runs_with_the_real_registry_and_hook_bus(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    from hermesd.daemon import config
    from hermesd.runtime.hooks import HookBus
    from hermesd.tools.builtin_files import register_builtin_file_tools
    from hermesd.tools.registry import ToolRegistry

    bus = HookBus()
    bus.register("memory", "pre_llm_call", lambda user_message: {"context": "FROM-PLUGIN"})
    ended: list[bool] = []
    bus.register("audit", "on_session_end", lambda session_id, completed: ended.append(completed))
    registry = ToolRegistry(bus)
    store = SessionStore(tmp_path / "state.db")
    register_builtin_file_tools(
        registry, home=tmp_path, store=store, config=config.parse(f"terminal:\n  cwd: {tmp_path}\n")
    )
    server.push(call_tools(tool_call("terminal", {"command": "echo $((6*7))"})), reply("It is 42."))
    client = ModelClient(ModelSettings(base_url=server.url, model="m", timeout=5.0))
    agent = AgentLoop(store, registry, bus, client)
    sid = store.sessions.create()["id"]

    async def main() -> TurnResult:
        try:
            return await agent.run_turn(sid, "what is 6*7?")
        finally:
            await client.aclose()

    assert asyncio.run(main()).final_text == "It is 42."
    assert server.requests[0]["messages"][-1]["content"] == "what is 6*7?\n\nFROM-PLUGIN"
    assert json.loads(server.requests[1]["messages"][-1]["content"]) == {
        "output": "42\n",
        "exit_code": 0,
    }
    assert ended == [True]
    store.close()


def test_post_tool_call_runs_beside_the_next_request_but_in_hook_order(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    # post_tool_call callbacks are observers: the turn does not wait for them before the next
    # model request, but they finish before the turn's next hook (here the second call's
    # pre_tool_call, and on_session_end) and before turn.finished.
    from hermesd.runtime.hooks import HookBus
    from hermesd.tools.registry import ToolRegistry

    log: list[str] = []
    bus = HookBus()
    second_request = threading.Event()

    def observe(tool_call_id: str) -> None:
        if tool_call_id == "b":  # still running when the next request goes out
            second_request.wait(10)
        log.append(f"post {tool_call_id}")

    bus.register("audit", "post_tool_call", observe)
    bus.register("audit", "pre_tool_call", lambda tool_call_id: log.append(f"pre {tool_call_id}"))
    bus.register("audit", "on_session_end", lambda: log.append("end"))
    registry = ToolRegistry(bus)
    registry.register(
        "echo",
        "test",
        {"name": "echo", "description": "echo", "parameters": {"type": "object", "properties": {}}},
        lambda args: "echoed",
    )
    store = SessionStore(tmp_path / "state.db")
    client = ModelClient(ModelSettings(base_url=server.url, model="m", timeout=5.0))
    agent = AgentLoop(store, registry, bus, client)
    sid = store.sessions.create()["id"]

    server.push(call_tools(tool_call("echo", {}, "a"), tool_call("echo", {}, "b")))
    server.push(reply("done"))
    original = server._next_step

    def next_step(request: dict[str, Any]) -> Any:
        log.append("request")
        if log.count("request") == 2:
            second_request.set()
        return original(request)

    server._next_step = next_step  # type: ignore[method-assign]
    events: list[str] = []

    def emit(event: dict[str, Any]) -> None:
        if event["type"] == "turn.finished":
            events.append(f"finished after {log[-1]}")

    async def main() -> TurnResult:
        try:
            return await agent.run_turn(sid, "go", emit=emit)
        finally:
            await client.aclose()

    assert asyncio.run(main()).status == "completed"
    store.close()
    assert log == ["request", "pre a", "post a", "pre b", "request", "post b", "end"]
    assert events == ["finished after end"]


def test_images_count_in_pre_api_requests_estimate_and_never_reach_a_summary(
    h: Harness,
) -> None:
    from hermesd.context.compressor import IMAGE_TOKENS, serialize
    from hermesd.store.images import Image

    png = Image("image/png", b"\x89PNG\r\n\x1a\n" + b"p" * 4000)

    async def with_image() -> TurnResult:
        agent, client = h.agent()
        try:
            return await agent.run_turn(h.sid, "look", emit=h.events.append, images=[png])
        finally:
            await client.aclose()

    h.server.push(reply("a picture"))
    asyncio.run(with_image())
    [pre] = h.hooks.named("pre_api_request")
    text = sum(len(m["content"]) for m in pre["request_messages"] if m["role"] == "system")
    assert pre["approx_input_tokens"] == (text + len("look")) // 4 + IMAGE_TOKENS
    assert pre["request_char_count"] == text + len("look")  # the bytes are not characters
    user = h.server.requests[0]["messages"][-1]
    assert user["content"][1] == png.part()
    line = serialize(user)
    assert line == "[user] look\n[an image]" and "base64" not in line
