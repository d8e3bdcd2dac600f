"""Who may answer approvals, hermesd's own files, plugins and the model asking for approval.

Real hermesd processes; plugins are real folders under ``$HERMES_HOME/plugins``; the model is
the scripted OpenAI-compatible server; another uid talks through ``tests.support.otheruser``.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermesd.rpc.protocol import Codes
from tests.support.approvals import Background, client_answering, terminal, tool, wait_pending
from tests.support.daemon import short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.otheruser import talk_as
from tests.support.plugin_factory import write_plugin

NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid)
CONFIG = "terminal:\n  cwd: /tmp\n"


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


def _model_config(server: ScriptedModelServer, extra: str = "") -> str:
    return f"model:\n  base_url: {server.url}\n  default: scripted-model\n{CONFIG}{extra}"


def _tool_results(server: ScriptedModelServer) -> list[str]:
    return [
        m["content"] for body in server.requests for m in body["messages"] if m["role"] == "tool"
    ]


# --- who may answer ---------------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")


@needs_root
def test_group_member_cannot_answer_or_revoke_approvals(start) -> None:
    daemon = start(config=f"socket:\n  group: {NOGROUP.gr_name}\n{CONFIG}")
    target = short_tmpdir("ap-")
    caller, _ = client_answering(daemon, None)
    with caller:
        running = Background(terminal, caller, f"rm -r {target}")
        approval = wait_pending(daemon)[0]["id"]
        os.chmod(daemon.socket.parent, 0o755)
        out = talk_as(
            NOBODY.pw_uid,
            NOBODY.pw_gid,
            daemon.socket,
            [
                [0, 1, "approvals.respond", [{"id": approval, "choice": "once"}]],
                [0, 2, "approvals.revoke", [{"pattern_key": "recursive_delete"}]],
                [0, 3, "approvals.pending", []],
            ],
        )
        replies = {m[1]: m for m in out["received"] if m[0] == 1}
        assert replies[1][2]["code"] == Codes.PERMISSION_DENIED
        assert replies[2][2]["code"] == Codes.PERMISSION_DENIED
        assert replies[3][3]["pending"] == []  # the owner's call: not the member's to see
        assert not running.done() and target.exists()
        with daemon.client() as owner:
            owner.call("approvals.respond", {"id": approval, "choice": "deny"})
        assert "denied by user" in running.result()["error"]
    assert target.exists()


@needs_root
def test_group_member_listed_in_approvers_may_answer(start) -> None:
    daemon = start(
        config=f"socket:\n  group: {NOGROUP.gr_name}\n{CONFIG}"
        f"approvals:\n  approvers: [{NOBODY.pw_name}]\n"
    )
    target = short_tmpdir("ap-")
    caller, _ = client_answering(daemon, None)
    with caller:
        running = Background(terminal, caller, f"rm -r {target}")
        approval = wait_pending(daemon)[0]["id"]
        os.chmod(daemon.socket.parent, 0o755)
        out = talk_as(
            NOBODY.pw_uid,
            NOBODY.pw_gid,
            daemon.socket,
            [[0, 1, "approvals.respond", [{"id": approval, "choice": "once"}]]],
        )
        assert out["received"][-1][3] == {"id": approval, "choice": "once"}
        assert running.result()["exit_code"] == 0
    assert not target.exists()


@needs_root
def test_non_owner_attached_to_a_session_is_not_asked(start) -> None:
    daemon = start(
        config=f"socket:\n  group: {NOGROUP.gr_name}\n{CONFIG}approvals:\n  timeout: 1\n"
    )
    caller, _ = client_answering(daemon, None)
    with caller:
        sid = caller.call("session.create", {"attach": False})["id"]
        running = Background(terminal, caller, f"rm -r {short_tmpdir('ap-')}", sid)
        wait_pending(daemon)
        os.chmod(daemon.socket.parent, 0o755)
        out = talk_as(
            NOBODY.pw_uid,
            NOBODY.pw_gid,
            daemon.socket,
            [[0, 1, "session.attach", [{"session_id": sid}]]],
            timeout=1.5,
        )
        assert not [m for m in out["received"] if m[0] == 0]  # no approval.request
        assert "timed out" in running.result()["error"]


# --- hermesd's own files ----------------------------------------------------------------------


def test_model_writing_the_config_is_refused(start, model: ScriptedModelServer) -> None:
    home = short_tmpdir()
    daemon = start(home, config=_model_config(model))
    before = (home / "config.yaml").read_text()
    model.push(
        call_tools(
            tool_call(
                "write_file",
                {"path": str(home / "config.yaml"), "content": "approvals:\n  mode: 'off'\n"},
            )
        ),
        reply("I could not change it."),
    )
    client, asked = client_answering(daemon, "always")
    with client:
        sid = client.call("session.create")["id"]
        result = client.call(
            "session.send", {"session_id": sid, "message": "loosen it", "wait": True}, timeout=30
        )
    assert result["status"] == "completed"
    assert (home / "config.yaml").read_text() == before
    assert "Access denied" in _tool_results(model)[0]
    assert asked.requests == []


@pytest.mark.parametrize("spelling", ["direct", "dotdot", "symlink", "symlinked_dir", "hardlink"])
def test_read_and_write_of_own_files_are_refused_however_spelled(start, spelling: str) -> None:
    home = short_tmpdir()
    (home / ".env").write_text("PLANTED_KEY=s3cr3t-value-123\n")
    daemon = start(home, config=CONFIG)
    scratch = short_tmpdir("ap-")
    (scratch / "sub").mkdir()
    paths = {
        "direct": str(home / ".env"),
        "dotdot": f"{scratch}/sub/../../{home.name}/.env",
        "symlink": str(scratch / "link"),
        "symlinked_dir": str(scratch / "dirlink" / ".env"),
        "hardlink": str(scratch / "hard"),
    }
    (scratch / "link").symlink_to(home / ".env")
    (scratch / "dirlink").symlink_to(home)
    os.link(home / ".env", scratch / "hard")
    with daemon.client() as client:
        read = tool(client, "read_file", {"path": paths[spelling]})
        write = tool(client, "write_file", {"path": paths[spelling], "content": "X=1\n"})
        state = tool(client, "read_file", {"path": str(home / "state.db")})
    assert "Access denied" in read["error"] and "Access denied" in write["error"]
    assert "Access denied" in state["error"]
    assert (home / ".env").read_text() == "PLANTED_KEY=s3cr3t-value-123\n"


def test_terminal_naming_own_files_is_refused(start) -> None:
    home = short_tmpdir()
    daemon = start(home, config=CONFIG)
    client, asked = client_answering(daemon, "once")
    with client:
        result = terminal(client, f"cat {home}/config.yaml")
        spelled = terminal(client, "echo ~/.hermes/.env")  # another home's spelling: asks
    assert "Access denied" in result["error"]
    assert spelled["output"].endswith("/.hermes/.env\n")
    # the table knows this daemon's home, so both ask; the literal one is refused after that
    assert [r["pattern_key"] for r in asked.requests] == ["hermes_state", "hermes_state"]


# --- plugins ----------------------------------------------------------------------------------

HOOKS_PLUGIN = """
    import json, os

    LOG = os.path.join(os.environ["HERMES_HOME"], "approval-hooks.jsonl")

    def _log(name):
        def record(**kw):
            with open(LOG, "a") as fh:
                fh.write(json.dumps({"hook": name, **kw}) + "\\n")
        return record

    def ask_for_search(tool_name, args, **kw):
        if tool_name == "search_files":
            return {"action": "approve", "message": "searching needs a nod",
                    "rule_key": "search:any"}
        return None

    def nested(args, **kw):
        return ctx_ref[0].dispatch_tool("terminal", {"command": args["command"]})

    async def nested_on_loop(args, **kw):  # a careless plugin: sync dispatch from the loop
        return ctx_ref[0].dispatch_tool("terminal", {"command": args["command"]})

    ctx_ref = []

    def register(ctx):
        ctx_ref.append(ctx)
        ctx.register_hook("pre_tool_call", ask_for_search)
        ctx.register_hook("pre_approval_request", _log("pre_approval_request"))
        ctx.register_hook("post_approval_response", _log("post_approval_response"))
        ctx.register_tool("run_nested", "nested", {
            "name": "run_nested", "description": "Run a command through dispatch_tool.",
            "parameters": {"type": "object", "required": ["command"], "properties": {
                "command": {"type": "string", "description": "shell command"}}}}, nested)
        ctx.register_tool("run_nested_on_loop", "nested", {
            "name": "run_nested_on_loop", "description": "dispatch_tool from the loop thread.",
            "parameters": {"type": "object", "required": ["command"], "properties": {
                "command": {"type": "string", "description": "shell command"}}}},
            nested_on_loop, is_async=True)
"""


@pytest.fixture
def plugged(start):
    home = short_tmpdir()
    write_plugin(home / "plugins", "gatekeeper", HOOKS_PLUGIN)
    return start(home, config=CONFIG)


def _hook_log(home: Path) -> list[dict]:
    path = home / "approval-hooks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_pre_tool_call_approve_sends_a_harmless_tool_to_a_person(plugged) -> None:
    client, asked = client_answering(plugged, "deny")
    with client:
        result = tool(client, "search_files", {"root": "/tmp", "pattern": "nothing*"})
    assert result["error"].startswith("BLOCKED: Command denied by user.")
    assert asked.requests[0]["description"] == "searching needs a nod"
    assert asked.requests[0]["pattern_key"] == "search:any"
    assert asked.requests[0]["tool"] == "search_files"


def test_approval_hooks_fire_with_the_reference_kwargs(plugged) -> None:
    client, _ = client_answering(plugged, "session")
    with client:
        sid = client.call("session.create")["id"]
        terminal(client, f"rm -r {short_tmpdir('ap-')}", sid)
    pre, post = _hook_log(plugged.home)
    assert pre == {
        "hook": "pre_approval_request",
        "command": pre["command"],
        "description": "recursive delete",
        "pattern_key": "recursive_delete",
        "pattern_keys": ["recursive_delete"],
        "session_key": sid,
        "surface": "cli",
    }
    assert post == {
        **pre,
        "hook": "post_approval_response",
        "choice": "session",
        "decided_by": "user",
    }


def test_dispatch_tool_from_a_plugin_goes_through_approvals(plugged) -> None:
    target = short_tmpdir("ap-")
    client, asked = client_answering(plugged, "deny")
    with client:
        result = tool(client, "run_nested", {"command": f"rm -r {target}"})
    assert "denied by user" in json.dumps(result)
    assert asked.requests[0]["command"] == f"rm -r {target}"
    assert target.exists()


# --- the model's turn -------------------------------------------------------------------------


def test_model_turn_waits_for_the_attached_client_and_relays_the_denial(
    start, model: ScriptedModelServer
) -> None:
    target = short_tmpdir("ap-")
    daemon = start(config=_model_config(model))
    model.push(
        call_tools(tool_call("terminal", {"command": f"rm -r {target}"})),
        reply("Understood, I left it alone."),
    )
    client, asked = client_answering(daemon, "deny", "not that folder")
    with client:
        sid = client.call("session.create")["id"]
        result = client.call(
            "session.send", {"session_id": sid, "message": "clean up", "wait": True}, timeout=30
        )
    assert result["final_text"] == "Understood, I left it alone."
    assert asked.requests[0]["session_id"] == sid
    sent = _tool_results(model)[0]
    assert "BLOCKED: Command denied by user." in sent and "not that folder" in sent
    assert target.exists()


def test_pending_approval_at_shutdown_is_denied_and_gone_after_restart(
    model: ScriptedModelServer,
) -> None:
    home = short_tmpdir()
    target = short_tmpdir("ap-")
    config = _model_config(model, "shutdown_timeout: 1\n")
    daemon = start_daemon(home, config=config)
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {target}"})), reply("stopped"))
    try:
        with daemon.client() as client:
            sid = client.call("session.create", {"attach": False})["id"]
            client.call("session.send", {"session_id": sid, "message": "clean up"})
            wait_pending(daemon)
    finally:
        assert daemon.stop() == 0
    assert "still pending at shutdown: denied" in daemon.log()
    daemon = start_daemon(home, config=config)
    try:
        with daemon.client() as client:
            assert client.call("approvals.pending")["pending"] == []
            history = client.call("session.history", {"session_id": sid})["messages"]
        results = [json.loads(m["content"]) for m in history if m["role"] == "tool"]
        # normally the broker's denial; the turn's cancellation marker if the stop won the race
        assert len(results) == 1 and (
            "BLOCKED: hermesd stopped" in results[0]["error"] or "cancelled" in results[0]["error"]
        )
    finally:
        daemon.stop()
    assert target.exists()


def test_dispatch_tool_on_a_private_loop_fails_closed(plugged) -> None:
    target = short_tmpdir("ap-")
    client, asked = client_answering(plugged, "once")
    with client:
        result = tool(client, "run_nested_on_loop", {"command": f"rm -r {target}"})
        assert "cannot be asked from a private event loop" in json.dumps(result)
        assert client.call("ping")["pong"]
    assert asked.requests == [] and target.exists()
