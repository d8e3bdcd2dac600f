"""``transform_api_error_classification`` and ``pre``/``post_auxiliary_call`` on a real daemon.

A directory plugin records every call of the model-call hooks in a file. It classifies a 503
whose error code is ``out_of_credit`` as billing, not worth a retry, and a 403 whose code is
``flaky`` as a server error worth one (two callbacks answer for the 503: the first decides).
Its commands ask the daemon's model through ``call_llm`` and ``ctx.llm.complete(task=…)``, which
are auxiliary calls; ``/compress`` asks for a compaction summary, another one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import DaemonProcess, send_and_follow, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, http_error, model_config, reply
from tests.support.plugin_factory import write_plugin

Start = Callable[..., DaemonProcess]

PLUGIN = """
import json
from pathlib import Path

HERE = Path(__file__).parent
ctx_ref = []


def record(hook, **kwargs):
    with open(HERE / "calls.jsonl", "a") as out:
        out.write(json.dumps({"hook": hook, **kwargs}, default=str) + "\\n")


def classify(**kw):
    record("transform_api_error_classification", **{k: v for k, v in kw.items() if k != "error"})
    code = (kw.get("error_body") or {}).get("code")  # the SDK's error object, as upstream
    if kw["status_code"] == 503 and code == "out_of_credit":
        return {"reason": "billing", "retryable": False, "message": "the prepaid credits ran out"}
    if kw["status_code"] == 403 and code == "flaky":
        return {"reason": "server_error", "retryable": True}
    return None


def second_opinion(**kw):
    if kw["status_code"] == 503:
        return {"reason": "overloaded", "retryable": True, "message": "try again"}
    return {"reason": "not-a-reason"}


def observer(name):
    return lambda **kw: record(name, **kw)


def ask(raw):
    from agent.auxiliary_client import call_llm
    try:
        response = call_llm(messages=[{"role": "user", "content": raw}])
    except Exception as exc:
        return f"failed: {exc}"
    return response.choices[0].message.content


def digest(raw):
    return ctx_ref[0].llm.complete([{"role": "user", "content": raw}], task="watcher_digest").text


def register(ctx):
    ctx_ref.append(ctx)
    ctx.register_hook("transform_api_error_classification", classify)
    ctx.register_hook("transform_api_error_classification", second_opinion)
    for name in ("pre_auxiliary_call", "post_auxiliary_call", "pre_api_request",
                 "api_request_error"):
        ctx.register_hook(name, observer(name))
    ctx.register_auxiliary_task("watcher_digest", display_name="Digest", description="digests")
    ctx.register_command("ask", ask, description="call_llm")
    ctx.register_command("digest", digest, description="ctx.llm with a task")
"""


@pytest.fixture
def home() -> Path:
    home = short_tmpdir("modelhooks-")
    write_plugin(home / "plugins", "watcher", PLUGIN)
    return home


def _start(start: Start, home: Path, model: ScriptedModelServer, extra: str = "") -> DaemonProcess:
    model.clear_script()  # the model server is the module's: no step left from another test
    d = start(home, config=model_config(model.url, max_retries=2, retry_max_wait=0.1) + extra)
    d.call("plugins.list")  # the plugin is loaded
    return d


def _calls(home: Path, hook: str) -> list[dict[str, Any]]:
    path = home / "plugins" / "watcher" / "calls.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r for r in rows if r["hook"] == hook]


def _command(d: DaemonProcess, line: str, sid: str | None = None) -> str:
    with d.client(timeout=60) as c:
        params = {"line": line} if sid is None else {"line": line, "session_id": sid}
        return str(c.call("command.run", params, timeout=60)["output"])


def _out_of_credit() -> Any:
    step = http_error(503, "no credit left")
    step.body = json.dumps(
        {"error": {"message": "no credit left", "type": "billing", "code": "out_of_credit"}}
    ).encode()
    return step


def _coded(status: int, code: str) -> Any:
    step = http_error(status, "it failed")
    step.body = json.dumps({"error": {"message": "it failed", "code": code}}).encode()
    return step


def test_a_plugin_classification_stops_the_retries_and_words_the_error(
    start: Start, model: ScriptedModelServer, home: Path
) -> None:
    d = _start(start, home, model)
    model.push(_out_of_credit(), reply("never asked for"))
    seen = len(model.requests)
    with d.client(timeout=30) as c:
        sid = c.call("session.create")["id"]
        events = send_and_follow(c, sid, "hello", timeout=30)
    assert events[-1]["status"] == "failed"
    assert "the prepaid credits ran out" in events[-1]["error"]
    assert len(model.requests) == seen + 1  # a 503 is retried unless a plugin says otherwise
    [asked] = _calls(home, "transform_api_error_classification")
    assert asked["status_code"] == 503 and asked["error_code"] == "out_of_credit"
    assert asked["provider"] == "custom" and asked["num_messages"] >= 1
    assert asked["error_body"]["message"] == "no credit left"
    [failed] = _calls(home, "api_request_error")
    assert failed["reason"] == "billing"
    assert "1 later valid classification(s) skipped" in d.log()


def test_a_plugin_classification_makes_an_error_worth_a_retry(
    start: Start, model: ScriptedModelServer, home: Path
) -> None:
    d = _start(start, home, model)
    model.push(_coded(403, "flaky"), reply("recovered"))
    with d.client(timeout=30) as c:
        sid = c.call("session.create")["id"]
        events = send_and_follow(c, sid, "hello", timeout=30)
    assert events[-1]["status"] == "completed", events[-1]
    assert events[-1]["final_text"] == "recovered"
    [asked] = _calls(home, "transform_api_error_classification")
    assert asked["status_code"] == 403


def test_an_error_no_plugin_classifies_keeps_hermesds_decision(
    start: Start, model: ScriptedModelServer, home: Path
) -> None:
    d = _start(start, home, model)
    model.push(_coded(403, "forbidden"), reply("never asked for"))
    with d.client(timeout=30) as c:
        sid = c.call("session.create")["id"]
        events = send_and_follow(c, sid, "hello", timeout=30)
    assert events[-1]["status"] == "failed"
    assert "HTTP 403" in events[-1]["error"]


def test_call_llm_is_an_auxiliary_call_not_a_turn_request(
    start: Start, model: ScriptedModelServer, home: Path
) -> None:
    d = _start(start, home, model)
    model.push(reply("an aside"))
    assert _command(d, "/ask what is up") == "an aside"
    [pre] = _calls(home, "pre_auxiliary_call")
    [post] = _calls(home, "post_auxiliary_call")
    assert pre["aux_task"] == pre["task"] == "call_llm"
    assert pre["request_messages"] == [{"role": "user", "content": "what is up"}]
    assert pre["api_request_id"] == post["api_request_id"]
    assert post["error"] is None and post["finish_reason"] == "stop"
    assert post["response"]["assistant_message"]["content"] == "an aside"
    assert post["usage"]["total_tokens"] > 0 and post["api_duration"] >= 0
    assert _calls(home, "pre_api_request") == []


def test_ctx_llm_with_a_task_fires_the_auxiliary_hooks_under_the_tasks_key(
    start: Start, model: ScriptedModelServer, home: Path
) -> None:
    d = _start(start, home, model)
    model.push(reply("digested"))
    assert _command(d, "/digest the news") == "digested"
    assert [c["aux_task"] for c in _calls(home, "pre_auxiliary_call")] == ["watcher_digest"]
    assert [c["aux_task"] for c in _calls(home, "post_auxiliary_call")] == ["watcher_digest"]


def test_a_failed_auxiliary_call_reports_its_error_after_it(
    start: Start, model: ScriptedModelServer, home: Path
) -> None:
    d = _start(start, home, model)
    model.push(_coded(404, "no_model"))
    assert _command(d, "/ask anyone there").startswith("failed: ")
    [post] = _calls(home, "post_auxiliary_call")
    assert post["error_type"] == "ModelRequestFailed" and "HTTP 404" in post["error"]
    assert post["usage"] is None and post["response"] is None


def test_a_compaction_summary_is_an_auxiliary_call(
    start: Start, model: ScriptedModelServer, home: Path
) -> None:
    extra = "compression:\n  protect_first_n: 1\n  protect_last_n: 2\n"
    d = _start(start, home, model, extra)
    with d.client(timeout=30) as c:
        sid = c.call("session.create")["id"]
        for n in range(3):
            model.push(reply(f"answer {n}"))
            send_and_follow(c, sid, f"question {n}", timeout=30)
    model.push(reply("SUMMARY: three questions"))
    assert "Compacted" in _command(d, "/compress", sid)
    [pre] = _calls(home, "pre_auxiliary_call")
    assert pre["aux_task"] == "compression" and pre["system_prompt"]
    [post] = _calls(home, "post_auxiliary_call")
    assert post["response"]["assistant_message"]["content"] == "SUMMARY: three questions"
