"""Secrets never leave the daemon: tool results to the model, notifications and logs.

The planted secrets are a ``.env`` value, environment variables named like secrets and
key-shaped strings; the tool that leaks them is the real ``terminal`` running ``env`` (plus a
plugin that logs one), driven by the scripted model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from hermesd.redact import Redactor
from tests.support.approvals import terminal
from tests.support.daemon import short_tmpdir
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.plugin_factory import write_plugin

DOTENV_SECRET = "dotenv-planted-9f8e7d6c"
ENV_SECRETS = {"SERVICE_TOKEN": "tok-planted-55aa66bb", "DB_PASSWORD": "pw-planted-hunter2",
               "STRIPE_SECRET": "stripe-planted-0099", "PAYMENT_API_KEY": "key-planted-1234"}
ALL = [DOTENV_SECRET, *ENV_SECRETS.values()]

LEAKY_PLUGIN = """
    import json, logging, os

    log = logging.getLogger("leaky")

    def leak(args, **kw):
        log.warning("the token is %s", os.environ["SERVICE_TOKEN"])
        try:
            raise ValueError("password " + os.environ["DB_PASSWORD"])
        except ValueError:
            log.exception("and a traceback")
        return json.dumps({"token": os.environ["SERVICE_TOKEN"]})

    def register(ctx):
        ctx.register_tool("leak_secret", "leaky", {
            "name": "leak_secret", "description": "Return a secret.",
            "parameters": {"type": "object", "properties": {}}}, leak)
"""


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def leaky(start, model: ScriptedModelServer):
    home = short_tmpdir()
    (home / ".env").write_text(f"MY_PLANTED={DOTENV_SECRET}\n")
    write_plugin(home / "plugins", "leaky", LEAKY_PLUGIN)
    return start(home, env=ENV_SECRETS, config=(
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        "log_level: DEBUG\nterminal:\n  cwd: /tmp\n"))


def test_environment_printed_by_a_tool_is_redacted_everywhere(leaky, model) -> None:
    model.push(call_tools(tool_call("terminal", {"command": "env"}),
                          tool_call("leak_secret", {})),
               reply("done"))
    with leaky.client() as client:
        sid = client.call("session.create")["id"]
        result = client.call("session.send", {"session_id": sid, "message": "show env",
                                              "wait": True}, timeout=30)
        events = [n.params for n in client.notifications(timeout=0.3)]
        history = client.call("session.history", {"session_id": sid})["messages"]
    assert result["status"] == "completed"
    sent = json.dumps(model.requests)
    tool_results = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert "SERVICE_TOKEN=[REDACTED]" in tool_results[0]
    assert "MY_PLANTED=[REDACTED]" in tool_results[0]
    assert json.loads(tool_results[1]) == {"token": "[REDACTED]"}
    log = leaky.log()
    assert "the token is [REDACTED]" in log and "password [REDACTED]" in log
    previews = [e for batch in events for e in batch if e.get("type") == "tool.finished"]
    assert previews and all("planted" not in e["preview"] for e in previews)
    for secret in ALL:
        assert secret not in sent
        assert secret not in json.dumps(events)
        assert secret not in json.dumps(history)
        assert secret not in log


def test_key_formats_are_redacted_in_tool_results(start) -> None:
    daemon = start(config="terminal:\n  cwd: /tmp\n")
    keys = ["sk-proj-abcdefghijklmnop1234", "ghp_abcdefghijklmnopqrstuvwx12",
            "xoxb-1234567890-abcdefghij", "AKIAIOSFODNN7EXAMPLE"]
    with daemon.client() as client:
        out = terminal(client, "echo " + " ".join(keys))["output"]
    assert out == " ".join(["[REDACTED]"] * 4) + "\n"


def test_ordinary_output_is_left_alone(start) -> None:
    daemon = start(config="terminal:\n  cwd: /tmp\n")
    with daemon.client() as client:
        out = terminal(client, "echo 'hello world; DEBUG=1 task-list sky-blue'")["output"]
    assert out == "hello world; DEBUG=1 task-list sky-blue\n"


# --- the redactor itself ----------------------------------------------------------------------

def test_redactor_hides_values_of_secret_named_variables_only() -> None:
    r = Redactor.from_env({"GITHUB_TOKEN": "abcd1234", "HOME": "/home/me", "LANG": "C.UTF-8"},
                          {})
    assert r("token abcd1234 home /home/me") == "token [REDACTED] home /home/me"


def test_redactor_hides_every_dotenv_value_but_not_short_settings() -> None:
    r = Redactor.from_env({}, {"ANYTHING": "longer-value-1", "DEBUG": "1"})
    assert r("x longer-value-1 y DEBUG=1") == "x [REDACTED] y DEBUG=1"


def test_redactor_hides_secrets_inside_json_escaped_text() -> None:
    r = Redactor(['quo"te\\value'])
    assert r(json.dumps({"output": 'a quo"te\\value b'})) == '{"output": "a [REDACTED] b"}'


def test_redactor_keeps_the_name_of_secret_assignments() -> None:
    r = Redactor()
    assert r("export NEW_API_KEY=zzzzzzzz; PASSWORD: hunter22") == \
        "export NEW_API_KEY=[REDACTED]; PASSWORD: [REDACTED]"
    assert r("Authorization: Bearer abcdefghijklmnopqrstuvwx") == \
        "Authorization: Bearer [REDACTED]"
