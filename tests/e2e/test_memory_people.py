"""People and the built-in memory: staged writes answered from another client, hermesctl memory,
announcements, who may read or change memory, the switches.

Real hermesd processes with the scripted model; another uid talks through
``tests.support.otheruser``.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from hermesd.rpc.protocol import Codes
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir, start_daemon
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)
from tests.support.otheruser import talk_as

STAGED = (
    "Staged for approval (memory.write_approval is on). "
    "Not yet saved — review with /memory pending."
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")


@pytest.fixture
def gated(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    daemon = start_daemon(
        short_tmpdir("memg-"), config=model_config(model.url) + "memory:\n  write_approval: true\n"
    )
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def plain(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    daemon = start_daemon(short_tmpdir("memp-"), config=model_config(model.url))
    yield daemon
    daemon.stop()


def _ctl(daemon: DaemonProcess, *args: str, env: dict[str, str] | None = None) -> Any:
    return run_hermesctl(["--socket", str(daemon.socket), *args], env=env)


def _memory_file(daemon: DaemonProcess, name: str = "MEMORY.md") -> str | None:
    path = daemon.home / "memories" / name
    return path.read_text() if path.exists() else None


def _model_adds(
    model: ScriptedModelServer, client: Client, content: str, target: str = "memory"
) -> tuple[str, dict[str, Any]]:
    """A turn whose model adds ``content``; the session and the tool's result."""
    sid = client.call("session.create")["id"]
    args = {"target": target, "action": "add", "content": content}
    model.push(call_tools(tool_call("memory", args)), reply("noted"))
    seen = len(model.requests)
    done = client.call("session.send", {"session_id": sid, "message": "hi", "wait": True})
    assert done["status"] == "completed", done
    [result] = [m["content"] for m in model.requests[seen:][-1]["messages"] if m["role"] == "tool"]
    return sid, json.loads(result)


def _memory_events(client: Client, count: int, timeout: float = 10) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(events) < count and time.monotonic() < deadline:
        note = client.next_notification(timeout=0.2)
        if note is not None and note.method == "memory.event":
            events.append(note.params[0])
    return events


# --- memory.write_approval --------------------------------------------------------------------


def test_a_staged_write_is_answered_from_a_second_client(
    gated: DaemonProcess, model: ScriptedModelServer
) -> None:
    first = gated.client()
    _, result = _model_adds(model, first, "User likes tea")
    assert set(result) == {"success", "staged", "pending_id", "message"}
    assert result["success"] is True and result["staged"] is True
    assert result["message"] == STAGED
    assert _memory_file(gated) is None
    staged = gated.home / "pending" / "memory" / f"{result['pending_id']}.json"
    assert staged.stat().st_mode & 0o777 == 0o600
    second = gated.client()
    listing = second.call("command.run", {"line": "/memory pending"})["output"]
    pending_id = result["pending_id"]
    assert listing == (
        "Pending memory writes (1):\n"
        f"  {pending_id}  add to memory: User likes tea\n\n"
        "Apply: /memory approve <id>   Reject: /memory reject <id>"
    )
    answer = second.call("command.run", {"line": f"/memory approve {pending_id}"})["output"]
    assert answer == "Approved 1 memory write(s)."
    assert _memory_file(gated) == "User likes tea"
    assert second.call("memory.pending")["pending"] == []


def test_a_rejected_write_never_reaches_the_file(
    gated: DaemonProcess, model: ScriptedModelServer
) -> None:
    c = gated.client()
    _, result = _model_adds(model, c, "User hates tea")
    other = gated.client()
    line = f"/memory reject {result['pending_id']}"
    assert other.call("command.run", {"line": line})["output"] == (
        f"Rejected pending memory write '{result['pending_id']}'."
    )
    assert _memory_file(gated) is None
    again = other.call("command.run", {"line": line})["output"]
    assert again == f"No pending memory write with id '{result['pending_id']}'."


def test_staged_writes_survive_a_restart(model: ScriptedModelServer) -> None:
    home = short_tmpdir("memgr-")
    config = model_config(model.url) + "memory:\n  write_approval: true\n"
    daemon = start_daemon(home, config=config)
    try:
        _, result = _model_adds(model, daemon.client(), "Kept across restarts")
    finally:
        daemon.stop()
    daemon = start_daemon(home, config=config)
    try:
        shown = _ctl(daemon, "memory", "pending")
        assert result["pending_id"] in shown.stdout and "Kept across restarts" in shown.stdout
        approved = _ctl(daemon, "memory", "approve", result["pending_id"])
        assert approved.returncode == 0, approved.stderr
        assert _memory_file(daemon) == "Kept across restarts"
    finally:
        daemon.stop()


def test_hermesctl_rejects_a_staged_write(gated: DaemonProcess, model: ScriptedModelServer) -> None:
    _, result = _model_adds(model, gated.client(), "Not wanted")
    rejected = _ctl(gated, "memory", "reject", result["pending_id"])
    assert rejected.returncode == 0 and f"rejected {result['pending_id']}" in rejected.stdout
    missing = _ctl(gated, "memory", "approve", result["pending_id"])
    assert missing.returncode == 1
    assert f"No pending memory write with id '{result['pending_id']}'." in missing.stderr
    assert _memory_file(gated) is None


def test_an_approval_that_no_longer_applies_stays_pending(
    gated: DaemonProcess, model: ScriptedModelServer
) -> None:
    c = gated.client()
    sid = c.call("session.create")["id"]
    args = {"target": "memory", "action": "remove", "old_text": "ghost"}
    model.push(call_tools(tool_call("memory", args)), reply("ok"))
    c.call("session.send", {"session_id": sid, "message": "hi", "wait": True})
    [record] = c.call("memory.pending")["pending"]
    result = c.call("memory.approve", {"id": record["id"]})
    assert result["applied"] is False and result["error"].startswith("No entry matched 'ghost'.")
    assert [p["id"] for p in c.call("memory.pending")["pending"]] == [record["id"]]


def test_attached_clients_hear_of_staging_and_approval(
    gated: DaemonProcess, model: ScriptedModelServer
) -> None:
    watcher = gated.client()
    sid = watcher.call("session.create")["id"]  # attached to a session: hears memory events
    _, result = _model_adds(model, gated.client(), "Announced")
    gated.client().call("memory.approve", {"id": result["pending_id"]})
    staged, written = _memory_events(watcher, 2)
    assert staged["type"] == "memory.staged" and staged["pending_id"] == result["pending_id"]
    assert staged["summary"] == "add to memory: Announced"
    assert written["type"] == "memory.written" and written["origin"] == "approval"
    assert written["usage"] == "0% — 9/2,200 chars" and written["entry_count"] == 1
    assert sid


# --- hermesctl memory and announcements -------------------------------------------------------


def test_hermesctl_memory_add_show_remove(plain: DaemonProcess) -> None:
    added = _ctl(plain, "memory", "add", "--user", "Name:", "Grace")
    assert added.returncode == 0, added.stderr
    assert "Entry added. (0% — 11/1,375 chars)" in added.stdout
    shown = _ctl(plain, "memory", "show", "--user")
    assert "USER.md (11/1,375 chars)" in shown.stdout and "  - Name: Grace" in shown.stdout
    removed = _ctl(plain, "memory", "remove", "--user", "Grace")
    assert removed.returncode == 0 and "Entry removed." in removed.stdout
    assert _memory_file(plain, "USER.md") == ""


def test_hermesctl_memory_remove_of_nothing_fails_with_the_reason(plain: DaemonProcess) -> None:
    out = _ctl(plain, "memory", "remove", "no-such-entry")
    assert out.returncode == 1
    assert "No entry matched 'no-such-entry'." in out.stderr


def test_hermesctl_memory_edit_saves_what_the_editor_wrote(
    plain: DaemonProcess, tmp_path: Path
) -> None:
    _ctl(plain, "memory", "add", "First fact")
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import sys\n"
        "path = sys.argv[1]\n"
        "text = open(path).read().replace('First fact', 'First fact, edited')\n"
        "open(path, 'w').write(text + '§\\nSecond\\n')\n"
    )
    out = _ctl(plain, "memory", "edit", env={"EDITOR": f"{sys.executable} {editor}"})
    assert out.returncode == 0, out.stderr
    assert _memory_file(plain) == "First fact, edited\n§\nSecond"


def test_an_edit_of_a_file_that_changed_meanwhile_is_refused(plain: DaemonProcess) -> None:
    c = plain.client()
    c.call("memory.write", {"target": "memory", "action": "add", "content": "Before"})
    [shown] = c.call("memory.show", {"target": "memory"})["targets"]
    c.call("memory.write", {"target": "memory", "action": "add", "content": "Meanwhile"})
    result = c.call(
        "memory.set", {"target": "memory", "entries": ["Mine"], "base": shown["digest"]}
    )
    assert result["success"] is False and "changed while you were editing" in result["error"]
    assert "Meanwhile" in (_memory_file(plain) or "")


def test_every_write_is_announced_to_attached_clients(
    plain: DaemonProcess, model: ScriptedModelServer
) -> None:
    watcher = plain.client()
    watcher.call("session.create")
    _model_adds(model, plain.client(), "From the model")
    plain.client().call("memory.write", {"target": "user", "action": "add", "content": "By hand"})
    by_model, by_hand = _memory_events(watcher, 2)
    assert (by_model["type"], by_model["origin"], by_model["action"]) == (
        "memory.written",
        "tool",
        "add",
    )
    assert by_model["session_id"] and by_model["by_uid"] is None
    assert (by_hand["origin"], by_hand["target"], by_hand["by_uid"]) == (
        "client",
        "user",
        os.geteuid(),
    )


def test_a_bad_target_over_rpc_is_invalid_params(plain: DaemonProcess) -> None:
    c = plain.client()
    with pytest.raises(Exception) as caught:
        c.call("memory.show", {"target": "everything"})
    assert getattr(caught.value, "code", None) == Codes.INVALID_PARAMS
    result = c.call("memory.write", {"target": "nope", "action": "add", "content": "x"})
    assert result == {"error": "Invalid target 'nope'. Use 'memory' or 'user'.", "success": False}
    assert c.call("ping") is not None


# --- who may, and the switches ----------------------------------------------------------------


@needs_root
def test_a_group_member_may_neither_read_nor_change_memory(model: ScriptedModelServer) -> None:
    nobody = pwd.getpwnam("nobody")
    group = grp.getgrgid(nobody.pw_gid).gr_name
    daemon = start_daemon(
        short_tmpdir("memu-"), config=model_config(model.url) + f"socket:\n  group: {group}\n"
    )
    try:
        os.chmod(daemon.socket.parent, 0o755)
        out = talk_as(
            nobody.pw_uid,
            nobody.pw_gid,
            daemon.socket,
            [
                [0, 1, "memory.show", []],
                [0, 2, "memory.write", [{"target": "memory", "action": "add", "content": "x"}]],
                [0, 3, "memory.approve", [{"id": "abc"}]],
                [0, 4, "command.run", [{"line": "/memory pending"}]],
            ],
        )
        replies = {m[1]: m for m in out["received"] if m[0] == 1}
        assert [replies[i][2]["code"] for i in (1, 2, 3)] == [Codes.PERMISSION_DENIED] * 3
        assert replies[4][3]["output"].startswith("Only the daemon's owner")
        assert _memory_file(daemon) is None
    finally:
        daemon.stop()


def test_with_both_switches_off_the_tool_is_not_offered(model: ScriptedModelServer) -> None:
    config = model_config(model.url) + (
        "memory:\n  memory_enabled: false\n  user_profile_enabled: false\n"
    )
    daemon = start_daemon(short_tmpdir("memo-"), config=config)
    try:
        c = daemon.client()
        (daemon.home / "memories").mkdir()
        (daemon.home / "memories" / "MEMORY.md").write_text("Hidden fact")
        sid = c.call("session.create")["id"]
        model.push(reply("hi"))
        seen = len(model.requests)
        c.call("session.send", {"session_id": sid, "message": "hi", "wait": True})
        request = model.requests[seen:][-1]
        assert "memory" not in [t["function"]["name"] for t in request.get("tools") or []]
        assert "Hidden fact" not in request["messages"][0]["content"]
        result = c.call("tools.call", {"name": "memory", "args": {"target": "memory"}})
        assert json.loads(result["result"]) == {
            "error": "Memory is not available. It may be disabled in config or this environment.",
            "success": False,
        }
    finally:
        daemon.stop()


def test_a_disabled_user_profile_stays_out_of_the_prompt(model: ScriptedModelServer) -> None:
    config = model_config(model.url) + "memory:\n  user_profile_enabled: false\n"
    daemon = start_daemon(short_tmpdir("memd-"), config=config)
    try:
        (daemon.home / "memories").mkdir()
        (daemon.home / "memories" / "MEMORY.md").write_text("Shown note")
        (daemon.home / "memories" / "USER.md").write_text("Hidden profile")
        c = daemon.client()
        sid = c.call("session.create")["id"]
        model.push(reply("hi"))
        seen = len(model.requests)
        c.call("session.send", {"session_id": sid, "message": "hi", "wait": True})
        system = model.requests[seen:][-1]["messages"][0]["content"]
        assert "Shown note" in system and "Hidden profile" not in system
    finally:
        daemon.stop()


def test_hermesctl_chat_shows_a_staged_write_and_how_to_approve_it(
    gated: DaemonProcess, model: ScriptedModelServer
) -> None:
    args = {"target": "user", "action": "add", "content": "Likes chess"}
    model.push(call_tools(tool_call("memory", args)), reply("I will remember that."))
    out = run_hermesctl(
        ["--socket", str(gated.socket), "chat", "-m", "remember I like chess"],
        env={"HERMES_HOME": str(gated.home)},
    )
    assert out.returncode == 0, out.stderr
    [record] = gated.client().call("memory.pending")["pending"]
    shown = out.stdout + out.stderr
    assert "🧠 memory write waits for approval: add to user profile: Likes chess" in shown
    assert f"(/memory approve {record['id']})" in shown


def test_a_pending_id_that_is_not_an_id_is_not_found(gated: DaemonProcess) -> None:
    (gated.home / "config.json").write_text("{}")
    c = gated.client()
    for bad_id in ("../../config", "/etc/passwd", "a" * 200, "x.json", ""):
        for method in ("memory.approve", "memory.reject"):
            with pytest.raises(Exception) as caught:
                c.call(method, {"id": bad_id})
            assert getattr(caught.value, "code", None) == Codes.NOT_FOUND, bad_id
        assert c.call("command.run", {"line": f"/memory reject {bad_id}"})["ok"] is True
    assert (gated.home / "config.json").exists()
    assert c.call("ping") is not None


def test_a_write_staged_by_the_reference_is_approved_and_redacted(gated: DaemonProcess) -> None:
    secret = "sk-ant-" + "Q7w8E9r0" * 5
    record = {  # the record hermes-agent's tools/write_approval.py stage_write() keeps
        "id": "a1b2c3d4",
        "subsystem": "memory",
        "action": "add",
        "summary": "add to memory: API key is ...",
        "origin": "background_review",
        "created_at": time.time(),
        "payload": {"action": "add", "target": "memory", "content": f"API key is {secret}"},
    }
    staged = gated.home / "pending" / "memory"
    staged.mkdir(parents=True)
    (staged / "a1b2c3d4.json").write_text(json.dumps(record))
    out = _ctl(gated, "memory", "approve", "a1b2c3d4")
    assert out.returncode == 0, out.stderr
    assert _memory_file(gated) == "API key is [REDACTED]"
    assert not (staged / "a1b2c3d4.json").exists()
