"""Secrets never leave the daemon: tool results to the model, notifications and logs.

The planted secrets are a ``.env`` value, environment variables named like secrets and
key-shaped strings; the tool that leaks them is the real ``terminal`` running ``env`` (plus a
plugin that logs one), driven by the scripted model.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest

from hermesd.redact import Redactor, is_key_shaped
from tests.support.approvals import terminal
from tests.support.daemon import short_tmpdir
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.plugin_factory import write_plugin

DOTENV_SECRET = "dotenv-planted-9f8e7d6c"
ENV_SECRETS = {
    "SERVICE_TOKEN": "tok-planted-55aa66bb",
    "DB_PASSWORD": "pw-planted-hunter2",
    "STRIPE_SECRET": "stripe-planted-0099",
    "PAYMENT_API_KEY": "key-planted-1234",
}
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

    class Unprintable:
        def __str__(self):
            raise RuntimeError("no str")

        __repr__ = __str__

    def leak_badly(args, **kw):
        token = os.environ["SERVICE_TOKEN"]
        log.warning("two slots %s %s, one value", token)  # msg % args raises
        log.warning({"token": token})  # not a str
        log.warning("%d apples", "token=" + token)  # an argument of the wrong type
        log.warning(Unprintable())  # str(msg) raises
        log.warning("mapping %(missing)s", {"token": token})
        return "logged"

    def register(ctx):
        ctx.register_tool("leak_secret", "leaky", {
            "name": "leak_secret", "description": "Return a secret.",
            "parameters": {"type": "object", "properties": {}}}, leak)
        ctx.register_tool("leak_badly", "leaky", {
            "name": "leak_badly", "description": "Log malformed records holding a secret.",
            "parameters": {"type": "object", "properties": {}}}, leak_badly)
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
    return start(
        home,
        env=ENV_SECRETS,
        config=(
            f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
            "log_level: DEBUG\nterminal:\n  cwd: /tmp\n"
        ),
    )


def test_environment_printed_by_a_tool_is_redacted_everywhere(leaky, model) -> None:
    model.push(
        call_tools(tool_call("terminal", {"command": "env"}), tool_call("leak_secret", {})),
        reply("done"),
    )
    with leaky.client() as client:
        sid = client.call("session.create")["id"]
        result = client.call(
            "session.send", {"session_id": sid, "message": "show env", "wait": True}, timeout=30
        )
        events = [n.params for n in client.notifications(timeout=0.3)]
        history = client.call("session.history", {"session_id": sid})["messages"]
    assert result["status"] == "completed"
    sent = json.dumps(model.requests)
    tool_results = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    # the sandbox's environment is an allow-list: the secrets are not there to redact
    assert "PATH=" in tool_results[0]
    assert "SERVICE_TOKEN" not in tool_results[0] and "MY_PLANTED" not in tool_results[0]
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


def test_log_records_that_do_not_format_are_redacted_not_passed_raw(leaky) -> None:
    token = ENV_SECRETS["SERVICE_TOKEN"]
    assert leaky.call("tools.call", {"name": "leak_badly", "args": {}})["result"] == "logged"
    tail = leaky.call("logs.tail", {"lines": 200})["records"]
    ring = "\n".join(r["message"] for r in tail if r["logger"] == "leaky")
    log = leaky.log()
    for text in (ring, log):
        assert token not in text
        assert "--- Logging error ---" not in text  # the handler never fell back to raw output
        assert "two slots %s %s, one value [log arguments that did not format: [REDACTED]]" in text
        assert "{'token': '[REDACTED]'}" in text
        assert "%d apples [log arguments that did not format: token=[REDACTED]]" in text
        assert "<unprintable Unprintable>" in text
        assert (
            "mapping %(missing)s [log arguments that did not format: {'token': '[REDACTED]'}]"
            in text
        )


def test_key_formats_are_redacted_in_tool_results(start) -> None:
    daemon = start(config="terminal:\n  cwd: /tmp\n")
    keys = [
        "sk-proj-abcdefghijklmnop1234",
        "ghp_abcdefghijklmnopqrstuvwx12",
        "xoxb-1234567890-abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
    ]
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
    r = Redactor.from_env({"GITHUB_TOKEN": "abcd1234", "HOME": "/home/me", "LANG": "C.UTF-8"}, {})
    assert r("token abcd1234 home /home/me") == "token [REDACTED] home /home/me"


def test_redactor_hides_key_shaped_dotenv_values_but_not_settings() -> None:
    r = Redactor.from_env({}, {"ANYTHING": "q8Xv2LmN0pRt7ZkW4yB", "WEATHER_UNITS": "metric"})
    assert r("x q8Xv2LmN0pRt7ZkW4yB y geometric") == "x [REDACTED] y geometric"


def test_redactor_hides_dotenv_values_plugins_mark_secret_or_whose_name_says_so() -> None:
    dotenv = {"WEATHER_PIN": "plainword", "SERVICE_TOKEN": "alsoplain", "UNITS": "imperial"}
    r = Redactor.from_env({}, dotenv, secret_names={"WEATHER_PIN"})
    assert r("plainword alsoplain imperial") == "[REDACTED] [REDACTED] imperial"


@pytest.mark.parametrize(
    "value",
    [
        "metric",
        "/usr/local/lib/python3.11/site-packages",
        "https://example.com/v1/models",
        "production-eu-west-1",
        "aaaaaaaaaaaaaaaaaaaa1",
    ],
)
def test_settings_in_dotenv_are_not_key_shaped(value: str) -> None:
    assert not is_key_shaped(value)


@pytest.mark.parametrize(
    "value",
    ["sk-abcdefghijklmnopqrstuvwx", "q8Xv2LmN0pRt7ZkW4yB", "eyJhbGciOi.eyJzdWIiOiIx.SflKxwRJ5"],
)
def test_keys_and_tokens_are_key_shaped(value: str) -> None:
    assert is_key_shaped(value)


def test_redactor_hides_secrets_inside_json_escaped_text() -> None:
    r = Redactor(['quo"te\\value'])
    assert r(json.dumps({"output": 'a quo"te\\value b'})) == '{"output": "a [REDACTED] b"}'


def test_an_event_is_redacted_but_its_envelope() -> None:
    redactor = Redactor(["hunter2-secret-value"])
    event = {
        "type": "tool.finished",
        "session_id": "20261129-181500-ab12cd",
        "turn_id": "turn_0123456789ab",
        "preview": "got hunter2-secret-value",
        "duration_ms": 1.5,
        "usage": {"note": "Bearer abcdefghijklmnop.qrstuv-1234"},
        "calls": [{"arguments": "key sk-A1b2C3d4E5f6G7h8I9j0K"}],
    }
    out = redactor.redact_event(event)
    assert out == {
        **event,
        "preview": "got [REDACTED]",
        "usage": {"note": "Bearer [REDACTED]"},
        "calls": [{"arguments": "key [REDACTED]"}],
    }
    assert event["preview"] == "got hunter2-secret-value"  # a copy: the turn's own is kept


def test_redactor_keeps_the_name_of_secret_assignments() -> None:
    r = Redactor()
    assert (
        r("export NEW_API_KEY=zzzzzzzz; PASSWORD: hunter22")
        == "export NEW_API_KEY=[REDACTED]; PASSWORD: [REDACTED]"
    )
    assert r("Authorization: Bearer abcdefghijklmnopqrstuvwx") == "Authorization: Bearer [REDACTED]"


# --- text that arrives in pieces (a model's streamed deltas) -----------------------------------

STREAM_SECRETS = [
    "sk-A1b2C3d4E5f6G7h8I9j0K",
    "ghp_abcdefghijklmnopqrstuvwx12",
    "AKIAIOSFODNN7EXAMPLE",
    "hunter2hunter2",
    "abcdefghijklmnopqrstuvwxyz0123",
    "correct horse battery staple",
    "MIIEowIBAAKCAQEA1234",
]
STREAM_TEXT = (
    "Your key is sk-A1b2C3d4E5f6G7h8I9j0K; the token ghp_abcdefghijklmnopqrstuvwx12 and "
    "AKIAIOSFODNN7EXAMPLE. Set API_KEY = hunter2hunter2, send Bearer "
    "abcdefghijklmnopqrstuvwxyz0123 and say correct horse battery staple.\n"
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234\nabcd\n"
    "-----END RSA PRIVATE KEY-----\nThat is all."
)


def _streamed(redactor: Redactor, pieces: list[str]) -> list[str]:
    from hermesd.redact import StreamRedactor

    stream = StreamRedactor(redactor)
    return [stream.feed(p) for p in pieces] + [stream.flush()]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, 64, 1000])
def test_a_secret_split_across_stream_pieces_is_redacted(size: int) -> None:
    r = Redactor(["correct horse battery staple"])
    pieces = [STREAM_TEXT[i : i + size] for i in range(0, len(STREAM_TEXT), size)]
    shown = _streamed(r, pieces)
    assert "".join(shown) == r(STREAM_TEXT)
    for secret in STREAM_SECRETS:
        assert secret not in "".join(shown)
        assert not any(secret[:8] in piece for piece in shown)


def test_streamed_prose_lags_by_at_most_its_last_word() -> None:
    from hermesd.redact import StreamRedactor

    stream = StreamRedactor(Redactor())
    assert stream.feed("Hello wor") == "Hello "
    assert stream.feed("ld, how are") == "world, how "
    assert stream.feed(" you?\n") == "are you?\n"
    assert stream.flush() == ""


def test_a_stream_holding_an_endless_word_lets_it_go_past_the_limit() -> None:
    from hermesd.redact import STREAM_HOLD_MAX, StreamRedactor

    stream = StreamRedactor(Redactor())
    blob = "A" * (STREAM_HOLD_MAX + 10)
    shown = stream.feed(blob[:100]) + stream.feed(blob[100:])
    assert 0 < len(shown) <= 10 and len(shown) + len(stream.flush()) == len(blob)


def test_stream_redaction_never_leaks_whatever_the_split() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    r = Redactor(["correct horse battery staple"])

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.integers(min_value=0, max_value=len(STREAM_TEXT)), max_size=30))
    def check(cuts: list[int]) -> None:
        points = sorted({0, len(STREAM_TEXT), *cuts})
        pieces = [STREAM_TEXT[a:b] for a, b in itertools.pairwise(points)]
        shown = "".join(_streamed(r, pieces))
        assert shown == r(STREAM_TEXT)

    check()


def test_a_secret_the_model_streams_in_pieces_never_reaches_a_client(start, model) -> None:
    # Deltas of 3 characters: no single delta holds a whole secret, so redacting each event
    # alone would let every one of them through.
    home = short_tmpdir()
    (home / ".env").write_text(f"MY_PLANTED={DOTENV_SECRET}\n")
    daemon = start(
        home,
        env=ENV_SECRETS,
        config=(f"model:\n  base_url: {model.url}\n  default: scripted-model\n"),
    )
    answer = (
        f"Here: {DOTENV_SECRET}, then {ENV_SECRETS['SERVICE_TOKEN']} and "
        "sk-A1b2C3d4E5f6G7h8I9j0K. Bye."
    )
    # a pause after each chunk: one read per chunk, so one delta each (chunks that arrive
    # together are sent as one delta)
    model.push(reply(answer, chunk_chars=3, chunk_delay=0.03))
    with daemon.client() as client:
        sid = client.call("session.create")["id"]
        result = client.call(
            "session.send", {"session_id": sid, "message": "tell me", "wait": True}, timeout=30
        )
        events = [
            e for batch in (n.params for n in client.notifications(timeout=0.3)) for e in batch
        ]
    deltas = [e["text"] for e in events if e.get("type") == "text.delta"]
    assert result["status"] == "completed" and len(deltas) > 2
    streamed = "".join(deltas)
    assert streamed == ("Here: [REDACTED], then [REDACTED] and [REDACTED]. Bye.")
    for secret in (DOTENV_SECRET, ENV_SECRETS["SERVICE_TOKEN"], "sk-A1b2C3d4E5f6G7h8I9j0K"):
        assert not any(secret[:6] in d for d in deltas)
    assert result["final_text"] == answer  # the stored answer is the model's own text


def test_plugin_output_outside_a_call_is_redacted_a_whole_line_at_a_time() -> None:
    # print() from a plugin's own thread goes to the daemon's stdout (the journal); a secret
    # written in two pieces is caught because the line is redacted once it is complete.
    import io

    from hermesd.commands.cli_runner import RoutingStream

    real = io.StringIO()
    stream = RoutingStream(real, 0)
    stream.write("token sk-A1b2C3")
    assert real.getvalue() == ""
    stream.write("d4E5f6G7h8I9j0K and more\nnext ")
    assert real.getvalue() == "token [REDACTED] and more\n"
    stream.write("ghp_abcdefghijklmnopqrstuvwx12")
    stream.flush()
    assert real.getvalue() == "token [REDACTED] and more\nnext [REDACTED]"


WEATHER_MANIFEST = """\
name: weather
version: 1.0.0
requires_env:
  - name: WEATHER_API_KEY
    secret: true
  - name: WEATHER_UNITS
"""


def test_dotenv_settings_stay_readable_and_marked_secrets_are_hidden(start) -> None:
    home = short_tmpdir()
    (home / ".env").write_text("WEATHER_UNITS=metric\nWEATHER_API_KEY=plainwordsecret\n")
    write_plugin(
        home / "plugins", "weather", "def register(ctx):\n    pass\n", manifest=WEATHER_MANIFEST
    )
    daemon = start(home, config="terminal:\n  cwd: /tmp\n", env={"HERMES_BUNDLED_PLUGINS": "/x"})
    with daemon.client() as client:
        assert client.call("plugins.list")["plugins"][0]["state"] == "loaded"
        # the values are written out: the sandbox hands a command no .env value to expand
        out = terminal(client, "echo geometric metric plainwordsecret")["output"]
    assert out == "geometric metric [REDACTED]\n"
