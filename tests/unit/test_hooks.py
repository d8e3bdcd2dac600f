"""The hook table and the hook bus: order, kwargs filtering, threads, time bounds, results."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from hermesd.runtime.hooks import HOOKS, HookBus, hook_table_markdown
from hermesd.runtime.workers import WorkerPool

REFERENCE_HOOKS = {
    "pre_tool_call",
    "post_tool_call",
    "transform_terminal_output",
    "transform_tool_result",
    "transform_llm_output",
    "pre_llm_call",
    "post_llm_call",
    "pre_api_request",
    "post_api_request",
    "api_request_error",
    "on_session_start",
    "on_session_end",
    "on_session_finalize",
    "on_session_reset",
    "subagent_start",
    "subagent_stop",
    "pre_gateway_dispatch",
    "pre_approval_request",
    "post_approval_response",
    "pre_verify",
    "kanban_task_claimed",
    "kanban_task_completed",
    "kanban_task_blocked",
}


@pytest.fixture
def bus() -> HookBus:
    return HookBus(WorkerPool(8), timeout=0.3)


@pytest.fixture
def release() -> Any:
    """An event hung callbacks wait on; set at teardown so their threads end."""
    event = threading.Event()
    yield event
    event.set()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


#: the hooks upstream added after 0.19 (issue 32; docs/hermes-compat.md records the commit)
NEWER_HOOKS = {
    "on_stream_start",
    "on_stream_delta",
    "on_stream_end",
    "on_interim_message",
    "transform_api_error_classification",
    "on_skill_lifecycle",
    "agent_loop_stopped",
    "on_room_member_activity",
    "pre_transcription",
    "on_kanban_worker_spawned",
    "on_kanban_worker_exited",
    "on_kanban_worker_stale_claim",
    "on_kanban_task_updated",
    "on_kanban_dispatch_tick",
    "gateway_platform_event",
    "post_gateway_admission",
    "pre_command",
    "pre_auxiliary_call",
    "post_auxiliary_call",
    "on_human_input_request",
    "on_human_input_resolved",
    "pre_tts_synthesis",
}


def test_hook_table_declares_the_hooks_of_0_19_and_those_added_upstream_since() -> None:
    assert set(HOOKS) == REFERENCE_HOOKS | NEWER_HOOKS
    assert all(spec.doc and spec.kwargs for spec in HOOKS.values())


def test_hook_table_kwargs_include_the_contract_arguments() -> None:
    assert {"tool_name", "args", "task_id", "session_id", "tool_call_id"} <= set(
        HOOKS["pre_tool_call"].kwargs
    )
    assert {"result", "duration_ms", "status"} <= set(HOOKS["post_tool_call"].kwargs)
    assert {
        "user_message",
        "conversation_history",
        "is_first_turn",
        "model",
        "platform",
        "sender_id",
    } <= set(HOOKS["pre_llm_call"].kwargs)


def test_docs_plugins_md_contains_the_hook_table_generated_from_HOOKS() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text()
    assert hook_table_markdown() in doc
    for name in HOOKS:
        assert f"`{name}`" in doc


def test_unknown_hook_is_warned_about_and_still_called(
    bus: HookBus, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "hermesd.runtime.hooks"):
        bus.register("p", "on_tuesday", lambda **kw: "called")
    valid = ", ".join(sorted(HOOKS))
    assert f"Plugin 'p' registered unknown hook 'on_tuesday' (valid: {valid})" in caplog.messages
    assert run(bus.invoke("on_tuesday")) == ["called"]


def test_callbacks_run_in_registration_order(bus: HookBus) -> None:
    for name in ("first", "second", "third"):
        bus.register(name, "post_llm_call", lambda n=name, **kw: n)
    assert run(bus.invoke("post_llm_call", session_id="s")) == ["first", "second", "third"]


def test_callback_receives_only_the_kwargs_it_declares(bus: HookBus) -> None:
    seen: dict[str, Any] = {}

    def narrow(tool_name: str, task_id: str) -> None:
        seen.update(tool_name=tool_name, task_id=task_id)

    bus.register("p", "post_tool_call", narrow)
    run(
        bus.invoke(
            "post_tool_call",
            tool_name="t",
            args={},
            result="r",
            task_id="s",
            session_id="s",
            duration_ms=3,
            status="ok",
            turn_id="x",
        )
    )
    assert seen == {"tool_name": "t", "task_id": "s"}


def test_callback_taking_var_kwargs_receives_everything(bus: HookBus) -> None:
    seen: dict[str, Any] = {}
    bus.register("p", "on_session_start", lambda **kw: seen.update(kw))
    run(bus.invoke("on_session_start", session_id="s", model="m", platform="cli", extra=1))
    assert seen == {"session_id": "s", "model": "m", "platform": "cli", "extra": 1}


def test_declared_kwarg_the_caller_did_not_pass_arrives_as_none(bus: HookBus) -> None:
    seen: dict[str, Any] = {}

    def cb(session_id: str, sender_id: str) -> None:
        seen.update(session_id=session_id, sender_id=sender_id)

    bus.register("p", "pre_llm_call", cb)
    run(bus.invoke("pre_llm_call", session_id="s"))
    assert seen == {"session_id": "s", "sender_id": None}


def test_sync_callback_runs_on_a_worker_thread_not_the_loop(bus: HookBus) -> None:
    threads: list[str] = []
    bus.register(
        "p", "on_session_end", lambda **kw: threads.append(threading.current_thread().name)
    )

    async def main() -> str:
        await bus.invoke("on_session_end", session_id="s")
        return threading.current_thread().name

    loop_thread = run(main())
    assert threads and threads[0] != loop_thread


def test_async_callback_is_awaited(bus: HookBus) -> None:
    async def cb(session_id: str) -> str:
        await asyncio.sleep(0)
        return f"async {session_id}"

    bus.register("p", "on_session_reset", cb)
    assert run(bus.invoke("on_session_reset", session_id="s")) == ["async s"]


def test_raising_callback_is_logged_and_skipped(
    bus: HookBus, caplog: pytest.LogCaptureFixture
) -> None:
    def exploding(**kw: Any) -> None:
        raise RuntimeError("boom")

    bus.register("a", "post_llm_call", exploding)
    bus.register("b", "post_llm_call", lambda **kw: "still here")
    with caplog.at_level(logging.WARNING, "hermesd.runtime.hooks"):
        assert run(bus.invoke("post_llm_call")) == ["still here"]
    assert "Hook 'post_llm_call' callback exploding raised: boom" in caplog.messages


def test_slow_callback_times_out_and_later_callbacks_still_run(
    bus: HookBus, release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    def hangs(**kw: Any) -> str:
        release.wait(10)
        return "too late"

    bus.register("a", "post_tool_call", hangs)
    bus.register("b", "post_tool_call", lambda **kw: "on time")
    with caplog.at_level(logging.WARNING, "hermesd.runtime.hooks"):
        assert run(bus.invoke("post_tool_call")) == ["on time"]
    assert "Hook 'post_tool_call' callback hangs timed out after 0.3s" in caplog.messages


def test_slow_async_callback_times_out(bus: HookBus) -> None:
    async def sleepy(**kw: Any) -> str:
        await asyncio.sleep(5)
        return "too late"

    bus.register("a", "post_llm_call", sleepy)
    assert run(bus.invoke("post_llm_call")) == []


def test_pre_tool_call_first_block_wins(bus: HookBus) -> None:
    bus.register("a", "pre_tool_call", lambda **kw: None)
    bus.register("b", "pre_tool_call", lambda **kw: {"action": "block", "message": "no b"})
    bus.register("c", "pre_tool_call", lambda **kw: {"action": "block", "message": "no c"})
    assert run(bus.pre_tool_call(tool_name="t", args={})) == "no b"


def test_pre_tool_call_block_without_message_does_not_block(bus: HookBus) -> None:
    bus.register("a", "pre_tool_call", lambda **kw: {"action": "block"})
    assert run(bus.pre_tool_call(tool_name="t", args={})) is None


def test_pre_tool_call_raising_callback_does_not_block(bus: HookBus) -> None:
    bus.register("a", "pre_tool_call", lambda **kw: 1 / 0)
    assert run(bus.pre_tool_call(tool_name="t", args={})) is None


def test_pre_tool_call_callback_timing_out_blocks(bus: HookBus, release: threading.Event) -> None:
    def undecided(**kw: Any) -> None:
        release.wait(10)

    bus.register("slowpoke", "pre_tool_call", undecided)
    message = run(bus.pre_tool_call(tool_name="t", args={}))
    assert message is not None and "slowpoke" in message and "0.3s" in message


def test_pre_llm_context_joins_contexts_with_a_blank_line(bus: HookBus) -> None:
    bus.register("a", "pre_llm_call", lambda **kw: {"context": "from a"})
    bus.register("b", "pre_llm_call", lambda **kw: None)
    bus.register("c", "pre_llm_call", lambda **kw: "from c")
    bus.register("d", "pre_llm_call", lambda **kw: "")
    bus.register("e", "pre_llm_call", lambda **kw: {"other": "ignored"})
    assert run(bus.pre_llm_context(session_id="s")) == "from a\n\nfrom c"


def test_transform_first_string_wins(bus: HookBus) -> None:
    bus.register("a", "transform_llm_output", lambda **kw: None)
    bus.register("b", "transform_llm_output", lambda response_text: response_text.upper())
    bus.register("c", "transform_llm_output", lambda **kw: "ignored")
    assert run(bus.transform("transform_llm_output", response_text="hi")) == "HI"


def test_unregister_plugin_removes_all_its_callbacks(bus: HookBus) -> None:
    bus.register("gone", "post_llm_call", lambda **kw: "gone")
    bus.register("gone", "pre_llm_call", lambda **kw: "gone")
    bus.register("kept", "post_llm_call", lambda **kw: "kept")
    assert bus.unregister_plugin("gone") == 2
    assert run(bus.invoke("post_llm_call")) == ["kept"]
    assert not bus.has("pre_llm_call")
    assert bus.hooks_of("kept") == ["post_llm_call"]


def test_sync_callbacks_of_one_invocation_share_one_worker_thread(bus: HookBus) -> None:
    seen: list[int] = []
    for key in "abcd":
        bus.register(key, "pre_llm_call", lambda **kw: seen.append(threading.get_ident()))
    run(bus.invoke("pre_llm_call"))
    assert len(seen) == 4 and len(set(seen)) == 1
    assert seen[0] != threading.get_ident()


def test_each_batched_callback_gets_its_own_deadline() -> None:
    import time

    bus = HookBus(WorkerPool(8), timeout=2.0)

    def slowish(**kw: Any) -> str:
        time.sleep(0.8)  # three of them take 2.4 s, past the 2 s timeout
        return "done"

    for key in "abc":
        bus.register(key, "post_tool_call", slowish)
    assert run(bus.invoke("post_tool_call")) == ["done", "done", "done"]


def test_callback_timing_out_mid_batch_is_skipped_and_its_plugin_runs_alone_afterwards(
    bus: HookBus, release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    threads: dict[str, int] = {}

    def record(name: str) -> Any:
        def callback(**kw: Any) -> str:
            threads[name] = threading.get_ident()
            return name

        return callback

    def hangs_once(**kw: Any) -> str:
        threads["b"] = threading.get_ident()
        if "hung" not in threads:
            threads["hung"] = 1
            release.wait(10)
        return "b"

    bus.register("a", "post_tool_call", record("a"))
    bus.register("b", "post_tool_call", hangs_once)
    bus.register("c", "post_tool_call", record("c"))
    with caplog.at_level(logging.WARNING, "hermesd.runtime.hooks"):
        assert run(bus.invoke("post_tool_call")) == ["a", "c"]
    assert "Hook 'post_tool_call' callback hangs_once timed out after 0.3s" in caplog.messages
    assert run(bus.invoke("post_tool_call")) == ["a", "b", "c"]  # its first call still hangs
