"""``ctx.llm`` never holds the daemon up, on a real hermesd: called on the event loop (from an
async hook) it raises a clear error at once and the daemon keeps answering; called from a plugin
thread against a model that never answers, it gives up after ``plugins.llm_timeout``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.daemon import DaemonProcess, follow_turn, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, model_config, reply
from tests.support.plugin_factory import write_plugin

PLUGIN = """
def register(ctx):
    async def recall(user_message, **kwargs):
        if "ask the host" not in user_message:
            return None
        try:
            ctx.llm.complete([{"role": "user", "content": "summarise"}])
        except Exception as exc:
            return {"context": f"ctx.llm refused: {type(exc).__name__}: {exc}"}
        return {"context": "ctx.llm answered on the loop"}

    def ask_slowly(raw):
        try:
            result = ctx.llm.complete([{"role": "user", "content": raw or "slow question"}])
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return "answered: " + result.text

    ctx.register_hook("pre_llm_call", recall)
    ctx.register_command("askslow", ask_slowly, description="ctx.llm from a worker thread")
"""


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def llmd(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = short_tmpdir("pl-")
    write_plugin(home / "plugins", "llmuser", PLUGIN)
    config = model_config(model.url, timeout=60, max_retries=0) + "plugins:\n  llm_timeout: 3\n"
    daemon = start_daemon(home, config=config)
    yield daemon
    daemon.stop()


def test_ctx_llm_from_an_async_hook_raises_a_clear_error_and_the_daemon_keeps_answering(
    llmd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("noted"))
    with llmd.client() as c:
        sid = c.call("session.create")["id"]
        turn_id = c.call("session.send", {"session_id": sid, "message": "please ask the host"})[
            "turn_id"
        ]
        assert c.call("ping", timeout=10) is not None
        follow_turn(c, turn_id)
    sent = model.last_request["messages"][-1]["content"]
    assert "ctx.llm refused: BlockingOnLoop" in sent
    assert "cannot be called on the daemon's event loop" in sent
    assert llmd.call("ping") is not None


def test_ctx_llm_from_a_plugin_thread_gives_up_on_a_model_that_never_answers(
    llmd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("far too late", delay=30))
    try:
        with llmd.client() as c:
            out = c.call("command.run", {"line": "/askslow are you there?"}, timeout=20)
            assert c.call("ping", timeout=10) is not None
    finally:
        model.clear_script()
    assert out["output"] == "TimeoutError: the model did not answer within 3 s"
    asked = [r for r in model.requests if r["messages"][-1].get("content") == "are you there?"]
    assert len(asked) <= 1  # asked once, never retried (under load it may not have arrived)
