"""The plugin API after 0.19 on a real hermesd (issue 32, docs/hermes-compat.md §4 and §5).

Two plugins share one daemon: ``newer`` uses every post-0.19 ``ctx`` member hermesd builds
(a system-prompt section, redaction patterns, a subscription, a background task, its config and
state, capabilities, the ``call_mcp`` envelope, an approval transport, ``platform_actions``,
``subagent_lifecycle``) and observes the newer hooks hermesd fires, writing what it saw under
``$HERMES_HOME/marks``; ``pinger`` emits the event ``newer`` subscribed to.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.support.approvals import terminal
from tests.support.daemon import (
    DaemonProcess,
    follow_turn,
    send_and_follow,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import ScriptedModelServer, call_tools, model_config, reply
from tests.support.modelserver import tool_call as model_tool_call
from tests.support.plugin_factory import write_plugin

NEWER = """
import asyncio
import json
from pathlib import Path

ctx_ref = []
OBSERVED = ("on_stream_start", "on_stream_delta", "on_stream_end", "on_interim_message",
            "pre_command", "on_human_input_request", "on_human_input_resolved",
            "agent_loop_stopped", "on_skill_lifecycle")


def mark(name, data):
    folder = Path(ctx_ref[0].hermes_home) / "marks"
    folder.mkdir(exist_ok=True)
    with open(folder / name, "a") as f:
        f.write(json.dumps(data, default=str) + "\\n")


def on_ping(**payload):
    ctx_ref[0].state.set("last_ping", payload)
    mark("ping", payload)


async def forever():
    mark("task", {"started": True})
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        mark("task", {"cancelled": True})
        raise


def leak(args, **kwargs):
    return json.dumps({"token": "ACME-123456", "other": "plain"})


def probe(raw):
    ctx = ctx_ref[0]
    if raw == "spawn":
        ctx.spawn_task(forever(), name="newer:forever")
        return "spawned"
    if raw == "setcfg":
        ctx.set_config("retry.depth", 7)
        return json.dumps(ctx.get_config("retry"))
    if raw == "badcfg":
        try:
            ctx.set_config("model.default", "x")
        except ValueError as exc:
            return "refused: " + str(exc)
    if raw == "state":
        return json.dumps(ctx.state.get("last_ping"))
    if raw == "caps":
        return json.dumps([ctx.has_capability("tools.override"),
                           ctx.has_capability("gateway.injection")])
    if raw == "mcp":
        return json.dumps(ctx.call_mcp("nosuch", "tool", arguments={"a": 1}))
    if raw == "platform":
        import asyncio
        acted = asyncio.run(ctx.platform_actions.add_reaction("telegram", "1", "m1", "+1"))
        return json.dumps([acted, ctx.subagent_lifecycle.list()])
    return "?"


def present(request):
    mark("presented", dict(request))
    return "once"


def observer(name):
    def observe(**kwargs):
        mark(name, {k: v for k, v in kwargs.items() if isinstance(v, (str, int, bool))
                    or v is None})
    return observe


def register(ctx):
    ctx_ref.append(ctx)
    ctx.register_system_prompt_section(
        "newer.rules", lambda info: "Answer briefly on " + str(info["platform"]) + "."
    )
    mark("patterns", ctx.register_redaction_patterns([r"ACME-[0-9]{6}", ".*"]))
    ctx.subscribe("pinger:ping", on_ping)
    schema = {"name": "leak_token", "description": "Returns a token.",
              "parameters": {"type": "object", "properties": {}}}
    ctx.register_tool("leak_token", "newer", schema, leak)
    ctx.register_command("probe", probe, description="newer API probes")
    ctx.register_approval_transport("pager", present)
    for name in OBSERVED:
        ctx.register_hook(name, observer(name))
"""

PINGER = """
def register(ctx):
    def ping(raw):
        return str(ctx.emit("ping", {"n": int(raw or 1)}))
    ctx.register_command("ping", ping, description="emit pinger:ping")
"""


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def newd(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = short_tmpdir("pn-")
    write_plugin(home / "plugins", "newer", NEWER)
    write_plugin(home / "plugins", "pinger", PINGER)
    config = model_config(model.url, timeout=30, max_retries=0) + (
        "terminal:\n  cwd: /tmp\n"
        "security:\n  approval:\n    transport: pager\n"
        "plugins:\n  entries:\n    newer:\n      granted_capabilities: [tools.override]\n"
        "      settings:\n        keep: me  # a comment set_config keeps\n"
    )
    daemon = start_daemon(home, config=config)
    yield daemon
    daemon.stop()


def run(daemon: DaemonProcess, line: str) -> str:
    with daemon.client() as c:
        out: str = c.call("command.run", {"line": line}, timeout=30)["output"]
    return out


def marks(daemon: DaemonProcess, name: str, want: int = 1, having: Any = None) -> list[Any]:
    """The entries plugin ``newer`` wrote to ``marks/<name>``, once there are ``want`` (and
    ``having`` is one of them)."""
    path = daemon.home / "marks" / name
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        entries = [json.loads(line) for line in lines]
        if len(entries) >= want and (having is None or having in entries):
            return entries
        time.sleep(0.05)
    raise AssertionError(f"marks/{name} has fewer than {want} entries or lacks {having}")


def test_a_system_prompt_section_goes_into_the_turns_system_prompt(
    newd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("short"))
    with newd.client() as c:
        sid = c.call("session.create")["id"]
        send_and_follow(c, sid, "hello")
    system = model.last_request["messages"][0]
    assert system["role"] == "system"
    assert "## Plugin Context: newer.rules\n\nAnswer briefly on " in system["content"]


def test_the_stream_hooks_see_the_response_in_order_and_its_end(
    newd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("streamed words here"))
    with newd.client() as c:
        sid = c.call("session.create")["id"]
        send_and_follow(c, sid, "stream please")
    ends = marks(newd, "on_stream_end")
    turn_id = ends[-1]["turn_id"]
    deltas = [d for d in marks(newd, "on_stream_delta") if d["turn_id"] == turn_id]
    assert "".join(d["delta"] for d in deltas) == "streamed words here"
    assert all(d["kind"] == "text" and d["session_id"] == sid for d in deltas)
    assert any(s["turn_id"] == turn_id for s in marks(newd, "on_stream_start"))


def test_interim_text_before_tool_calls_reaches_on_interim_message(
    newd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(call_tools(model_tool_call("leak_token", {}), content="Let me look."), reply("done"))
    with newd.client() as c:
        sid = c.call("session.create")["id"]
        send_and_follow(c, sid, "look")
    interim = marks(newd, "on_interim_message")
    assert interim[-1]["text"] == "Let me look." and interim[-1]["session_id"] == sid


def test_a_plugins_redaction_pattern_hides_what_a_tool_returns(
    newd: DaemonProcess, model: ScriptedModelServer
) -> None:
    assert marks(newd, "patterns") == [1]  # '.*' has no literal start: refused
    model.push(call_tools(model_tool_call("leak_token", {})), reply("ok"))
    with newd.client() as c:
        sid = c.call("session.create")["id"]
        events = send_and_follow(c, sid, "leak")
    finished = [e for e in events if e["type"] == "tool.finished"]
    assert "ACME-123456" not in finished[0]["preview"]
    assert "[REDACTED]" in finished[0]["preview"] and "plain" in finished[0]["preview"]
    sent_back = model.last_request["messages"][-1]["content"]
    assert "ACME-123456" not in sent_back


def test_an_event_one_plugin_emits_reaches_the_other_and_its_state_persists(
    newd: DaemonProcess,
) -> None:
    assert run(newd, "/ping 4") == "1"
    marks(newd, "ping", having={"n": 4})
    assert json.loads(run(newd, "/probe state")) == {"n": 4}
    state = json.loads((newd.home / "plugin-data" / "newer" / "state.json").read_text())
    assert state == {"last_ping": {"n": 4}}


def test_set_config_writes_the_plugins_settings_and_keeps_the_rest(
    newd: DaemonProcess,
) -> None:
    assert json.loads(run(newd, "/probe setcfg")) == {"depth": 7}
    text = (newd.home / "config.yaml").read_text()
    assert "# a comment set_config keeps" in text
    settings = yaml.safe_load(text)["plugins"]["entries"]["newer"]["settings"]
    assert settings == {"keep": "me", "retry": {"depth": 7}}
    assert run(newd, "/probe badcfg").startswith("refused: 'model.default' is not a plugin")


def test_capabilities_the_owner_granted_and_the_mcp_envelope(newd: DaemonProcess) -> None:
    assert json.loads(run(newd, "/probe caps")) == [True, False]
    envelope = json.loads(run(newd, "/probe mcp"))
    assert envelope["ok"] is False and "nosuch" in json.dumps(envelope["error"])


def test_platform_actions_need_the_capability_and_plugins_info_lists_them(
    newd: DaemonProcess,
) -> None:
    action, subagents = json.loads(run(newd, "/probe platform"))
    assert action["ok"] is False and action["error"] == "capability_not_granted"
    assert subagents == []
    with newd.client() as c:
        info = c.call("plugins.info", {"name": "newer"})
    listed = {p["kind"]: p["status"] for p in info["providers"]}
    assert listed["platform_actions"].startswith("in use: its verbs act through the gateway")


def test_pre_command_sees_the_command_and_its_arguments(newd: DaemonProcess) -> None:
    run(newd, "/probe caps")
    seen = [m for m in marks(newd, "pre_command") if m["args_raw"] == "caps"]
    assert seen[-1]["command"] == "probe" and seen[-1]["surface"] == "cli"


def test_an_approval_transport_decides_an_approval_and_human_input_hooks_fire(
    newd: DaemonProcess,
) -> None:
    target = short_tmpdir("pn-rm-") / "doomed"
    (target / "sub").mkdir(parents=True)
    with newd.client() as c:  # a client that never answers approval.request
        result = terminal(c, f"rm -r {target}")
    assert result["exit_code"] == 0 and not target.exists()
    presented = marks(newd, "presented")[-1]
    assert presented["command"] == f"rm -r {target}"
    asked = marks(newd, "on_human_input_request")[-1]
    resolved = marks(newd, "on_human_input_resolved")[-1]
    assert asked["kind"] == "approval" and asked["request_id"] == presented["id"]
    assert resolved["request_id"] == presented["id"] and resolved["outcome"] == "once"


def test_cancelling_a_running_turn_fires_agent_loop_stopped(
    newd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("word " * 200, chunk_delay=0.02, chunk_chars=5))
    with newd.client() as c:
        sid = c.call("session.create")["id"]
        started = c.call("session.send", {"session_id": sid, "message": "talk"})
        while (note := c.next_notification(timeout=10)) is not None:
            if note.params and note.params[0].get("type") == "text.delta":
                break
        c.call("session.cancel", {"session_id": sid})
        follow_turn(c, started["turn_id"])
    stopped = [m for m in marks(newd, "agent_loop_stopped") if m["session_key"] == sid]
    assert stopped[-1]["reason"] == "cancel"


def test_reload_cancels_the_plugins_task_and_its_state_survives(newd: DaemonProcess) -> None:
    assert run(newd, "/ping 5") == "1"
    marks(newd, "ping", having={"n": 5})
    assert run(newd, "/probe spawn") == "spawned"
    assert marks(newd, "task")[0] == {"started": True}
    with newd.client() as c:
        c.call("plugins.reload", timeout=60)
    marks(newd, "task", having={"cancelled": True})
    assert json.loads(run(newd, "/probe state")) == {"n": 5}


def test_a_clarify_question_fires_the_human_input_hooks_without_the_answer(
    newd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(call_tools(model_tool_call("clarify", {"question": "Which colour?"})), reply("ok"))
    with newd.client() as c:
        sid = c.call("session.create")["id"]
        turn = c.call("session.send", {"session_id": sid, "message": "paint"})["turn_id"]
        deadline = time.monotonic() + 15
        while not (pending := c.call("clarify.pending", {"session_id": sid})["pending"]):
            assert time.monotonic() < deadline, "no question became pending"
            time.sleep(0.02)
        c.call(
            "clarify.respond", {"session_id": sid, "id": pending[0]["id"], "response": "teal-77"}
        )
        assert follow_turn(c, turn)[-1]["status"] == "completed"
    asked = [m for m in marks(newd, "on_human_input_request") if m["kind"] == "clarify"][-1]
    resolved = marks(newd, "on_human_input_resolved", having={**asked, "outcome": "submitted"})
    assert asked["request_id"] == pending[0]["id"] and asked["session_id"] == sid
    assert asked["prompt"] == "Which colour?" and resolved
    assert "teal-77" not in (newd.home / "marks" / "on_human_input_resolved").read_text()


SKILL = "---\nname: deploy-notes\ndescription: How to deploy.\n---\n1. Run make.\n"


def test_skill_view_and_skill_manage_fire_on_skill_lifecycle_and_keep_the_usage_record(
    newd: DaemonProcess, model: ScriptedModelServer
) -> None:
    create = {"action": "create", "name": "deploy-notes", "content": SKILL}
    patch = {
        "action": "patch",
        "name": "deploy-notes",
        "old_string": "Run make.",
        "new_string": "Run make deploy.",
    }
    view = {"name": "deploy-notes"}
    model.push(
        call_tools(model_tool_call("skill_manage", create)),
        call_tools(model_tool_call("skill_view", view)),
        call_tools(model_tool_call("skill_view", view)),
        call_tools(model_tool_call("skill_manage", patch)),
        call_tools(model_tool_call("skill_view", view)),
        reply("learned"),
    )
    with newd.client() as c:
        sid = c.call("session.create")["id"]
        send_and_follow(c, sid, "write down how to deploy")
    seen = [
        (m["action"], m["provenance"], m["use_count"], m["reused"], m["reuse_after_patch"])
        for m in marks(newd, "on_skill_lifecycle", want=5)
        if m["skill_name"] == "deploy-notes" and m["session_id"] == sid
    ]
    assert seen == [
        ("created", "agent_created", None, None, None),
        ("loaded", "agent_created", 1, False, False),
        ("loaded", "agent_created", 2, True, False),
        ("patched", "agent_created", None, None, None),
        ("loaded", "agent_created", 3, True, True),
    ]
    record = json.loads((newd.home / "skills" / ".usage.json").read_text())["deploy-notes"]
    assert record["created_by"] == "agent"
    assert (record["use_count"], record["view_count"], record["patch_count"]) == (3, 3, 1)
    assert record["patch_generation"] == record["last_reused_patch_generation"] == 1
