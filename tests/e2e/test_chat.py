"""Chatting end to end: a real hermesd, the real socket, `hermesctl chat`, the scripted model.

Most tests share one daemon (module scope) with the bundled calculator and a test plugin that
records session hooks, adds `pre_llm_call` context and provides `leave_note` (calls
`ctx.inject_message`) and `nap` (a slow tool); each test uses sessions of its own. Tests that
need a different configuration start their own daemon.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from hermesd.rpc.protocol import Codes, RpcError
from tests.support.daemon import (
    DaemonProcess,
    follow_turn,
    run_hermesctl,
    send_and_follow,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import (
    ScriptedModelServer,
    calculator_rules,
    call_tools,
    cut_stream,
    http_error,
    model_config,
    reply,
    tool_call,
)
from tests.support.plugin_factory import write_plugin
from tests.support.terminal import Terminal

CONTEXT = "PLUGIN-CONTEXT-7f3a"

RECORDER = f'''
import json, os, time

LOG = os.path.join(os.environ["HERMES_HOME"], "hooks.log")

def _log(hook, **kw):
    with open(LOG, "a") as f:
        f.write(json.dumps({{"hook": hook, **kw}}) + "\\n")

def _params(*names):
    return {{"type": "object", "properties": {{n: {{"type": "string"}} for n in names}}}}

def register(ctx):
    ctx.register_hook("on_session_start",
                      lambda session_id, **kw: _log("on_session_start", session_id=session_id))
    ctx.register_hook("on_session_end",
                      lambda session_id, completed, interrupted, **kw: _log(
                          "on_session_end", session_id=session_id, completed=completed,
                          interrupted=interrupted))
    ctx.register_hook("on_session_reset",
                      lambda session_id, **kw: _log("on_session_reset", session_id=session_id))
    ctx.register_hook("on_session_finalize",
                      lambda session_id, **kw: _log("on_session_finalize", session_id=session_id))
    ctx.register_hook("pre_llm_call", lambda user_message, **kw: (
        {{"context": "{CONTEXT}"}} if "with context" in user_message else None))

    def leave_note(args, **kw):
        ok = ctx.inject_message("note from the plugin: " + args.get("text", ""))
        return json.dumps({{"queued": ok}})

    def nap(args, **kw):
        time.sleep(float(args.get("seconds") or 1))
        return json.dumps({{"slept": True}})

    ctx.register_tool("leave_note", "recorder", {{"name": "leave_note",
        "description": "Leave a note in the conversation", "parameters": _params("text")}},
        leave_note)
    ctx.register_tool("nap", "recorder", {{"name": "nap",
        "description": "Sleep a while", "parameters": _params("seconds")}}, nap)
'''

GUIDE_PROMPTS = [
    ("2 的 16 次方是多少？", "calculate", "65536"),
    ("将 100 华氏度转换为摄氏度", "unit_convert", "37.7778"),
    ("2 乘以 π 的平方根是多少？", "calculate", "3.5449"),
    ("1.5 TB 是多少 GB？", "unit_convert", "1536"),
]


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=calculator_rules) as server:
        yield server


@pytest.fixture(scope="module")
def chatd(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = short_tmpdir()
    write_plugin(home / "plugins", "recorder", RECORDER)
    daemon = start_daemon(
        home, config=model_config(model.url, timeout=5, max_retries=2, retry_max_wait=0.05)
    )
    yield daemon
    daemon.stop()


def hermesctl(d: DaemonProcess, *args: str, input: str | None = "", timeout: float = 30) -> Any:
    return run_hermesctl(
        ["--socket", str(d.socket), *args],
        env={"HERMES_HOME": str(d.home)},
        input=input,
        timeout=timeout,
    )


def turn(c: Client, sid: str, message: str) -> list[dict[str, Any]]:
    started = c.call("session.send", {"session_id": sid, "message": message})
    return follow_turn(c, started["turn_id"])


def wait_for(event_type: str, c: Client, timeout: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        note = c.next_notification(timeout=deadline - time.monotonic())
        if note is not None and note.params and note.params[0].get("type") == event_type:
            return note.params[0]
    raise AssertionError(f"no {event_type} event within {timeout}s")


def hook_log(d: DaemonProcess, session_id: str) -> list[dict[str, Any]]:
    path = d.home / "hooks.log"
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in entries if e.get("session_id") == session_id]


def roles(d: DaemonProcess, sid: str) -> list[str]:
    return [m["role"] for m in d.call("session.history", {"session_id": sid})["messages"]]


# --- the guide's prompts ----------------------------------------------------------------------


@pytest.mark.parametrize(("prompt", "tool", "expected"), GUIDE_PROMPTS)
def test_guide_prompt_is_answered_through_the_calculator(
    chatd: DaemonProcess, model: ScriptedModelServer, prompt: str, tool: str, expected: str
) -> None:
    result = hermesctl(chatd, "chat", "-m", prompt)
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout
    assert f"⚙ {tool}(" in result.stderr and "✓" in result.stderr
    tool_message = model.last_request["messages"][-1]
    assert tool_message["role"] == "tool" and expected in tool_message["content"]


# --- one-shot ----------------------------------------------------------------------------------


def test_chunks_read_together_reach_clients_as_one_delta_paced_ones_one_by_one(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    burst = "chunk 01 " * 20  # every chunk ends a word: redaction holds nothing back
    paced = "one two three four "
    model.push(
        reply(burst, chunk_chars=9),  # 20 chunks written back to back
        reply(paced, chunk_chars=4, chunk_delay=0.05),
    )
    with chatd.client() as c:
        sid = c.call("session.create")["id"]
        fast = [e["text"] for e in turn(c, sid, "burst") if e["type"] == "text.delta"]
        slow = [e["text"] for e in turn(c, sid, "paced") if e["type"] == "text.delta"]
    assert "".join(fast) == burst and len(fast) < 20
    # one delta per word as they come (a stall on a loaded machine may join two of them)
    assert "".join(slow) == paced and len(slow) >= 2 and all(d.endswith(" ") for d in slow)


def test_one_shot_prints_only_the_answer_on_stdout(chatd: DaemonProcess) -> None:
    result = hermesctl(chatd, "chat", "-m", "hello there")
    assert result.returncode == 0
    assert result.stdout == "You said: hello there\n"


def test_one_shot_failed_turn_exits_1_with_the_error_on_stderr(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(http_error(401, "this model does not like you"))
    result = hermesctl(chatd, "chat", "-m", "hello")
    assert result.returncode == 1
    assert "turn failed" in result.stderr and "this model does not like you" in result.stderr


def test_one_shot_json_prints_every_event_as_one_json_object_per_line(chatd: DaemonProcess) -> None:
    result = hermesctl(chatd, "chat", "--json", "-m", "What is 15 * 23?")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "session" and types[1] == "turn.started"
    assert types[-1] == "turn.finished" and events[-1]["status"] == "completed"
    assert {"tool.started", "tool.finished", "text.delta", "message"} <= set(types)
    assert "345" in events[-1]["final_text"]
    assert all(e["session_id"] == events[0]["session_id"] for e in events)


def test_global_json_flag_also_selects_json_events(chatd: DaemonProcess) -> None:
    result = hermesctl(chatd, "--json", "chat", "-m", "hi")
    assert json.loads(result.stdout.splitlines()[-1])["type"] == "turn.finished"


def test_one_shot_json_failure_exits_1(chatd: DaemonProcess, model: ScriptedModelServer) -> None:
    model.push(http_error(404, "no such model"))
    result = hermesctl(chatd, "chat", "--json", "-m", "hi")
    assert result.returncode == 1
    last = json.loads(result.stdout.splitlines()[-1])
    assert last["status"] == "failed" and "no such model" in last["error"]


def test_message_is_read_from_piped_stdin(chatd: DaemonProcess) -> None:
    result = hermesctl(chatd, "chat", input="What is 6 * 7?\n")
    assert result.returncode == 0, result.stderr
    assert "42" in result.stdout


def test_dash_message_reads_stdin(chatd: DaemonProcess) -> None:
    result = hermesctl(chatd, "chat", "-m", "-", input="echo this please")
    assert result.stdout == "You said: echo this please\n"


def test_empty_stdin_is_a_usage_error(chatd: DaemonProcess) -> None:
    result = hermesctl(chatd, "chat", input="  \n")
    assert result.returncode == 2
    assert "stdin was empty" in result.stderr


def test_continue_resumes_the_most_recent_session(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    first = hermesctl(chatd, "chat", "--json", "-m", "remember the word ostrich")
    sid = json.loads(first.stdout.splitlines()[0])["session_id"]
    result = hermesctl(chatd, "chat", "--continue", "--json", "-m", "what was the word?")
    assert json.loads(result.stdout.splitlines()[0])["session_id"] == sid
    sent = [m["content"] for m in model.last_request["messages"] if m["role"] == "user"]
    assert sent[0] == "remember the word ostrich"


def test_session_flag_resumes_that_session(chatd: DaemonProcess) -> None:
    sid = chatd.call("session.create")["id"]
    result = hermesctl(chatd, "chat", "--session", sid, "-m", "hi")
    assert result.returncode == 0
    assert roles(chatd, sid) == ["user", "assistant"]


def test_unknown_session_is_a_clear_error(chatd: DaemonProcess) -> None:
    result = hermesctl(chatd, "chat", "--session", "nope", "-m", "hi")
    assert result.returncode == 1
    assert "no session 'nope'" in result.stderr


def test_without_a_model_the_error_names_model_base_url(
    start: Callable[..., DaemonProcess],
) -> None:
    d = start()
    result = hermesctl(d, "chat", "-m", "hello")
    assert result.returncode == 1
    assert "model.base_url" in result.stderr
    assert d.call("status")["version"]  # still serving


# --- the interactive REPL on a pseudo-terminal ---------------------------------------------------


@pytest.fixture
def repl(chatd: DaemonProcess) -> Iterator[Callable[..., Terminal]]:
    terminals: list[Terminal] = []

    def open_repl(*args: str) -> Terminal:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
        env.update(HERMES_HOME=str(chatd.home), TERM="xterm")
        t = Terminal(
            [sys.executable, "-m", "hermesctl", "--socket", str(chatd.socket), "chat", *args], env
        )
        terminals.append(t)
        return t

    yield open_repl
    for t in terminals:
        t.close()


def test_repl_banner_lists_version_model_session_and_tools_by_toolset(
    repl: Callable[..., Terminal],
) -> None:
    t = repl()
    t.expect(r"hermesd \d+\.\d+\.\d+ · model scripted-model")
    t.expect(r"session \d{8}-\d{6}-[0-9a-f]{6}")
    t.expect(r"calculator: calculate, unit_convert")
    t.expect(r"recorder: leave_note, nap")
    t.expect("› ")
    t.sendline("/quit")
    assert t.wait() == 0


def test_repl_streams_the_answer_and_shows_a_tool_line(
    repl: Callable[..., Terminal], model: ScriptedModelServer
) -> None:
    t = repl()
    t.expect("› ")
    model.push(
        call_tools(tool_call("calculate", {"expression": "2**10"})),
        reply("two to the tenth is 1024 " * 4, chunk_delay=0.02, chunk_chars=5),
    )
    t.sendline("2 to the 10th?")
    t.expect(r"⚙ calculate\(expression='2\*\*10'\) ✓ [\d.]+ ms\n")
    t.expect(r"(two to the tenth is 1024 ){4}")
    t.expect("› ")
    t.sendline("/quit")
    assert t.wait() == 0


def test_repl_new_starts_a_fresh_session(
    repl: Callable[..., Terminal], chatd: DaemonProcess
) -> None:
    t = repl()
    first = t.expect(r"session (\S+)").group(1)
    t.expect("› ")
    t.sendline("/new")
    second = t.expect(r"New session (\S+)").group(1)
    assert second != first
    t.sendline("hello again")
    t.expect("You said: hello again")
    t.expect("› ")
    t.send("\x04")
    assert t.wait() == 0
    assert roles(chatd, first) == [] and roles(chatd, second) == ["user", "assistant"]
    assert {"hook": "on_session_reset", "session_id": first} in hook_log(chatd, first)


def test_repl_ctrl_c_cancels_the_turn_and_the_next_turn_works(
    repl: Callable[..., Terminal], model: ScriptedModelServer, chatd: DaemonProcess
) -> None:
    t = repl()
    sid = t.expect(r"session (\S+)").group(1)
    t.expect("› ")
    model.push(reply("slow words " * 100, chunk_delay=0.05, chunk_chars=6))
    t.sendline("tell me a long story")
    t.expect("slow words")
    t.send("\x03")
    t.expect("⊘ turn cancelled")
    t.expect("› ")
    t.sendline("What is 3 * 3?")
    t.expect(r'"result": 9')
    t.expect("› ")
    t.sendline("/exit")
    assert t.wait() == 0
    assert roles(chatd, sid) == ["user", "user", "assistant", "tool", "assistant"]


def test_repl_ctrl_c_twice_at_the_prompt_leaves(repl: Callable[..., Terminal]) -> None:
    t = repl()
    t.expect("› ")
    # Python's readline only notices a signal that interrupts its select(); one that lands
    # between drawing the prompt and select() waits for the next key. People are slower.
    t.wait_reading()
    t.send("\x03")
    t.expect("Ctrl-C again")
    t.expect("› ")
    t.wait_reading()
    t.send("\x03")
    assert t.wait() == 0


def test_repl_multi_line_input_with_backslash_and_triple_quotes(
    repl: Callable[..., Terminal],
) -> None:
    t = repl()
    t.expect("› ")
    t.sendline("first \\")
    t.sendline("second")
    t.expect("You said: first \nsecond")
    t.expect("› ")
    t.sendline('"""')
    t.sendline("alpha")
    t.sendline("beta")
    t.sendline('"""')
    t.expect("You said: alpha\nbeta")
    t.sendline("/quit")
    assert t.wait() == 0


def test_repl_slash_lines_never_reach_the_model(
    repl: Callable[..., Terminal], model: ScriptedModelServer
) -> None:
    t = repl()
    t.expect("› ")
    before = len(model.requests)
    t.sendline("/plugins")
    t.expect(r"✓ calculator v1\.0\.0")
    t.sendline("/help")
    t.expect(r"/new")
    t.sendline("/nonsense")
    t.expect(r"(Unknown command|nonsense)")
    t.sendline("/quit")
    assert t.wait() == 0
    assert len(model.requests) == before


def test_repl_tab_completes_slash_command_names(repl: Callable[..., Terminal]) -> None:
    t = repl()
    t.expect("› ")
    t.wait_reading()
    t.send("/plug\t")
    t.expect("/plugins")
    t.send("\r")
    t.expect(r"✓ calculator v1\.0\.0")
    t.sendline("/quit")
    assert t.wait() == 0


def test_repl_history_is_saved_in_hermes_home(
    repl: Callable[..., Terminal], chatd: DaemonProcess
) -> None:
    t = repl()
    t.expect("› ")
    t.sendline("a line worth remembering")
    t.expect("You said: a line worth remembering")
    t.sendline("/quit")
    assert t.wait() == 0
    history = chatd.home / "chat_history"
    assert "a line worth remembering" in history.read_text()
    assert history.stat().st_mode & 0o777 == 0o600


def test_repl_continue_resumes_the_latest_session(
    repl: Callable[..., Terminal], chatd: DaemonProcess
) -> None:
    sid = chatd.call("session.create")["id"]
    with chatd.client() as c:
        turn(c, sid, "the latest one")
    t = repl("--continue")
    t.expect(rf"session {sid} .*\(resumed, 2 messages\)")
    t.sendline("/quit")
    assert t.wait() == 0


# --- sessions over the socket -------------------------------------------------------------------


def test_two_clients_attached_to_one_session_both_see_the_events(chatd: DaemonProcess) -> None:
    with chatd.client() as a, chatd.client() as b:
        sid = a.call("session.create")["id"]
        b.call("session.attach", {"session_id": sid})
        events_a = turn(a, sid, "What is 5 * 5?")
        events_b = follow_turn(b, events_a[0]["turn_id"])
    assert [e["type"] for e in events_a] == [e["type"] for e in events_b]
    assert "25" in events_b[-1]["final_text"]


def test_a_turn_outlives_the_client_that_started_it(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("finished without you", delay=0.5))
    with chatd.client() as c:
        sid = c.call("session.create")["id"]
        c.call("session.send", {"session_id": sid, "message": "take your time"})
    with chatd.client() as c:
        session = c.call("session.attach", {"session_id": sid})
        if session["running"]:
            wait_for("turn.finished", c)
    messages = chatd.call("session.history", {"session_id": sid})["messages"]
    assert messages[-1]["content"] == "finished without you"


def test_a_second_send_while_a_turn_runs_is_session_busy(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("slowly", delay=1.0))
    with chatd.client() as c:
        sid = c.call("session.create")["id"]
        first = c.call("session.send", {"session_id": sid, "message": "one"})
        with pytest.raises(RpcError) as err:
            c.call("session.send", {"session_id": sid, "message": "two"})
        assert err.value.code == Codes.SESSION_BUSY
        assert first["turn_id"] in err.value.message
        follow_turn(c, first["turn_id"])
        assert turn(c, sid, "three")[-1]["status"] == "completed"


def test_session_busy_in_chat_is_a_clear_error(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("slowly", delay=1.5))
    with chatd.client() as c:
        sid = c.call("session.create")["id"]
        started = c.call("session.send", {"session_id": sid, "message": "one"})
        result = hermesctl(chatd, "chat", "--session", sid, "-m", "two")
        assert result.returncode == 1 and "already running" in result.stderr
        follow_turn(c, started["turn_id"])


def test_cancel_mid_stream_keeps_a_valid_history(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("word " * 200, chunk_delay=0.02, chunk_chars=5))
    with chatd.client() as c:
        sid = c.call("session.create")["id"]
        started = c.call("session.send", {"session_id": sid, "message": "talk"})
        wait_for("text.delta", c)
        assert c.call("session.cancel", {"session_id": sid}) == {
            "cancelled": True,
            "turn_id": started["turn_id"],
        }
        assert follow_turn(c, started["turn_id"])[-1]["status"] == "cancelled"
        assert turn(c, sid, "are you there?")[-1]["status"] == "completed"
    assert roles(chatd, sid) == ["user", "user", "assistant"]


def test_cancel_mid_tool_answers_the_call_and_the_next_turn_works(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(call_tools(tool_call("nap", {"seconds": "1.5"})))
    with chatd.client() as c:
        sid = c.call("session.create")["id"]
        started = c.call("session.send", {"session_id": sid, "message": "nap please"})
        wait_for("tool.started", c)
        c.call("session.cancel", {"session_id": sid})
        assert follow_turn(c, started["turn_id"])[-1]["status"] == "cancelled"
        assert turn(c, sid, "What is 1 + 1?")[-1]["status"] == "completed"
    history = chatd.call("session.history", {"session_id": sid})["messages"]
    assert [m["role"] for m in history] == [
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert "cancelled" in history[2]["content"]
    sent = model.requests[-2]["messages"]  # the next turn's first request: a valid history
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "tool", "user"]


TIDY_TOOL = """
    import asyncio, os

    async def tidy_nap(args, **kw):
        try:
            await asyncio.sleep(30)
        finally:  # clean-up that itself awaits, as closing a connection does
            await asyncio.sleep(0.5)
            with open(os.path.join(os.environ["HERMES_HOME"], "tidied"), "w") as f:
                f.write("done")
        return "{}"

    def register(ctx):
        ctx.register_tool("tidy_nap", "tidy", {"name": "tidy_nap", "description": "nap",
                          "parameters": {"type": "object", "properties": {}}}, tidy_nap,
                          is_async=True)
"""


def test_a_cancelled_async_tool_finishes_its_clean_up_before_the_turn_ends(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "tidy", TIDY_TOOL)
    d = start(home, config=model_config(model.url))
    model.push(call_tools(tool_call("tidy_nap", {})))
    with d.client() as c:
        sid = c.call("session.create")["id"]
        started = c.call("session.send", {"session_id": sid, "message": "nap"})
        wait_for("tool.started", c)
        c.call("session.cancel", {"session_id": sid})
        assert follow_turn(c, started["turn_id"])[-1]["status"] == "cancelled"
        assert (home / "tidied").read_text() == "done"  # before turn.finished, not after


def test_cancel_without_a_running_turn_says_so(chatd: DaemonProcess) -> None:
    sid = chatd.call("session.create")["id"]
    assert chatd.call("session.cancel", {"session_id": sid}) == {
        "cancelled": False,
        "turn_id": None,
    }


# --- model faults -------------------------------------------------------------------------------


def test_a_500_is_retried_and_the_turn_completes(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(http_error(500), reply("fine now"))
    with chatd.client() as c:
        events = turn(c, c.call("session.create")["id"], "hi")
    retry = next(e for e in events if e["type"] == "model.retry")
    assert "500" in retry["error"] and retry["attempt"] == 1
    assert events[-1]["status"] == "completed" and events[-1]["final_text"] == "fine now"


def test_a_429_is_retried_after_its_retry_after(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(http_error(429, "slow down", retry_after=0.03), reply("thanks for waiting"))
    with chatd.client() as c:
        events = turn(c, c.call("session.create")["id"], "hi")
    assert next(e for e in events if e["type"] == "model.retry")["delay"] == pytest.approx(
        0.03, abs=0.03
    )
    assert events[-1]["final_text"] == "thanks for waiting"


def test_persistent_5xx_fails_the_turn_clearly_and_the_session_stays_usable(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(
        http_error(503, "overloaded"), http_error(503, "overloaded"), http_error(503, "overloaded")
    )
    with chatd.client() as c:
        sid = c.call("session.create")["id"]
        failed = turn(c, sid, "hi")[-1]
        assert failed["status"] == "failed" and "HTTP 503" in failed["error"]
        assert failed["error_type"] == "ModelRequestFailed"
        assert turn(c, sid, "again")[-1]["status"] == "completed"


def test_a_stream_cut_midway_is_retried_and_partial_text_discarded(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(cut_stream("half an ans", after=3), reply("a whole answer"))
    with chatd.client() as c:
        sid = c.call("session.create")["id"]
        events = turn(c, sid, "hi")
    retry = next(e for e in events if e["type"] == "model.retry")
    assert retry["discard_partial"] is True
    assert events[-1]["final_text"] == "a whole answer"
    assert roles(chatd, sid) == ["user", "assistant"]


def test_invalid_tool_call_json_becomes_a_result_the_model_reads(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(call_tools(tool_call("calculate", '{"expression": "1+')), reply("sorry"))
    with chatd.client() as c:
        events = turn(c, c.call("session.create")["id"], "broken")
    finished = next(e for e in events if e["type"] == "tool.finished")
    assert finished["status"] == "error"
    tool_message = model.requests[-1]["messages"][-1]
    assert tool_message["role"] == "tool" and "error" in json.loads(tool_message["content"])
    assert events[-1]["status"] == "completed"


def test_an_unknown_tool_becomes_a_result_the_model_reads(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(call_tools(tool_call("teleport", {"to": "mars"})), reply("cannot"))
    with chatd.client() as c:
        events = turn(c, c.call("session.create")["id"], "go")
    assert json.loads(model.requests[-1]["messages"][-1]["content"]) == {
        "error": "Unknown tool: teleport"
    }
    assert events[-1]["status"] == "completed"


def test_a_slow_response_past_model_timeout_fails_clearly(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    d = start(config=model_config(model.url, timeout=2, max_retries=0))
    model.push(reply("too late", delay=6))
    with d.client() as c:
        sid = c.call("session.create")["id"]
        failed = turn(c, sid, "hurry")[-1]
        assert failed["status"] == "failed"
        assert "timed out" in failed["error"].lower() or "timeout" in failed["error"].lower()
        assert turn(c, sid, "again")[-1]["status"] == "completed"


def test_a_slow_response_is_retried_when_retries_are_left(
    chatd: DaemonProcess, model: ScriptedModelServer, start: Callable[..., DaemonProcess]
) -> None:
    d = start(config=model_config(model.url, timeout=2, max_retries=1, retry_max_wait=0.05))
    model.push(reply("too late", delay=6), reply("on time"))
    with d.client() as c:
        events = turn(c, c.call("session.create")["id"], "hurry")
    assert any(e["type"] == "model.retry" for e in events)
    assert events[-1]["final_text"] == "on time"


# --- plugins and hooks --------------------------------------------------------------------------


def test_pre_llm_call_context_reaches_the_model_but_not_the_history(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("understood"))
    with chatd.client() as c:
        sid = c.call("session.create")["id"]
        turn(c, sid, "chatting with context")
    sent = model.last_request["messages"][-1]
    assert sent["role"] == "user" and sent["content"] == f"chatting with context\n\n{CONTEXT}"
    stored = chatd.call("session.history", {"session_id": sid})["messages"]
    assert [m["content"] for m in stored] == ["chatting with context", "understood"]
    assert all(CONTEXT not in m["content"] for m in model.last_request["messages"][:1])


def test_session_hooks_fire_start_end_reset_and_finalize(chatd: DaemonProcess) -> None:
    with chatd.client() as c:
        sid = c.call("session.create")["id"]
        turn(c, sid, "first")
        turn(c, sid, "second")
        c.call("session.reset", {"session_id": sid})
        c.call("session.delete", {"session_id": sid})
    assert [e["hook"] for e in hook_log(chatd, sid)] == [
        "on_session_start",
        "on_session_end",
        "on_session_end",
        "on_session_reset",
        "on_session_finalize",
    ]
    assert hook_log(chatd, sid)[1]["completed"] is True


def test_inject_message_from_a_plugin_tool_lands_after_the_turn(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(call_tools(tool_call("leave_note", {"text": "buy milk"})), reply("noted"))
    with chatd.client() as c:
        sid = c.call("session.create")["id"]
        turn(c, sid, "remind me")
        injected = wait_for("message", c)
    assert injected["injected"] is True
    history = chatd.call("session.history", {"session_id": sid})["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant", "user"]
    assert history[-1]["content"] == "note from the plugin: buy milk"


# --- restart --------------------------------------------------------------------------------------


def test_history_survives_a_daemon_restart(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    home = short_tmpdir()
    config = model_config(model.url)
    first = start(home, config=config)
    answered = hermesctl(first, "chat", "--json", "-m", "What is 12 * 12?")
    sid = json.loads(answered.stdout.splitlines()[0])["session_id"]
    first.stop()
    second = start(home, config=config)
    history = second.call("session.history", {"session_id": sid})["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert "144" in history[-1]["content"]
    again = hermesctl(second, "chat", "--continue", "--json", "-m", "and again?")
    assert json.loads(again.stdout.splitlines()[0])["session_id"] == sid
    assert len(second.call("session.history", {"session_id": sid})["messages"]) == 6


# --- approvals -------------------------------------------------------------------------------


def test_one_shot_without_a_terminal_denies_approvals_saying_no_one_could_be_asked(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    victim = short_tmpdir("victim-")
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {victim}"})))
    result = hermesctl(chatd, "chat", "-m", "clean up")
    assert result.returncode == 0
    assert "BLOCKED: Command not run: no one could be asked for approval" in result.stdout
    assert "denied by user" not in result.stdout
    assert victim.exists()


def _victim(d: DaemonProcess) -> Path:
    """A folder in the daemon's workspace: the sandbox lets a command delete only there."""
    return Path(tempfile.mkdtemp(prefix="victim-", dir=_workspace(d)))


def _workspace(d: DaemonProcess) -> Path:
    workspace = d.home / "workspace"
    workspace.mkdir(exist_ok=True)
    return workspace


def test_one_shot_approve_once_lets_the_command_run(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    victim = _victim(chatd)
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {victim}"})))
    result = hermesctl(chatd, "chat", "--approve", "once", "-m", "clean up")
    assert result.returncode == 0 and '"exit_code": 0' in result.stdout
    assert not victim.exists()


def test_repl_asks_on_the_terminal_before_a_dangerous_command(
    chatd: DaemonProcess, repl: Callable[..., Terminal], model: ScriptedModelServer
) -> None:
    victim = _victim(chatd)
    t = repl()
    t.expect("› ")
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {victim}"})))
    t.sendline("clean up")
    t.expect("DANGEROUS COMMAND")
    t.expect(r"Choice \[o/s/a/D\]: ")
    assert victim.exists()
    t.sendline("o")
    t.expect(r"⚙ terminal\(command='rm -r .*'\) ✓")
    t.expect("› ")
    t.sendline("/quit")
    assert t.wait() == 0
    assert not victim.exists()


def test_config_reload_sends_later_turns_to_the_new_endpoint(
    start: Callable[..., DaemonProcess],
) -> None:
    with (
        ScriptedModelServer(rules=lambda r: reply("from A")) as a,
        ScriptedModelServer(rules=lambda r: reply("from B")) as b,
    ):
        d = start(config=model_config(a.url))
        with d.client() as c:
            sid = c.call("session.create")["id"]
            assert turn(c, sid, "hi")[-1]["final_text"] == "from A"
            (d.home / "config.yaml").write_text(model_config(b.url))
            c.call("config.reload")
            assert turn(c, sid, "hi again")[-1]["final_text"] == "from B"


def test_a_tool_turn_completes_without_telling_the_endpoint_about_the_host(
    start: Callable[..., DaemonProcess],
) -> None:
    with ScriptedModelServer(rules=calculator_rules) as model:
        d = start(config=model_config(model.url))
        with d.client() as c:
            for _ in range(2):  # the second turn reuses the kept-alive connection
                sid = c.call("session.create")["id"]
                assert (
                    turn(c, sid, "What is 15 * 23?")[-1]["final_text"]
                    == 'The result is: {"expression": "15 * 23", "result": 345}'
                )
        headers = model.request_headers
    assert len(headers) == 4
    for sent in headers:
        assert sent["content-type"] == "application/json"
        assert not [name for name in sent if name.startswith("x-stainless")], sent


def test_every_event_of_a_turn_arrives_in_order_before_the_wait_answer(
    chatd: DaemonProcess,
) -> None:
    with Client.connect(chatd.socket, hello=True) as c:
        sid = c.call("session.create")["id"]
        result = c.call(
            "session.send", {"session_id": sid, "message": "What is 15 * 23?", "wait": True}
        )
        # the answer came last: every event is already here, without reading further
        events = [n.params[0] for n in c.notifications(timeout=0)]
    assert result["status"] == "completed"
    types = [e["type"] for e in events if e["session_id"] == sid]
    assert types[0] == "turn.started" and types[-1] == "turn.finished"
    order = [types.index(t) for t in ("tool.started", "tool.finished", "message")]
    assert order == sorted(order)
    assert types.count("turn.finished") == 1


SLOW_OBSERVER = """
    import os, time

    def _log(line):
        with open(os.path.join(os.environ["HERMES_HOME"], "observed.log"), "a") as fh:
            fh.write(line + "\\n")

    def _post(tool_name="", tool_call_id="", **kw):
        # the model's second request is sent while this runs (it does not wait for us)
        second = os.path.join(os.environ["HERMES_HOME"], "second-request")
        deadline = time.monotonic() + 10
        while not os.path.exists(second) and time.monotonic() < deadline:
            time.sleep(0.02)
        _log("post " + tool_name + " saw-second=" + str(os.path.exists(second)))

    def _end(**kw):
        _log("end")

    def register(ctx):
        ctx.register_hook("post_tool_call", _post)
        ctx.register_hook("on_session_end", _end)
"""


def test_a_slow_post_tool_call_hook_runs_beside_the_next_request_yet_before_turn_finished(
    start: Callable[..., DaemonProcess],
) -> None:
    # post_tool_call callbacks are not waited for before the next model request (their
    # return value is ignored), but a client that sees turn.finished sees them done, and
    # the turn's next hook (on_session_end) runs after them.
    home = short_tmpdir()
    write_plugin(home / "plugins", "observer", SLOW_OBSERVER)
    arrived: list[float] = []

    def rules(request: dict[str, Any]) -> Any:
        arrived.append(time.monotonic())
        if len(arrived) == 2:
            (home / "second-request").touch()
        return calculator_rules(request)

    with ScriptedModelServer(rules=rules) as model:
        d = start(home, config=model_config(model.url))
        with d.client() as c:
            sid = c.call("session.create")["id"]
            events = send_and_follow(c, sid, "What is 15 * 23?")
            observed = (home / "observed.log").read_text().splitlines()
    finished = [e for e in events if e["type"] == "turn.finished"]
    tool_done = [e for e in events if e["type"] == "tool.finished"]
    assert finished[0]["status"] == "completed" and tool_done
    # all done when turn.finished arrived, and the hook saw the second request go out while
    # it was still running
    assert observed == ["post calculate saw-second=True", "end"]
    assert len(arrived) == 2
