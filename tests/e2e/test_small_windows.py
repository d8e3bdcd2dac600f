"""Local models with small windows, on a real daemon (docs/sessions.md, "Small windows").

A llama.cpp or Ollama server often serves a 4K–32K window. The scripted model stands in for one:
the tests read every request it received and measure it with the estimator the daemon uses, count
the summary requests, and read the ``context.warning`` events attached clients got. The window
itself is read from a llama.cpp-style ``/props`` and an Ollama-style ``/api/show``.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from hermesd.context.compressor import SUMMARY_SYSTEM, estimate_tokens
from tests.support.daemon import short_tmpdir, start_daemon
from tests.support.modelserver import (
    ScriptedModelServer,
    Step,
    call_tools,
    model_config,
    reply,
    tool_call,
)

WINDOW = 3000
TURNS = 8


def _lines(n: int, seed: int) -> str:
    """``n`` words as a file of short lines (read_file cuts lines over 2,000 characters)."""
    words = _words(n, seed).split()
    return "\n".join(" ".join(words[i : i + 12]) for i in range(0, len(words), 12)) + "\n"


def _words(n: int, seed: int) -> str:
    """``n`` words of varied prose (about six characters each)."""
    vocab = ["harbor", "lantern", "pebble", "meadow", "copper", "thistle", "orbit", "saddle"]
    return " ".join(f"{vocab[(i * 7 + seed) % len(vocab)]}{i % 10}" for i in range(n))


class Model:
    """Each turn: read a long file (``read`` set), then a long answer; a summary when asked
    for one. Records which request was which."""

    def __init__(self) -> None:
        self.summaries: list[dict[str, Any]] = []
        self.turns: list[dict[str, Any]] = []  # the first request of each turn
        self.requests: list[dict[str, Any]] = []  # every request of a turn
        self.read: str | None = None

    def __call__(self, request: dict[str, Any]) -> Step:
        messages = request.get("messages") or []
        if messages and messages[0].get("content") == SUMMARY_SYSTEM:
            self.summaries.append(request)
            return reply("SUMMARY-BODY: the user sent long notes about harbors and lanterns.")
        self.requests.append(request)
        if messages[-1].get("role") == "user":
            self.turns.append(request)
            if self.read is not None:
                return call_tools(tool_call("read_file", {"path": self.read}))
        return reply(f"answer-{len(self.turns)} " + _words(330, len(self.turns)))


@pytest.fixture
def model() -> Iterator[tuple[ScriptedModelServer, Model]]:
    rules = Model()
    with ScriptedModelServer(rules=rules) as server:
        yield server, rules


def _config(url: str, **model: Any) -> str:
    return model_config(url, max_retries=0, **model) + "tools:\n  enabled_toolsets: [file]\n"


def _turn(c: Client, sid: str, message: str) -> list[dict[str, Any]]:
    """Run one turn; every event of the session until it finished."""
    turn_id = c.call("session.send", {"session_id": sid, "message": message})["turn_id"]
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        note = c.next_notification(timeout=deadline - time.monotonic())
        if note is None:
            break
        if note.method != "session.event" or note.params[0].get("session_id") != sid:
            continue
        events.append(note.params[0])
        if events[-1]["type"] == "turn.finished" and events[-1]["turn_id"] == turn_id:
            return events
    raise AssertionError(f"turn {turn_id} did not finish: {events}")


def _compactions(home: Path) -> list[int]:
    """How many messages each recorded compaction replaced."""
    db = sqlite3.connect(home / "state.db")
    try:
        return [r[0] for r in db.execute("SELECT replaced FROM compactions ORDER BY id")]
    finally:
        db.close()


def _size(request: dict[str, Any]) -> int:
    """The request's size by the daemon's own estimator."""
    return estimate_tokens(request["messages"], request.get("tools"))


def test_eight_long_turns_in_a_3000_token_window_always_fit_and_warn_once(
    model: tuple[ScriptedModelServer, Model],
) -> None:
    server, rules = model
    home = short_tmpdir("win-")
    (home / "notes.txt").write_text(_lines(900, 3))  # about 1,800 tokens: over half the window
    rules.read = str(home / "notes.txt")
    d = start_daemon(home, config=_config(server.url, context_length=WINDOW))
    try:
        warnings: list[dict[str, Any]] = []
        summaries_after: list[int] = []
        compacted: list[int] = []
        with d.client() as c:
            sid = c.call("session.create", {})["id"]
            for i in range(TURNS):
                events = _turn(c, sid, f"note-{i} " + _words(330, i))
                assert events[-1]["status"] == "completed", events[-1]
                warnings += [e for e in events if e["type"] == "context.warning"]
                compacted.append(sum(e["type"] == "context.compacted" for e in events))
                summaries_after.append(len(rules.summaries))
            status = c.call("session.get", {"session_id": sid})["context"]
    finally:
        d.stop()
    assert status["context_length"] == WINDOW
    sizes = [_size(r) for r in server.requests]
    assert len(rules.turns) == TURNS
    assert max(sizes) <= WINDOW, sizes
    # the newest user message always reaches the model, its start intact
    for i, request in enumerate(rules.turns):
        users = [m for m in request["messages"] if m["role"] == "user"]
        assert str(users[-1]["content"]).startswith(f"note-{i} ")
    for request in rules.requests:  # user and assistant alternate, as chat templates want
        roles = [m["role"] for m in request["messages"]]
        assert all(a != b for a, b in itertools.pairwise(roles)), roles
    # never more than one summary a turn: none without something new to compact
    per_turn = [b - a for a, b in zip([0, *summaries_after], summaries_after, strict=False)]
    assert max(per_turn) <= 1, per_turn
    assert 1 <= len(rules.summaries) <= TURNS
    assert max(compacted) <= 1, compacted  # a summary alone is not compacted again
    rows = _compactions(d.home)
    assert rows and all(replaced > 0 for replaced in rows), rows
    # the file read this turn reached the model cut, and said so; stored whole
    results = [m for r in rules.requests for m in r["messages"] if m["role"] == "tool"]
    assert results and all("truncated by hermesd" in m["content"] for m in results)
    too_small = [w for w in warnings if w.get("kind") == "window_too_small"]
    assert len(too_small) == 1, warnings
    assert f"{WINDOW:,} tokens" in too_small[0]["message"]


def test_hermesctl_chat_shows_the_window_warning_once(
    model: tuple[ScriptedModelServer, Model],
) -> None:
    from tests.support.terminal import Terminal

    server, rules = model
    home = short_tmpdir("win-")
    (home / "notes.txt").write_text(_lines(1400, 3))  # alone near the whole window
    rules.read = str(home / "notes.txt")
    d = start_daemon(home, config=_config(server.url, context_length=WINDOW))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(d.home), TERM="xterm")
    t = Terminal([sys.executable, "-m", "hermesctl", "--socket", str(d.socket), "chat"], env)
    try:
        t.expect("› ")
        t.wait_reading()
        t.sendline("read my notes")
        t.expect("window \\(3,000 tokens, set in model.context_length\\) is too small")
        t.expect("answer-1 ")
        t.expect("› ")
        t.wait_reading()
        t.sendline("and again")
        t.expect("answer-2 ")
        t.expect("› ")
        t.sendline("/quit")
        assert t.wait() == 0
        assert t.text.count("is too small for this conversation") == 1
    finally:
        t.close()
        d.stop()


def _status_after_a_turn(server: ScriptedModelServer) -> dict[str, Any]:
    """The session's context status once a turn has opened its engine (no configured window)."""
    home = short_tmpdir("win-")
    d = start_daemon(home, config=_config(server.url))
    try:
        with d.client() as c:
            sid = c.call("session.create", {})["id"]
            assert _turn(c, sid, "hello")[-1]["status"] == "completed"
            context: dict[str, Any] = c.call("session.get", {"session_id": sid})["context"]
            return context
    finally:
        d.stop()


def test_the_window_is_read_from_a_llama_cpp_servers_props() -> None:
    with ScriptedModelServer(
        rules=Model(),
        model_info={"meta": {"n_ctx_train": 131_072}},  # what the model was trained for
        props={"default_generation_settings": {"n_ctx": 4096}},  # what the server allocated
    ) as server:
        status = _status_after_a_turn(server)
    assert (status["context_length"], status["context_length_source"]) == (4096, "endpoint")
    assert server.probes[0][0] == "/props"  # the server's root, not under /v1


def test_the_window_is_read_from_ollamas_api_show() -> None:
    show = {
        "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32_768},
        "parameters": 'stop "<|im_end|>"\nnum_ctx                        8192',
    }
    with ScriptedModelServer(rules=Model(), ollama_show=show) as server:
        status = _status_after_a_turn(server)
    assert (status["context_length"], status["context_length_source"]) == (8192, "endpoint")
    shown = [body for path, body in server.probes if path == "/api/show"]
    assert shown and shown[0]["model"] == "scripted-model"
    del show["parameters"]  # no num_ctx in the Modelfile: the model's own window
    with ScriptedModelServer(rules=Model(), ollama_show=show) as server:
        status = _status_after_a_turn(server)
    assert (status["context_length"], status["context_length_source"]) == (32_768, "endpoint")


def test_a_tool_list_bigger_than_the_window_is_named_in_the_warning(
    model: tuple[ScriptedModelServer, Model],
) -> None:
    server, rules = model
    home = short_tmpdir("win-")
    config = model_config(server.url, max_retries=0, context_length=WINDOW)  # every tool offered
    d = start_daemon(home, config=config)
    try:
        with d.client() as c:
            sid = c.call("session.create", {})["id"]
            events = _turn(c, sid, "note-0 " + _words(330, 0))
    finally:
        d.stop()
    assert events[-1]["status"] == "completed"
    (warning,) = [e for e in events if e.get("kind") == "window_too_small"]
    assert warning["fits"] is False and "tools.enabled_toolsets" in warning["message"]
    # cutting the question could not make it fit: it was sent whole
    assert rules.turns[0]["messages"][-1]["content"] == "note-0 " + _words(330, 0)
    assert estimate_tokens([], rules.turns[0]["tools"]) > WINDOW * 0.9
