"""A plugin builds the reference's ``ContextCompressor`` with the reference's constructor,
subclasses it, and registers it as the context engine of a real daemon (docs/hermes-compat.md
§11.2): hermesd's built-in compressor does the work inside, the summary comes from the daemon's
model, and the subclass's own step runs around ``super().compress``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermesd.context.compressor import SUMMARY_PREFIX
from tests.e2e.test_context_engines import (
    WINDOW,
    Model,
    _chat_requests,
    _config,
    _drive_until_compacted,
    _start,
)
from tests.support.daemon import short_tmpdir
from tests.support.modelserver import ScriptedModelServer
from tests.support.plugin_factory import write_plugin

TAGGED = """
import json, os
from agent.context_compressor import SUMMARY_PREFIX, ContextCompressor

class Tagged(ContextCompressor):
    name = "tagged"

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False,
                 memory_context=""):
        out = super().compress(messages, current_tokens, focus_topic, force, memory_context)
        return [
            {**m, "content": m["content"] + "\\n[tagged by the subclass]"}
            if isinstance(m.get("content"), str) and m["content"].startswith(SUMMARY_PREFIX)
            else m
            for m in out
        ]

def register(ctx):
    engine = Tagged(
        model="scripted-model",
        threshold_percent=0.6,
        protect_first_n=1,
        protect_last_n=2,
        summary_target_ratio=0.9,
        quiet_mode=True,
        config_context_length=%d,
    )
    with open(os.environ["HERMES_HOME"] + "/constructed.json", "w") as f:
        json.dump({
            "threshold_percent": engine.threshold_percent,
            "threshold_tokens": engine.threshold_tokens,
            "protect_first_n": engine.protect_first_n,
            "protect_last_n": engine.protect_last_n,
            "summary_target_ratio": engine.summary_target_ratio,
            "context_length": engine.context_length,
            "is_engine": isinstance(engine, ContextCompressor),
        }, f)
    ctx.register_context_engine(engine)
"""


@pytest.fixture
def model() -> Iterator[tuple[ScriptedModelServer, Model]]:
    rules = Model()
    with ScriptedModelServer(rules=rules, model_info={"max_model_len": WINDOW}) as server:
        yield server, rules


@pytest.fixture
def home() -> Path:
    return short_tmpdir("cmp-")


def test_a_plugin_subclass_of_the_reference_compressor_compacts_through_the_builtin(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, rules = model
    write_plugin(home / "plugins", "tagged", TAGGED % WINDOW)
    daemon = _start(home, _config(server.url, "context:\n  engine: tagged\n"))
    try:
        c = daemon.client()
        c.call("plugins.list")  # plugins load in the background: wait for them
        built = json.loads((home / "constructed.json").read_text())
        assert built == {
            # a window under 512K tokens: the reference's floor of 75% wins over 0.6
            "threshold_percent": 0.75,
            "threshold_tokens": int(WINDOW * 0.85),  # the small-window rule
            "protect_first_n": 1,
            "protect_last_n": 2,
            "summary_target_ratio": 0.8,  # clamped as the reference does
            "context_length": WINDOW,
            "is_engine": True,
        }
        sid = c.call("session.create", {})["id"]
        _, events = _drive_until_compacted(c, sid)
        compacted = next(e for e in events if e["type"] == "context.compacted")
        assert compacted["engine"] == "tagged"
        assert rules.summaries, "the summary was not asked of the daemon's model"
        sent = _chat_requests(server)[-1]["messages"]
        summaries = [m["content"] for m in sent if str(m["content"]).startswith(SUMMARY_PREFIX)]
        assert len(summaries) == 1
        assert "SUMMARY-BODY" in summaries[0]
        assert summaries[0].endswith("[tagged by the subclass]")
        assert sent[1]["content"] == "question marker1 please"  # protect_first_n=1 kept it
        status = c.call("session.get", {"session_id": sid})["context"]
        assert status["engine"] == "tagged" and status["compression_count"] == 1
    finally:
        daemon.stop()
