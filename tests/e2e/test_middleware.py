"""Plugin middleware end to end: guards that refuse, rewrites the approval broker and the model
see, the single-use ``next_call``, and middleware that fails, on a real hermesd.

One daemon (module scope) holds the plugins; each middleware acts only on the tool names or
message words its test uses, so the tests do not see each other's middleware. What the
callbacks saw is appended to ``$HERMES_HOME/mw-log.jsonl``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.approvals import client_answering, tool
from tests.support.daemon import DaemonProcess, send_and_follow, short_tmpdir, start_daemon
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)
from tests.support.plugin_factory import write_plugin

HOOK_TIMEOUT = 1.0

RECORDER = """
import json, os
from pathlib import Path

LOG = Path(os.environ["HERMES_HOME"]) / "mw-log.jsonl"

def note(**entry):
    with LOG.open("a") as f:
        f.write(json.dumps(entry, default=str) + "\\n")
"""

GATE = (
    RECORDER
    + """
from types import SimpleNamespace

def refusal(text):
    ns = SimpleNamespace
    return ns(id="refused", model="gate", object="chat.completion",
              choices=[ns(index=0, finish_reason="stop",
                          message=ns(role="assistant", content=text, tool_calls=None))],
              usage=ns(prompt_tokens=0, completion_tokens=0, total_tokens=0))

def tool_execution(*, tool_name, args, next_call, **context):
    if tool_name == "mw_echo" and "forbidden" in json.dumps(args):
        note(kind="gate.tool", decision="deny", tool=tool_name)
        return json.dumps({"error": "gate: refused " + tool_name})
    return next_call(args)

def llm_execution(*, request, next_call, **context):
    last = request["messages"][-1]["content"]
    if "LOCKDOWN" in last:
        note(kind="gate.llm", decision="deny", context=sorted(context))
        return refusal("gate refused the model request")
    return next_call(request)

def register(ctx):
    ctx.register_tool("mw_echo", "mw", {
        "description": "Echo the arguments back as JSON",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}},
        lambda args: json.dumps({"echo": args}))
    ctx.register_middleware("tool_execution", tool_execution)
    ctx.register_middleware("api_execution", llm_execution)

    def dispatch(raw_args):
        return ctx.dispatch_tool("mw_echo", {"text": raw_args})
    ctx.register_command("mwdispatch", dispatch, description="dispatch mw_echo")
"""
)

REWRITER = (
    RECORDER
    + """
def tool_request(*, tool_name, args, original_args, **context):
    if tool_name == "terminal" and args.get("command") == "echo harmless":
        return {"args": {"command": "rm -r " + args.get("target", "/nonexistent-mw")},
                "source": "rewriter", "reason": "test rewrite"}
    return None

def llm_request(*, request, original_request, **context):
    if "REWRITE" not in request["messages"][-1]["content"]:
        return None
    new = dict(request)
    new["messages"] = request["messages"] + [
        {"role": "system", "content": "note added by middleware"}]
    new["temperature"] = 0.25
    return {"request": new, "name": "rewriter"}

def register(ctx):
    ctx.register_middleware("tool_request", tool_request)
    ctx.register_middleware("llm_request", llm_request)
    ctx.register_hook("pre_tool_call",
        lambda tool_name, args, middleware_trace: note(kind="pre_tool_call", tool=tool_name,
                                                       args=args, trace=middleware_trace))
    ctx.register_hook("post_tool_call",
        lambda tool_name, middleware_trace: note(kind="post_tool_call", tool=tool_name,
                                                 trace=middleware_trace))
    ctx.register_hook("post_api_request",
        lambda usage, finish_reason, response_model, middleware_trace: note(
            kind="post_api_request", usage=usage, finish_reason=finish_reason,
            response_model=response_model, trace=middleware_trace))
"""
)

TWICE = (
    RECORDER
    + """
def tool_execution(*, tool_name, args, next_call, **context):
    if tool_name != "mw_twice":
        return next_call(args)
    first = next_call(args)
    try:
        next_call(args)
    except RuntimeError as exc:
        return json.dumps({"first": json.loads(first), "second": str(exc)})
    return json.dumps({"error": "next_call ran twice"})

def register(ctx):
    ctx.register_tool("mw_twice", "mw", {
        "description": "Count how often the handler ran",
        "parameters": {"type": "object", "properties": {}}},
        lambda args: (note(kind="twice.handler"), json.dumps({"ran": True}))[1])
    ctx.register_middleware("tool_execution", tool_execution)
"""
)

FAULTY = (
    RECORDER
    + """
import time

def tool_execution(*, tool_name, args, next_call, **context):
    if tool_name == "mw_raise_before":
        raise ValueError("boom before next_call")
    if tool_name == "mw_raise_after":
        next_call(args)
        raise ValueError("boom after next_call")
    if tool_name == "mw_hang":
        time.sleep(3)
    return next_call(args)

def register(ctx):
    for name in ("mw_raise_before", "mw_raise_after", "mw_hang"):
        ctx.register_tool(name, "mw", {
            "description": "Say which tool ran",
            "parameters": {"type": "object", "properties": {}}},
            (lambda n: lambda args: json.dumps({"ran": n}))(name))
    ctx.register_middleware("tool_execution", tool_execution)
    ctx.register_middleware("tool_guard", lambda **kw: None)
"""
)


@pytest.fixture(scope="module")
def mwd(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = short_tmpdir("mw-")
    for name, code in (
        ("gate", GATE),
        ("rewriter", REWRITER),
        ("twice", TWICE),
        ("faulty", FAULTY),
    ):
        write_plugin(home / "plugins", name, code)
    config = model_config(model.url, timeout=5, max_retries=0) + (
        f"tools:\n  hook_timeout: {HOOK_TIMEOUT}\nterminal:\n  cwd: /tmp\n"
    )
    daemon = start_daemon(home, config=config)
    daemon.call("plugins.list")  # answered once the plugins have loaded (after READY)
    yield daemon
    daemon.stop()


def notes(daemon: DaemonProcess, kind: str) -> list[dict[str, Any]]:
    path = daemon.home / "mw-log.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind]


def test_a_guard_refuses_a_tool_call_from_a_client(mwd: DaemonProcess) -> None:
    with mwd.client() as c:
        result = tool(c, "mw_echo", {"text": "forbidden"})
        allowed = tool(c, "mw_echo", {"text": "fine"})
    assert result == {"error": "gate: refused mw_echo"}
    assert allowed == {"echo": {"text": "fine"}}
    assert notes(mwd, "gate.tool")[-1] == {
        "kind": "gate.tool",
        "decision": "deny",
        "tool": "mw_echo",
    }


def test_a_guard_refuses_a_tool_dispatched_by_a_slash_command(mwd: DaemonProcess) -> None:
    with mwd.client() as c:
        out = c.call("command.run", {"line": "/mwdispatch forbidden"})["output"]
    assert json.loads(out) == {"error": "gate: refused mw_echo"}


def test_a_guard_refuses_a_tool_call_the_model_makes(
    mwd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(call_tools(tool_call("mw_echo", {"text": "forbidden"})), reply("done"))
    with mwd.client() as c:
        sid = c.call("session.create")["id"]
        send_and_follow(c, sid, "please echo")
    tool_message = model.last_request["messages"][-1]
    assert tool_message["role"] == "tool"
    assert json.loads(tool_message["content"]) == {"error": "gate: refused mw_echo"}


def test_a_guard_refuses_a_model_request_and_its_answer_is_the_turns(
    mwd: DaemonProcess, model: ScriptedModelServer
) -> None:
    before = len(model.requests)
    with mwd.client() as c:
        sid = c.call("session.create")["id"]
        events = send_and_follow(c, sid, "LOCKDOWN now")
    finished = events[-1]
    assert finished["status"] == "completed"
    assert finished["final_text"] == "gate refused the model request"
    assert len(model.requests) == before  # nothing reached the model
    seen = notes(mwd, "gate.llm")[-1]["context"]
    for name in (
        "telemetry_schema_version",
        "middleware_schema_version",
        "session_id",
        "task_id",
        "turn_id",
        "api_request_id",
        "platform",
        "model",
        "provider",
        "base_url",
        "api_mode",
        "api_call_count",
        "original_request",
        "middleware_trace",
    ):
        assert name in seen


def test_a_rewritten_tool_call_is_what_the_approval_broker_sees(mwd: DaemonProcess) -> None:
    target = short_tmpdir("mwrm-") / "doomed"
    target.mkdir()
    client, asked = client_answering(mwd, "deny")
    with client:
        result = tool(client, "terminal", {"command": "echo harmless", "target": str(target)})
    assert len(asked.requests) == 1
    assert asked.requests[0]["command"] == f"rm -r {target}"
    assert "BLOCKED" in json.dumps(result)
    assert target.exists()
    pre = notes(mwd, "pre_tool_call")[-1]
    assert pre["args"]["command"] == f"rm -r {target}"
    assert pre["trace"] == [{"source": "rewriter", "reason": "test rewrite"}]
    assert notes(mwd, "post_tool_call")[-1]["trace"] == pre["trace"]


def test_a_rewritten_model_request_is_what_the_model_receives(
    mwd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("rewritten answer"))
    with mwd.client() as c:
        sid = c.call("session.create")["id"]
        send_and_follow(c, sid, "please REWRITE this")
        history = c.call("session.history", {"session_id": sid})
    sent = model.last_request
    assert sent["temperature"] == 0.25
    assert sent["messages"][-1] == {"role": "system", "content": "note added by middleware"}
    assert sent["stream"] is True
    stored = json.dumps(history)
    assert "note added by middleware" not in stored  # the rewrite is the request's alone
    post = notes(mwd, "post_api_request")[-1]
    assert post["trace"] == [{"name": "rewriter"}]
    assert post["finish_reason"] == "stop"
    assert post["response_model"] == "scripted-model"
    assert set(post["usage"]) == {
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "request_count",
        "prompt_tokens",
        "total_tokens",
    }
    assert post["usage"]["output_tokens"] > 0


def test_next_call_is_single_use(mwd: DaemonProcess) -> None:
    before = len(notes(mwd, "twice.handler"))
    with mwd.client() as c:
        result = tool(c, "mw_twice", {})
    assert result["first"] == {"ran": True}
    assert result["second"].startswith(
        "Middleware 'tool_execution' callback tool_execution called next_call() more than once"
    )
    assert len(notes(mwd, "twice.handler")) == before + 1


def test_middleware_raising_before_next_call_is_skipped_and_logged(mwd: DaemonProcess) -> None:
    with mwd.client() as c:
        assert tool(c, "mw_raise_before", {}) == {"ran": "mw_raise_before"}
        assert c.call("ping") is not None
    assert "Middleware 'tool_execution' callback tool_execution raised: boom before next_call" in (
        mwd.log()
    )


def test_middleware_raising_after_next_call_keeps_the_tools_result(mwd: DaemonProcess) -> None:
    with mwd.client() as c:
        assert tool(c, "mw_raise_after", {}) == {"ran": "mw_raise_after"}
    assert "raised: boom after next_call" in mwd.log()


def test_middleware_that_does_not_answer_in_time_refuses_the_call(mwd: DaemonProcess) -> None:
    with mwd.client() as c:
        result = tool(c, "mw_hang", {})
        assert c.call("ping") is not None
    assert result["error"].startswith(
        "BLOCKED: middleware tool_execution of plugin 'faulty' did not"
    )


def test_unknown_middleware_kind_is_kept_and_warned_about(mwd: DaemonProcess) -> None:
    assert (
        "Plugin 'faulty' registered unknown middleware 'tool_guard' (valid: llm_execution, "
        "llm_request, tool_execution, tool_request)" in mwd.log()
    )
    plugins = {p["key"]: p for p in mwd.call("plugins.list")["plugins"]}
    assert plugins["faulty"]["middleware"] == ["tool_execution", "tool_guard"]
    assert plugins["gate"]["middleware"] == ["tool_execution", "llm_execution"]
    assert "2 middleware" in plugins["gate"]["line"]
