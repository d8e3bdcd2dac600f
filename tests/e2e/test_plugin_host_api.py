"""What the host gives plugins beyond registration, on a real hermesd: ``ctx.llm`` and
``call_llm`` (completions against the daemon's model, through its middleware),
``ctx.inject_message`` into an idle session (it starts a turn), and who is talking
(``sender_id``, ``user_id``, ``user_name`` from the connection's peer credentials).
"""

from __future__ import annotations

import json
import os
import pwd
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.approvals import tool
from tests.support.daemon import (
    DaemonProcess,
    follow_turn,
    send_and_follow,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import ScriptedModelServer, model_config, reply
from tests.support.plugin_factory import write_plugin

PLUGIN = """
import json, os
from pathlib import Path

LOG = Path(os.environ["HERMES_HOME"]) / "host-api.jsonl"

def note(**entry):
    with LOG.open("a") as f:
        f.write(json.dumps(entry) + "\\n")

def register(ctx):
    def ask(args):
        result = ctx.llm.complete([{"role": "user", "content": args["q"]}], max_tokens=50,
                                  purpose="test")
        return json.dumps({"text": result.text, "model": result.model,
                           "input_tokens": result.usage.input_tokens,
                           "plugin": result.audit["plugin_id"]})

    def ask_other_model(args):
        try:
            ctx.llm.complete([{"role": "user", "content": "x"}], model="other-model")
        except PermissionError as exc:
            return json.dumps({"refused": str(exc)})
        return json.dumps({"refused": None})

    def aux(args):
        from agent.auxiliary_client import call_llm
        response = call_llm(messages=[{"role": "user", "content": args["q"]}])
        return json.dumps({"text": response.choices[0].message.content,
                           "model": response.model})

    schema = {"description": "Ask the model", "parameters": {"type": "object",
              "properties": {"q": {"type": "string"}}}}
    ctx.register_tool("host_ask", "hostapi", schema, ask)
    ctx.register_tool("host_ask_other", "hostapi", schema, ask_other_model)
    ctx.register_tool("host_aux", "hostapi", schema, aux)
    ctx.register_command("nudge", lambda raw: "queued" if ctx.inject_message(raw or "nudged")
                         else "refused", description="inject a message")
    ctx.register_hook("pre_llm_call",
        lambda session_id, sender_id, user_id, user_name, platform: note(
            kind="pre_llm_call", session=session_id, sender_id=sender_id, user_id=user_id,
            user_name=user_name, platform=platform))
    ctx.register_hook("on_session_start",
        lambda session_id, sender_id, user_name: note(
            kind="on_session_start", session=session_id, sender_id=sender_id,
            user_name=user_name))

    def seen(*, request, **context):
        note(kind="llm_request", last=request["messages"][-1]["content"])
        return None
    ctx.register_middleware("llm_request", seen)
"""


@pytest.fixture(scope="module")
def hostd(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = short_tmpdir("ha-")
    write_plugin(home / "plugins", "hostapi", PLUGIN)
    daemon = start_daemon(home, config=model_config(model.url, timeout=5, max_retries=0))
    yield daemon
    daemon.stop()


def notes(daemon: DaemonProcess, kind: str) -> list[dict[str, Any]]:
    path = daemon.home / "host-api.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind]


def test_ctx_llm_completes_against_the_daemons_model_through_middleware(
    hostd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("the host answered"))
    with hostd.client() as c:
        result = tool(c, "host_ask", {"q": "plugin question"})
    assert result["text"] == "the host answered"
    assert result["model"] == "scripted-model"
    assert result["plugin"] == "hostapi"
    assert model.last_request["messages"] == [{"role": "user", "content": "plugin question"}]
    assert model.last_request["max_tokens"] == 50
    assert notes(hostd, "llm_request")[-1]["last"] == "plugin question"


def test_ctx_llm_refuses_another_model_unless_the_owner_allows_it(hostd: DaemonProcess) -> None:
    with hostd.client() as c:
        result = tool(c, "host_ask_other", {})
    assert "plugins.entries.hostapi.llm.allow_model_override" in result["refused"]


def test_call_llm_returns_a_chat_completion_from_the_daemons_model(
    hostd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("auxiliary answer"))
    with hostd.client() as c:
        result = tool(c, "host_aux", {"q": "aux question"})
    assert result == {"text": "auxiliary answer", "model": "scripted-model"}


def test_hooks_learn_who_is_talking_from_the_peer_credentials(
    hostd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("hello you"))
    with hostd.client() as c:
        sid = c.call("session.create")["id"]
        send_and_follow(c, sid, "who am I?")
    me = pwd.getpwuid(os.getuid()).pw_name
    pre = [n for n in notes(hostd, "pre_llm_call") if n["session"] == sid]
    assert pre == [
        {
            "kind": "pre_llm_call",
            "session": sid,
            "sender_id": str(os.getuid()),
            "user_id": str(os.getuid()),
            "user_name": me,
            "platform": "cli",
        }
    ]
    start = [n for n in notes(hostd, "on_session_start") if n["session"] == sid]
    assert start[0]["sender_id"] == str(os.getuid()) and start[0]["user_name"] == me


def test_inject_message_into_an_idle_session_starts_a_turn(
    hostd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("answer to the injected message"))
    with hostd.client() as c:
        sid = c.call("session.create")["id"]
        out = c.call("command.run", {"line": "/nudge review my notes", "session_id": sid})
        assert out["output"] == "queued"
        deadline = time.monotonic() + 20
        history: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            history = c.call("session.history", {"session_id": sid})["messages"]
            if len(history) >= 2:
                break
            time.sleep(0.05)
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "review my notes"),
        ("assistant", "answer to the injected message"),
    ]
    assert model.last_request["messages"][-1] == {"role": "user", "content": "review my notes"}


def test_a_client_may_declare_its_platform_for_plugins(
    hostd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("hi bridge"))
    with hostd.client() as c:
        sid = c.call("session.create")["id"]
        turn_id = c.call(
            "session.send", {"session_id": sid, "message": "from a bridge", "platform": "matrix"}
        )["turn_id"]
        follow_turn(c, turn_id)
    pre = [n for n in notes(hostd, "pre_llm_call") if n["session"] == sid]
    assert pre[0]["platform"] == "matrix"


def test_a_bad_platform_is_refused_and_the_daemon_keeps_serving(hostd: DaemonProcess) -> None:
    with hostd.client() as c:
        sid = c.call("session.create")["id"]
        with pytest.raises(RpcError) as raised:
            c.call("session.send", {"session_id": sid, "message": "x", "platform": "a b\n"})
        assert raised.value.code == Codes.INVALID_PARAMS
        assert "platform must be" in raised.value.message
        assert c.call("ping") is not None
