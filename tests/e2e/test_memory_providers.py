"""Memory provider plugins on a real daemon: ``memory.provider`` selects the recorder provider
(tests/data/memory_providers/recorder, a folder with no plugin.yaml in $HERMES_HOME/plugins),
which writes every call it gets to ``$HERMES_HOME/recorder.jsonl``; the tests read that file,
the requests the scripted model received, the stored history and the daemon log.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from tests.support.daemon import REPO, DaemonProcess, run_hermesctl, short_tmpdir, start_daemon
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)

RECORDER = REPO / "tests" / "data" / "memory_providers" / "recorder"
FENCE_NOTE = (
    "[System note: The following is recalled memory context, NOT new user input. Treat as "
    "authoritative reference data — this is the agent's persistent memory and should inform "
    "all responses.]"
)


def _home_with_recorder(provider: str) -> Path:
    home = short_tmpdir("memp-")
    shutil.copytree(RECORDER, home / "plugins" / "recorder")
    return home


@pytest.fixture(scope="module")
def daemon(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = _home_with_recorder("recorder")
    config = model_config(model.url) + "memory:\n  provider: recorder\n"
    process = start_daemon(home, config=config)
    yield process
    process.stop()


@pytest.fixture
def client(daemon: DaemonProcess) -> Iterator[Client]:
    (daemon.home / "recorder-mode.json").unlink(missing_ok=True)
    yield daemon.client()
    (daemon.home / "recorder-mode.json").unlink(missing_ok=True)


def _mode(daemon: DaemonProcess, **mode: Any) -> None:
    (daemon.home / "recorder-mode.json").write_text(json.dumps(mode))


def _calls(daemon: DaemonProcess, session_id: str | None = None) -> list[dict[str, Any]]:
    path = daemon.home / "recorder.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    calls = [json.loads(line) for line in lines]
    if session_id is None:
        return calls
    mine = {
        c["instance"] for c in calls if c["method"] == "initialize" and c["args"][0] == session_id
    }
    return [c for c in calls if c["instance"] in mine]


def _wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _send(client: Client, sid: str, message: str) -> dict[str, Any]:
    result: dict[str, Any] = client.call(
        "session.send", {"session_id": sid, "message": message, "wait": True}, timeout=60
    )
    assert result["status"] == "completed", result
    return result


def _methods(calls: list[dict[str, Any]]) -> list[str]:
    return [c["method"] for c in calls]


def test_every_lifecycle_call_gets_the_reference_arguments(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    sid = client.call("session.create")["id"]
    model.push(
        call_tools(
            tool_call("recall_notes", {"q": "cat"}),
            tool_call(
                "memory",
                {"action": "add", "target": "memory", "content": "Cat: Miso"},
                call_id="call_mem_1",
            ),
        ),
        reply("Your cat is Miso."),
    )
    _send(client, sid, "What is my cat called?")
    _wait_for(lambda: "queue_prefetch" in _methods(_calls(daemon, sid)), "queue_prefetch")
    client.call("session.delete", {"session_id": sid})
    calls = _wait_for(
        lambda: (c := _calls(daemon, sid)) and c[-1]["method"] == "shutdown" and c, "shutdown"
    )
    by_method = {c["method"]: c for c in calls}
    init = by_method["initialize"]
    assert init["args"] == [sid]
    assert init["kwargs"]["hermes_home"] == str(daemon.home)
    assert init["kwargs"]["platform"] == "cli"
    assert init["kwargs"]["agent_context"] == "primary"
    assert init["kwargs"]["user_id"].isdigit()
    assert by_method["on_turn_start"]["args"] == [1, "What is my cat called?"]
    assert by_method["prefetch"] == {
        **by_method["prefetch"],
        "args": ["What is my cat called?"],
        "kwargs": {"session_id": sid},
    }
    assert by_method["handle_tool_call"]["args"] == ["recall_notes", {"q": "cat"}]
    write = by_method["on_memory_write"]
    assert write["args"] == ["add", "memory", "Cat: Miso"]
    assert write["kwargs"]["metadata"] == {  # empty values left out, as the reference does
        "write_origin": "assistant_tool",
        "execution_context": "foreground",
        "session_id": sid,
        "platform": "cli",
        "tool_name": "memory",
        "task_id": sid,
        "tool_call_id": "call_mem_1",
    }
    sync = by_method["sync_turn"]
    assert sync["args"] == ["What is my cat called?", "Your cat is Miso."]
    assert sync["kwargs"]["session_id"] == sid
    assert [m["role"] for m in sync["kwargs"]["messages"]] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert by_method["queue_prefetch"]["args"] == ["What is my cat called?"]
    assert by_method["queue_prefetch"]["kwargs"] == {"session_id": sid}
    assert by_method["on_session_end"]["args"][0][0] == {
        "role": "user",
        "content": "What is my cat called?",
    }
    order = _methods(calls)
    assert order.index("initialize") < order.index("system_prompt_block")
    assert order.index("on_turn_start") < order.index("prefetch") < order.index("handle_tool_call")
    assert order.index("sync_turn") < order.index("queue_prefetch") < order.index("on_session_end")
    assert order[-1] == "shutdown"


def test_recalled_text_reaches_the_model_request_but_not_the_database(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    sid = client.call("session.create")["id"]
    model.push(reply("Noted."))
    seen = len(model.requests)
    _send(client, sid, "Hello again")
    user = [m for m in model.requests[seen]["messages"] if m["role"] == "user"][-1]
    assert user["content"] == (
        "Hello again\n\n<memory-context>\n"
        + FENCE_NOTE
        + "\n\nThe user's cat is called Miso.\n</memory-context>"
    )
    history = client.call("session.history", {"session_id": sid})["messages"]
    assert [m["content"] for m in history if m["role"] == "user"] == ["Hello again"]


def test_the_provider_prompt_block_follows_the_system_prompt(
    client: Client, model: ScriptedModelServer
) -> None:
    sid = client.call("session.create")["id"]
    model.push(reply("Hi."))
    seen = len(model.requests)
    _send(client, sid, "Hi")
    [system] = [m for m in model.requests[seen]["messages"] if m["role"] == "system"]
    assert system["content"].endswith("\n\nRECORDER: recall works through the recall_notes tool.")


def test_provider_tools_are_offered_but_never_one_shadowing_a_core_tool(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    sid = client.call("session.create")["id"]
    model.push(reply("Hi."))
    seen = len(model.requests)
    _send(client, sid, "Hi")
    names = [t["function"]["name"] for t in model.requests[seen]["tools"]]
    assert "recall_notes" in names
    assert names.count("memory") == 1  # the built-in one
    assert "Memory provider 'recorder' tool 'memory' shadows a core tool name" in daemon.log()


def test_a_provider_raising_in_every_call_leaves_the_turn_whole(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    _mode(
        daemon,
        **{
            "raise": [
                "initialize",
                "system_prompt_block",
                "on_turn_start",
                "prefetch",
                "sync_turn",
                "queue_prefetch",
                "handle_tool_call",
            ]
        },
    )
    sid = client.call("session.create")["id"]
    model.push(call_tools(tool_call("recall_notes", {"q": "x"})), reply("Still here."))
    seen = len(model.requests)
    result = _send(client, sid, "Are you there?")
    assert result["final_text"] == "Still here."
    user = [m for m in model.requests[seen]["messages"] if m["role"] == "user"][-1]
    assert user["content"] == "Are you there?"
    tool = [m for m in model.requests[seen + 1]["messages"] if m["role"] == "tool"][-1]
    assert json.loads(tool["content"]) == {
        "error": "Memory tool 'recall_notes' failed (see the daemon log)"
    }
    _wait_for(lambda: "queue_prefetch" in _methods(_calls(daemon, sid)), "queue_prefetch")
    log = _wait_for(
        lambda: "'recorder' queue_prefetch() failed" in (t := daemon.log()) and t, "log"
    )
    assert (
        "Memory provider 'recorder' prefetch() failed: RuntimeError: recorder was told to fail "
        "in prefetch; the turn goes on" in log
    )
    for method in ("initialize", "on_turn_start", "sync_turn", "handle_tool_call"):
        assert f"Memory provider 'recorder' {method}() failed" in log
    assert daemon.alive()


def test_a_provider_hanging_in_prefetch_is_abandoned_after_eight_seconds(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    _mode(daemon, hang=["prefetch"])
    sid = client.call("session.create")["id"]
    model.push(reply("Answered anyway."))
    seen = len(model.requests)
    result = _send(client, sid, "Slow memory?")
    assert result["final_text"] == "Answered anyway."
    user = [m for m in model.requests[seen]["messages"] if m["role"] == "user"][-1]
    assert user["content"] == "Slow memory?"
    assert (
        "Memory provider 'recorder' prefetch() did not return within 8s; abandoned, the turn "
        "goes on" in daemon.log()
    )


def test_a_provider_hanging_in_sync_turn_does_not_hold_the_next_turn(
    client: Client, daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    _mode(daemon, hang=["sync_turn"])
    sid = client.call("session.create")["id"]
    model.push(reply("One."), reply("Two."))
    _send(client, sid, "first")
    assert _send(client, sid, "second")["final_text"] == "Two."


def test_plugins_list_shows_the_active_provider_as_available(client: Client) -> None:
    def line() -> str | None:
        for p in client.call("plugins.list")["plugins"]:
            if p["key"] == "recorder" and p["memory_provider"]["available"] is not None:
                return str(p["line"])
        return None

    assert _wait_for(line, "the provider's status") == (
        "✓ recorder (memory provider, user, active, available)"
    )
    text = client.call("plugins.list")["text"]
    assert "  ✓ recorder (memory provider, user, active, available)" in text
    assert "registered nothing" not in text


def test_an_unavailable_provider_is_listed_with_its_reason_and_not_used(
    model: ScriptedModelServer,
) -> None:
    home = _home_with_recorder("recorder")
    (home / "recorder-mode.json").write_text(json.dumps({"unavailable": "no recorder CLI"}))
    config = model_config(model.url) + "memory:\n  provider: recorder\n"
    daemon = start_daemon(home, config=config)
    try:
        with daemon.client() as c:

            def line() -> str | None:
                for p in c.call("plugins.list")["plugins"]:
                    if p["key"] == "recorder" and p["memory_provider"]["available"] is not None:
                        return str(p["line"])
                return None

            assert _wait_for(line, "status") == (
                "✗ recorder (memory provider, user, active) — unavailable: no recorder CLI"
            )
            sid = c.call("session.create")["id"]
            model.push(reply("Fine."))
            _send(c, sid, "hi")
        assert "Memory provider 'recorder' is not available: no recorder CLI" in daemon.log()
        assert "initialize" not in _methods(_calls(daemon))
    finally:
        daemon.stop()


def test_an_unknown_provider_name_is_a_clear_warning_and_the_builtin_memory_goes_on(
    model: ScriptedModelServer,
) -> None:
    home = _home_with_recorder("recorder")
    config = model_config(model.url) + "memory:\n  provider: nosuch\n"
    daemon = start_daemon(home, config=config)
    try:
        with daemon.client() as c:
            sid = c.call("session.create")["id"]
            model.push(reply("Fine."))
            _send(c, sid, "hi")
            listed = {p["key"]: p["line"] for p in c.call("plugins.list")["plugins"]}
        assert listed["recorder"] == (
            "○ recorder (memory provider, user) — not selected (memory.provider: recorder)"
        )
        _wait_for(lambda: "memory.provider is 'nosuch'" in daemon.log(), "the warning")
        assert (
            "memory.provider is 'nosuch', but no memory provider of that name was found"
            in daemon.log()
        )
        assert "Known providers: recorder" in daemon.log()
        assert not (home / "recorder.jsonl").exists()  # not selected: never imported
    finally:
        daemon.stop()


def test_provider_tools_stay_out_when_the_memory_toolset_is_off(
    model: ScriptedModelServer,
) -> None:
    home = _home_with_recorder("recorder")
    config = (
        model_config(model.url)
        + "memory:\n  provider: recorder\ntools:\n  enabled_toolsets: [file]\n"
    )
    daemon = start_daemon(home, config=config)
    try:
        with daemon.client() as c:
            sid = c.call("session.create")["id"]
            model.push(reply("Fine."))
            seen = len(model.requests)
            _send(c, sid, "hi")
        names = [t["function"]["name"] for t in model.requests[seen].get("tools", [])]
        assert "recall_notes" not in names
        assert "memory" not in names
        assert "prefetch" in _methods(_calls(daemon, sid))  # the provider itself still recalls
    finally:
        daemon.stop()


def test_deliveries_pending_at_a_kill_are_made_once_after_the_restart(
    model: ScriptedModelServer,
) -> None:
    home = _home_with_recorder("recorder")
    (home / "recorder-mode.json").write_text(json.dumps({"hang": ["sync_turn", "on_memory_write"]}))
    config = model_config(model.url) + "memory:\n  provider: recorder\n"
    first = start_daemon(home, config=config)
    with first.client() as c:
        sid = c.call("session.create")["id"]
        model.push(
            call_tools(tool_call("memory", {"action": "add", "target": "user", "content": "Ada"})),
            reply("Saved."),
        )
        _send(c, sid, "Remember me: Ada")
    _wait_for(
        lambda: {"sync_turn", "on_memory_write"} <= set(_methods(_calls(first, sid))),
        "the hung deliveries",
    )
    first.proc.kill()  # kill -9 while the provider holds both
    first.proc.wait()
    first.stop()
    (home / "recorder-mode.json").unlink()
    before = len(_calls(first))

    second = start_daemon(home, config=config)
    try:
        db = home / "state.db"

        def journal_empty() -> bool:
            with sqlite3.connect(db) as conn:
                return conn.execute("SELECT count(*) FROM memory_deliveries").fetchone()[0] == 0

        _wait_for(journal_empty, "the journal to empty")
        after = _calls(second)[before:]
        assert [c["method"] for c in after if c["method"] != "is_available"] == [
            "initialize",
            "on_memory_write",  # in the order they were made: the write came during the turn
            "sync_turn",
        ]
        assert after[1]["args"] == ["add", "user", "Ada"]
        assert after[1]["kwargs"]["metadata"]["session_id"] == sid
        assert after[2]["args"] == ["Remember me: Ada", "Saved."]
        assert after[2]["kwargs"]["session_id"] == sid
        assert "delivering 2 call(s) journalled before the restart" in second.log()
    finally:
        second.stop()


def test_a_provider_a_plugin_registers_through_ctx_is_used_when_named(
    model: ScriptedModelServer,
) -> None:
    home = short_tmpdir("memp-")
    declared = short_tmpdir("memd-")
    shutil.copytree(RECORDER, declared / "recorder")
    (declared / "recorder" / "plugin.yaml").write_text("name: recorder-plugin\nversion: 2.0.0\n")
    config = model_config(model.url) + "memory:\n  provider: recorder\n"
    daemon = start_daemon(home, config=config, env={"HERMES_PLUGIN_PATH": str(declared)})
    try:
        with daemon.client() as c:
            sid = c.call("session.create")["id"]
            model.push(reply("Fine."))
            _send(c, sid, "hi")
            lines = [p["line"] for p in c.call("plugins.list")["plugins"]]
        assert "✓ recorder-plugin v2.0.0 (1 memory provider)" in lines
        assert "prefetch" in _methods(_calls(daemon, sid))
        assert "no memory provider of that name" not in daemon.log()
    finally:
        daemon.stop()


def test_a_persons_writes_reach_the_provider_with_their_origin(
    client: Client, daemon: DaemonProcess
) -> None:
    before = len(_calls(daemon))
    ctl = ["--socket", str(daemon.socket), "memory"]
    assert run_hermesctl([*ctl, "add", "Prefers", "tabs"]).returncode == 0
    assert run_hermesctl([*ctl, "remove", "tabs"]).returncode == 0
    writes = _wait_for(
        lambda: (
            len(w := [c for c in _calls(daemon)[before:] if c["method"] == "on_memory_write"]) == 2
            and w
        ),
        "two writes",
    )
    person = {
        "write_origin": "user",
        "execution_context": "foreground",
        "platform": "cli",
        "tool_name": "memory",
    }
    assert writes[0]["args"] == ["add", "memory", "Prefers tabs"]
    assert writes[0]["kwargs"]["metadata"] == person
    assert writes[1]["args"] == ["remove", "memory", ""]
    assert writes[1]["kwargs"]["metadata"] == {**person, "old_text": "tabs"}
    [init] = [
        c
        for c in _calls(daemon)
        if c["method"] == "initialize" and c["instance"] == writes[0]["instance"]
    ]
    assert init["args"] == [""]  # an instance for writes made outside any session
    assert init["kwargs"]["user_id"] == str(os.getuid())


def test_a_persons_edit_of_the_file_reaches_the_provider_as_its_removes_and_adds(
    client: Client, daemon: DaemonProcess, tmp_path: Path
) -> None:
    ctl = ["--socket", str(daemon.socket), "memory"]
    assert run_hermesctl([*ctl, "add", "Uses", "vim"]).returncode == 0
    _wait_for(
        lambda: any(c["args"] == ["add", "memory", "Uses vim"] for c in _calls(daemon)), "the add"
    )
    before = len(_calls(daemon))
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import sys\n"
        "path = sys.argv[1]\n"
        "text = open(path).read().replace('Uses vim', 'Uses emacs')\n"
        "open(path, 'w').write(text)\n"
    )
    env = {**os.environ, "EDITOR": f"{sys.executable} {editor}"}
    done = run_hermesctl([*ctl, "edit"], env=env)
    assert done.returncode == 0, done.stderr
    writes = _wait_for(
        lambda: (
            len(w := [c for c in _calls(daemon)[before:] if c["method"] == "on_memory_write"]) == 2
            and w
        ),
        "the edit's two writes",
    )
    assert [w["args"] for w in writes] == [
        ["remove", "memory", ""],
        ["add", "memory", "Uses emacs"],
    ]
    assert writes[0]["kwargs"]["metadata"]["old_text"] == "Uses vim"
    assert writes[1]["kwargs"]["metadata"]["write_origin"] == "user"
    assert run_hermesctl([*ctl, "remove", "emacs"]).returncode == 0


def test_a_delivery_never_answered_is_given_up_after_three_attempts(
    model: ScriptedModelServer,
) -> None:
    home = _home_with_recorder("recorder")
    (home / "recorder-mode.json").write_text(json.dumps({"hang": ["sync_turn"]}))
    config = model_config(model.url) + "memory:\n  provider: recorder\n"

    def attempts() -> list[int]:
        with sqlite3.connect(home / "state.db") as conn:
            return [r[0] for r in conn.execute("SELECT attempts FROM memory_deliveries")]

    def syncs(daemon: DaemonProcess) -> int:
        return _methods(_calls(daemon)).count("sync_turn")

    daemon = start_daemon(home, config=config)
    with daemon.client() as c:
        sid = c.call("session.create")["id"]
        model.push(reply("Stuck."))
        _send(c, sid, "remember this forever")
    for expected in (1, 2, 3):  # each start makes it again, and the provider hangs again
        _wait_for(lambda d=daemon, n=expected: syncs(d) == n, f"attempt {expected}")
        assert attempts() == [expected]
        daemon.proc.kill()
        daemon.proc.wait()
        daemon.stop()
        daemon = start_daemon(home, config=config)
    try:
        _wait_for(lambda: attempts() == [], "the journal to give it up")
        assert syncs(daemon) == 3  # not made a fourth time
        assert (
            f"Memory provider 'recorder': sync_turn delivery 1 for session {sid} was not "
            "answered in 3 attempts; given up" in daemon.log()
        )
    finally:
        daemon.stop()
