"""The built-in memory on a real daemon: the tool's results, the prompt snapshot, redaction.

The expected results are what hermes-agent 0.19.0's memory tool returned for the same calls
in the same order (tests/data/memory_reference.json); the daemon must return the same text.
The snapshot tests read the system message of the requests the scripted model received.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from tests.support.daemon import REPO, DaemonProcess, short_tmpdir, start_daemon
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)

REFERENCE = json.loads((REPO / "tests" / "data" / "memory_reference.json").read_text())
Y = "y" * 2150
RULE = "═" * 46


def _expand(value: Any) -> Any:
    return json.loads(json.dumps(value).replace("{Y}", Y))


@pytest.fixture(scope="module")
def daemon(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = short_tmpdir("mem-")
    process = start_daemon(home, config=model_config(model.url))
    yield process
    process.stop()


@pytest.fixture
def client(daemon: DaemonProcess) -> Iterator[Client]:
    shutil.rmtree(daemon.home / "memories", ignore_errors=True)
    yield daemon.client()


def _memory(client: Client, args: Any, session_id: str = "") -> str:
    params: dict[str, Any] = {"name": "memory", "args": args}
    if session_id:
        params["session_id"] = session_id
    result: str = client.call("tools.call", params)["result"]
    return result


def _turn(model: ScriptedModelServer, client: Client, sid: str, *steps: Any) -> dict[str, Any]:
    """One turn of ``sid`` in which the model answers with ``steps``; its last request."""
    model.push(*steps)
    seen = len(model.requests)
    result = client.call(
        "session.send", {"session_id": sid, "message": "hello", "wait": True}, timeout=60
    )
    assert result["status"] == "completed", result
    request: dict[str, Any] = model.requests[seen:][-1]
    return request


def _system(request: dict[str, Any]) -> str:
    [system] = [m for m in request["messages"] if m["role"] == "system"]
    content: str = system["content"]
    return content


def test_every_call_returns_the_reference_text_in_order(client: Client) -> None:
    for step in REFERENCE["steps"]:
        assert _memory(client, _expand(step["args"])) == _expand(step["result"]), step["args"]


def test_the_files_hold_what_the_reference_wrote(client: Client, daemon: DaemonProcess) -> None:
    for step in REFERENCE["steps"]:
        _memory(client, _expand(step["args"]))
    memories = daemon.home / "memories"
    assert (memories / "MEMORY.md").read_text() == REFERENCE["memory_file"]
    assert (memories / "USER.md").read_text() == "Name: Ada"
    assert (memories / "MEMORY.md").stat().st_mode & 0o777 == 0o600
    assert memories.stat().st_mode & 0o777 == 0o700


def test_the_snapshot_reaches_the_model_byte_for_byte(
    client: Client, model: ScriptedModelServer
) -> None:
    for step in REFERENCE["steps"]:
        _memory(client, _expand(step["args"]))
    sid = client.call("session.create")["id"]
    system = _system(_turn(model, client, sid, reply("hi")))
    blocks = REFERENCE["memory_block"] + "\n\n" + REFERENCE["user_block"]
    assert system.endswith("\n\n" + blocks)
    assert system.count(RULE) == 4


def test_a_model_call_gets_the_reference_json_as_its_tool_result(
    client: Client, model: ScriptedModelServer
) -> None:
    sid = client.call("session.create")["id"]
    args = {"target": "memory", "action": "add", "content": "User's project uses pytest"}
    last = _turn(model, client, sid, call_tools(tool_call("memory", args)), reply("saved"))
    [result] = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    assert result == REFERENCE["steps"][0]["result"]


def test_writes_during_a_session_stay_out_of_its_prompt_until_the_next_session(
    client: Client, model: ScriptedModelServer
) -> None:
    _memory(client, {"target": "user", "action": "add", "content": "Name: Ada"})
    first = client.call("session.create")["id"]
    args = {"target": "user", "action": "add", "content": "Prefers tabs"}
    saving = call_tools(tool_call("memory", args))
    before = _system(_turn(model, client, first, saving, reply("ok")))
    later = _system(_turn(model, client, first, reply("still here")))
    assert later == before
    assert "Name: Ada" in later and "Prefers tabs" not in later
    second = client.call("session.create")["id"]
    fresh = _system(_turn(model, client, second, reply("new")))
    assert "Name: Ada\n§\nPrefers tabs" in fresh


def test_a_session_keeps_its_snapshot_across_a_restart(model: ScriptedModelServer) -> None:
    home = short_tmpdir("memr-")
    daemon = start_daemon(home, config=model_config(model.url))
    try:
        c = daemon.client()
        _memory(c, {"target": "memory", "action": "add", "content": "Old fact"})
        sid = c.call("session.create")["id"]
        before = _system(_turn(model, c, sid, reply("one")))
        _memory(c, {"target": "memory", "action": "add", "content": "New fact"})
    finally:
        daemon.stop()
    daemon = start_daemon(home, config=model_config(model.url))
    try:
        c = daemon.client()
        after = _system(_turn(model, c, sid, reply("two")))
        assert after == before and "New fact" not in after
        other = c.call("session.create")["id"]
        assert "Old fact\n§\nNew fact" in _system(_turn(model, c, other, reply("three")))
    finally:
        daemon.stop()


def test_an_empty_memory_adds_nothing_to_the_prompt(
    client: Client, model: ScriptedModelServer
) -> None:
    sid = client.call("session.create")["id"]
    assert RULE not in _system(_turn(model, client, sid, reply("hi")))


def test_a_secret_is_redacted_before_it_is_written(client: Client, daemon: DaemonProcess) -> None:
    secret = "sk-proj-" + "A1b2C3d4" * 5
    args = {"target": "memory", "action": "add", "content": f"Deploy key is {secret}"}
    assert json.loads(_memory(client, args))["success"] is True
    text = (daemon.home / "memories" / "MEMORY.md").read_text()
    assert secret not in text and "[REDACTED]" in text


def test_a_secret_in_a_batch_is_redacted_too(client: Client, daemon: DaemonProcess) -> None:
    secret = "ghp_" + "Z9y8X7w6" * 5
    ops = [{"action": "add", "content": f"token {secret}"}, {"action": "add", "content": "plain"}]
    assert json.loads(_memory(client, {"target": "user", "operations": ops}))["success"] is True
    text = (daemon.home / "memories" / "USER.md").read_text()
    assert secret not in text and "plain" in text


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            {"target": "memory", "action": "add", "content": 42},
            {
                "error": "Invalid arguments for tool 'memory': parameter 'content' must be string, "
                "got integer"
            },
        ),
        (
            {"target": "memory", "action": ["add"], "content": "x"},
            {
                "error": "Invalid arguments for tool 'memory': parameter 'action' must be string, "
                "got array"
            },
        ),
        (
            {"target": 7, "action": "add", "content": "x"},
            {"error": "Invalid target '7'. Use 'memory' or 'user'.", "success": False},
        ),
        (
            {"target": "memory", "operations": [{"action": "add", "content": 5}]},
            {
                "success": False,
                "error": "Operation 1 (add): content must be a string. No operations were "
                "applied (batch is all-or-nothing).",
                "current_entries": [],
                "usage": "0/2,200",
            },
        ),
        (
            {"target": "memory", "operations": ["add x"]},
            {
                "success": False,
                "error": "Operation 1 (unknown): unknown action. Use add, replace, or remove. "
                "No operations were applied (batch is all-or-nothing).",
                "current_entries": [],
                "usage": "0/2,200",
            },
        ),
    ],
    ids=["content-int", "action-list", "target-int", "op-content-int", "op-not-a-map"],
)
def test_wrong_types_get_a_structured_error(
    client: Client, daemon: DaemonProcess, args: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert json.loads(_memory(client, args)) == expected
    assert not (daemon.home / "memories" / "MEMORY.md").exists()
    assert client.call("ping") is not None


def test_arguments_that_are_not_json_get_an_error(
    client: Client, model: ScriptedModelServer
) -> None:
    sid = client.call("session.create")["id"]
    broken = call_tools(tool_call("memory", '{"target": "memory", "action": "add", "content": '))
    last = _turn(model, client, sid, broken, reply("sorry"))
    [result] = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    assert "error" in json.loads(result)
    assert client.call("ping") is not None


def test_a_file_edited_by_hand_is_backed_up_not_overwritten(
    client: Client, daemon: DaemonProcess
) -> None:
    memories = daemon.home / "memories"
    memories.mkdir(exist_ok=True)
    hand = "Fact one\n§\nFact two\n\nappended by hand §  with a stray delimiter\n§\n\n§\n"
    (memories / "MEMORY.md").write_text(hand)
    remove = {"target": "memory", "action": "remove", "old_text": "one"}
    result = json.loads(_memory(client, remove))
    assert result["success"] is False
    assert result["error"].startswith("Refusing to write MEMORY.md: file on disk has content")
    assert Path(result["drift_backup"]).read_text() == hand
    assert (memories / "MEMORY.md").read_text() == hand


def test_after_three_failed_attempts_in_a_turn_the_model_is_told_to_stop(
    client: Client, model: ScriptedModelServer
) -> None:
    sid = client.call("session.create")["id"]
    miss = {"target": "memory", "action": "remove", "old_text": "ghost"}
    four = call_tools(*(tool_call("memory", miss) for _ in range(4)))
    last = _turn(model, client, sid, four, reply("moving on"))
    results = [json.loads(m["content"]) for m in last["messages"] if m["role"] == "tool"]
    assert [r["error"].startswith("No entry matched 'ghost'.") for r in results[:3]] == [True] * 3
    assert results[3] == {
        "success": False,
        "done": True,
        "error": "Memory consolidation failed 4 times this turn. Stop retrying memory calls — "
        "leave memory unchanged for now and continue with your reply to the user. The fact "
        "can be saved in a later turn.",
    }
    again = _turn(model, client, sid, call_tools(tool_call("memory", miss)), reply("ok"))
    [result] = [json.loads(m["content"]) for m in again["messages"] if m["role"] == "tool"][-1:]
    assert result["error"].startswith("No entry matched 'ghost'.")  # a new turn, a new budget
