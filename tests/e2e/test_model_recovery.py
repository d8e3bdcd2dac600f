"""A turn whose request fails for good, on a real daemon (hermesd.agent.recovery): over the
endpoint's window it compacts and sends again; a failing model hands the turn to the next entry
of ``fallback_providers``; a plugin's ``should_compress``/``should_fallback`` decide when given.
Two scripted model servers stand in for two endpoints."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.context.compressor import SUMMARY_SYSTEM, estimate_tokens
from tests.support.daemon import DaemonProcess, send_and_follow, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, Step, http_error, model_config, reply
from tests.support.plugin_factory import write_plugin

Start = Callable[..., DaemonProcess]

#: what the endpoint's window holds beyond the first request (system prompt and tools); the
#: daemon is told 128K, so only the endpoint's refusal shows the real window
ROOM = 6000


def _words(n: int, seed: int) -> str:
    vocab = ["harbor", "lantern", "pebble", "meadow", "copper", "thistle", "orbit", "saddle"]
    return " ".join(f"{vocab[(i * 7 + seed) % len(vocab)]}{i % 10}" for i in range(n))


class SmallWindow:
    """Refuses a request over its window (the first request's size plus `ROOM`) as OpenAI
    does; answers summaries."""

    def __init__(self) -> None:
        self.window = 0
        self.refused = 0
        self.summaries = 0
        self.answered: list[int] = []  # the size of each request answered

    def __call__(self, request: dict[str, Any]) -> Step:
        messages = request.get("messages") or []
        if messages and messages[0].get("content") == SUMMARY_SYSTEM:
            self.summaries += 1
            return reply("SUMMARY-BODY: the user sent long notes about harbors.")
        size = estimate_tokens(messages, request.get("tools"))
        self.window = self.window or size + ROOM
        if size > self.window:
            self.refused += 1
            step = http_error(400, "refused")
            message = (
                f"This model's maximum context length is {self.window} tokens. However, your "
                f"messages resulted in {size} tokens. Please reduce the length of the messages."
            )
            error = {"message": message, "type": "invalid_request_error"}
            step.body = json.dumps({"error": {**error, "code": "context_length_exceeded"}}).encode()
            return step
        self.answered.append(size)
        return reply(f"answer {len(self.answered)}: " + _words(200, len(self.answered)))


class Endpoint:
    """A scripted endpoint answering by a function of the request; keeps the models asked."""

    def __init__(self, answer: Callable[[dict[str, Any]], Step]) -> None:
        self.models: list[str] = []
        self.answer = answer

    def __call__(self, request: dict[str, Any]) -> Step:
        self.models.append(str(request.get("model")))
        return self.answer(request)


@pytest.fixture
def servers() -> Iterator[Callable[[Callable[[dict[str, Any]], Step]], ScriptedModelServer]]:
    made: list[ScriptedModelServer] = []

    def make(rules: Callable[[dict[str, Any]], Step]) -> ScriptedModelServer:
        server = ScriptedModelServer(rules=rules).start()
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


def _fallbacks(url: str, model: str = "backup-model") -> str:
    return f"fallback_providers:\n  - provider: custom\n    model: {model}\n    base_url: {url}\n"


def _types(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def test_a_request_over_the_endpoints_window_is_compacted_and_sent_again(
    start: Start, servers: Any
) -> None:
    rules = SmallWindow()
    server = servers(rules)
    d = start(config=model_config(server.url, max_retries=0, context_length=128000))
    with d.client(timeout=60) as c:
        sid = c.call("session.create", {})["id"]
        finished = []
        for i in range(14):
            events = send_and_follow(c, sid, f"note {i}: " + _words(260, i), timeout=60)
            finished.append(events[-1])
            if rules.refused:
                break
    assert rules.refused, "the endpoint never refused: the test's window is too large"
    assert finished[-1]["status"] == "completed", finished[-1]
    assert rules.summaries >= 1
    [warning] = _types(events, "context.warning")
    assert "longer than its window" in warning["message"]
    assert rules.answered[-1] <= rules.window


def test_a_failing_model_hands_the_turn_to_the_fallback_and_the_next_turn_tries_it_first(
    start: Start, servers: Any
) -> None:
    primary = Endpoint(lambda request: http_error(503, "overloaded, try later"))
    backup = Endpoint(lambda request: reply("answered by the backup"))
    first, second = servers(primary), servers(backup)
    config = model_config(first.url, max_retries=0) + _fallbacks(second.url)
    d = start(config=config)
    with d.client(timeout=60) as c:
        sid = c.call("session.create", {})["id"]
        events = send_and_follow(c, sid, "hello")
        assert events[-1]["status"] == "completed", events[-1]
        [switched] = _types(events, "model.fallback")
        assert switched["from_model"] == "scripted-model" and switched["model"] == "backup-model"
        assert "503" in switched["error"]
        history = c.call("session.history", {"session_id": sid})["messages"]
        assert history[-1]["content"] == "answered by the backup"
        assert backup.models == ["backup-model"]
        send_and_follow(c, sid, "again")
    assert primary.models == ["scripted-model", "scripted-model"]
    assert backup.models == ["backup-model", "backup-model"]


def test_a_refused_request_is_not_sent_to_the_fallback(start: Start, servers: Any) -> None:
    primary = Endpoint(lambda request: http_error(400, "tools[0] is not a valid schema"))
    backup = Endpoint(lambda request: reply("never"))
    first, second = servers(primary), servers(backup)
    d = start(config=model_config(first.url, max_retries=0) + _fallbacks(second.url))
    with d.client(timeout=60) as c:
        sid = c.call("session.create", {})["id"]
        events = send_and_follow(c, sid, "hello")
    assert events[-1]["status"] == "failed" and "not a valid schema" in events[-1]["error"]
    assert backup.models == [] and not _types(events, "model.fallback")


def test_a_bad_fallback_entry_is_a_config_error_naming_it(start: Start, servers: Any) -> None:
    server = servers(Endpoint(lambda request: reply("ok")))
    d = start(config=model_config(server.url))
    broken = model_config(server.url) + "fallback_providers:\n  - provider: custom\n"
    (d.home / "config.yaml").write_text(broken)
    with d.client() as c:
        checked = c.call("config.check", {})
    assert not checked["ok"]
    assert any("fallback_providers" in p and "model" in p for p in checked["problems"])


PLUGIN = """
def classify(**kw):
    if kw["status_code"] == 400 and "quota" in kw["error_message"]:
        return {"reason": "billing", "should_fallback": True}
    if kw["status_code"] == 503:
        return {"reason": "overloaded", "should_fallback": False}
    return None


def register(ctx):
    ctx.register_hook("transform_api_error_classification", classify)
"""


@pytest.mark.parametrize(
    ("status", "message", "switches"),
    [(400, "monthly quota used up", True), (503, "overloaded", False)],
)
def test_a_plugins_should_fallback_decides_whether_the_turn_switches(
    start: Start, servers: Any, status: int, message: str, switches: bool
) -> None:
    home: Path = short_tmpdir("fallback-")
    write_plugin(home / "plugins", "router", PLUGIN)
    primary = Endpoint(lambda request: http_error(status, message))
    backup = Endpoint(lambda request: reply("answered by the backup"))
    first, second = servers(primary), servers(backup)
    d = start(home, config=model_config(first.url, max_retries=0) + _fallbacks(second.url))
    with d.client(timeout=60) as c:
        assert "router" in json.dumps(c.call("plugins.list"))
        sid = c.call("session.create", {})["id"]
        events = send_and_follow(c, sid, "hello")
    assert bool(_types(events, "model.fallback")) is switches
    assert events[-1]["status"] == ("completed" if switches else "failed")
    assert backup.models == (["backup-model"] if switches else [])
