"""Context engines and compaction on a real daemon (docs/sessions.md, "The view model").

The scripted model reports a small window through ``/v1/models`` (vLLM's ``max_model_len``) and
answers long, so a few turns drive a session past its threshold. The tests read the requests the
model received (what was sent after a compaction), the stored transcript and search (unchanged),
the ``compactions`` rows of state.db and the events attached clients got.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from hermesd.context.compressor import SUMMARY_PREFIX, SUMMARY_SYSTEM
from tests.support import corpus
from tests.support.daemon import (
    DaemonProcess,
    checkout_pythonpath,
    daemon_env,
    run_hermesctl,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import ScriptedModelServer, Step, http_error, model_config, reply
from tests.support.plugin_factory import write_plugin, written_lines

WINDOW = 8000  # tokens: the threshold is 85% of it (6,800): the reference's rule for small windows
ANSWER = 2400  # characters of each answer: 600 tokens


class Model:
    """The scripted model's rules: long answers, a summary when asked for one (or a failure)."""

    def __init__(self) -> None:
        self.summary: Step | None = None  # None: a normal summary
        self.summaries: list[dict[str, Any]] = []
        self.n = 0

    def __call__(self, request: dict[str, Any]) -> Step:
        messages = request.get("messages") or []
        if messages and messages[0].get("content") == SUMMARY_SYSTEM:
            self.summaries.append(request)
            if self.summary is not None:
                return self.summary
            return reply("SUMMARY-BODY: the user counted turns and asked about markers.")
        self.n += 1
        return reply(f"answer-{self.n} " + "x" * ANSWER)


@pytest.fixture
def model() -> Iterator[tuple[ScriptedModelServer, Model]]:
    rules = Model()
    with ScriptedModelServer(rules=rules, model_info={"max_model_len": WINDOW}) as server:
        yield server, rules


def _config(url: str, extra: str = "", *, background: bool = False) -> str:
    """Small tool list, a short protected tail; compaction between turns only when asked for
    (else it may race the next turn: the tests want to know which request saw what)."""
    return (
        model_config(url, max_retries=0)
        + "tools:\n  enabled_toolsets: [context_engine]\n"
        + "compression:\n  protect_last_n: 4\n"
        + extra
        + ("" if "context:" in extra else "context:\n")
        + f"  background: {'true' if background else 'false'}\n"
    )


@pytest.fixture
def home() -> Path:
    return short_tmpdir("ctx-")


def _start(home: Path, config: str, env: dict[str, str] | None = None) -> DaemonProcess:
    return start_daemon(home, config=config, env=env, timeout=60)


def _turn(c: Client, sid: str, message: str, timeout: float = 60) -> list[dict[str, Any]]:
    """Run one turn; every event of the session until it finished (warnings included)."""
    turn_id = c.call("session.send", {"session_id": sid, "message": message})["turn_id"]
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
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


def _compactions(home: Path, sid: str) -> list[dict[str, Any]]:
    db = sqlite3.connect(home / "state.db")
    db.row_factory = sqlite3.Row
    rows = db.execute(
        "SELECT * FROM compactions WHERE session_id = ? ORDER BY id", (sid,)
    ).fetchall()
    db.close()
    return [dict(r) for r in rows]


def _drive_until_compacted(c: Client, sid: str, most: int = 20) -> tuple[int, list[dict[str, Any]]]:
    """Turns with marker words until one compacts; (turns run, that turn's events)."""
    for i in range(1, most + 1):
        events = _turn(c, sid, f"question marker{i} please")
        if any(e["type"] == "context.compacted" for e in events):
            return i, events
    raise AssertionError(f"no compaction after {most} turns")


def _chat_requests(server: ScriptedModelServer) -> list[dict[str, Any]]:
    return [
        r
        for r in server.requests
        if (r.get("messages") or [{}])[0].get("content") != SUMMARY_SYSTEM
    ]


def test_a_session_past_its_threshold_is_compacted_into_a_view_and_nothing_is_lost(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, rules = model
    daemon = _start(home, _config(server.url))
    try:
        c = daemon.client()
        sid = c.call("session.create", {})["id"]
        turns, events = _drive_until_compacted(c, sid)
        compacted = next(e for e in events if e["type"] == "context.compacted")
        assert compacted["engine"] == "compressor" and compacted["replaced"] > 0
        assert events[-1]["status"] == "completed"
        # the request after the compaction: head kept, the summary, the tail, the new question
        sent = _chat_requests(server)[-1]["messages"]
        assert sent[0]["role"] == "system"
        assert sent[1]["content"] == "question marker1 please"  # protect_first_n: 3
        assert sent[2]["content"].startswith("answer-1 ")
        assert sent[3]["content"] == "question marker2 please"
        assert sent[4]["content"].startswith(SUMMARY_PREFIX)
        assert "SUMMARY-BODY" in sent[4]["content"]
        assert sent[-1]["content"] == f"question marker{turns} please"
        assert len(sent) < 2 * turns
        # the summary model read the window it replaces
        window = rules.summaries[-1]["messages"][1]["content"]
        assert "question marker3 please" in window
        # every message is still stored and found
        stored = c.call("session.history", {"session_id": sid})["messages"]
        assert len(stored) == 2 * turns
        hits = c.call("session.search", {"query": "marker3", "session_id": sid})["hits"]
        assert [h["role"] for h in hits] == ["user"]
        rows = _compactions(home, sid)
        assert len(rows) == 1 and rows[0]["reason"] == "threshold" and not rows[0]["fallback"]
        assert rows[0]["summary"].startswith(SUMMARY_PREFIX)
        status = c.call("session.get", {"session_id": sid})["context"]
        assert status["engine"] == "compressor" and status["compression_count"] == 1
        assert status["context_length"] == WINDOW
        assert status["context_length_source"] == "endpoint"
        # the next turn is sent the same view plus what came after it
        _turn(c, sid, "after the compaction")
        again = _chat_requests(server)[-1]["messages"]
        assert again[4]["content"].startswith(SUMMARY_PREFIX)
        assert again[-1]["content"] == "after the compaction"
    finally:
        daemon.stop()
    assert server.listings == 1  # the window is asked once per endpoint and model


def test_a_failed_summary_loses_no_turn_and_warns_every_attached_client(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, rules = model
    rules.summary = http_error(500, "summary model down")
    daemon = _start(home, _config(server.url))
    try:
        c = daemon.client()
        watcher = daemon.client()
        sid = c.call("session.create", {})["id"]
        watcher.call("session.attach", {"session_id": sid})
        turns, events = _drive_until_compacted(c, sid)
        assert events[-1]["status"] == "completed"
        warnings = [e for e in events if e["type"] == "context.warning"]
        assert warnings and "mechanical summary" in warnings[0]["message"]
        seen = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not seen:
            note = watcher.next_notification(timeout=1)
            if note is not None and note.params[0].get("type") == "context.warning":
                seen.append(note.params[0])
        assert seen, "the other attached client got no warning"
        sent = _chat_requests(server)[-1]["messages"]
        summary = next(m for m in sent if str(m.get("content")).startswith(SUMMARY_PREFIX))
        # deterministic: the user's asks of the replaced window are in it
        assert "question marker3 please" in summary["content"]
        assert _compactions(home, sid)[0]["fallback"] == 1
        assert len(c.call("session.history", {"session_id": sid})["messages"]) == 2 * turns
    finally:
        daemon.stop()


def test_abort_on_summary_failure_keeps_the_transcript_as_it_is(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, rules = model
    rules.summary = http_error(500, "summary model down")
    extra = "  abort_on_summary_failure: true\n"  # under compression:
    daemon = _start(home, _config(server.url).replace("compression:\n", "compression:\n" + extra))
    try:
        c = daemon.client()
        sid = c.call("session.create", {})["id"]
        warned: list[dict[str, Any]] = []
        for i in range(1, 16):
            events = _turn(c, sid, f"question marker{i} please")
            assert events[-1]["status"] == "completed"
            warned += [e for e in events if e["type"] == "context.warning"]
            if warned:
                break
        assert warned and "nothing was compacted" in warned[0]["message"]
        assert _compactions(home, sid) == []
        sent = _chat_requests(server)[-1]["messages"]
        assert sent[1]["content"] == "question marker1 please"
        assert not any(str(m.get("content")).startswith(SUMMARY_PREFIX) for m in sent)
    finally:
        daemon.stop()


def test_compress_command_and_hermesctl_sessions_compress_force_a_compaction(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, rules = model
    daemon = _start(home, _config(server.url))
    try:
        c = daemon.client()
        sid = c.call("session.create", {})["id"]
        for i in range(1, 7):  # well under the threshold
            _turn(c, sid, f"question marker{i} please")
        out = c.call("command.run", {"line": "/compress the markers", "session_id": sid})
        assert "Compacted with compressor" in out["output"], out
        assert "focus" in rules.summaries[-1]["messages"][1]["content"] or (
            "the markers" in rules.summaries[-1]["messages"][1]["content"]
        )
        rows = _compactions(home, sid)
        assert [r["reason"] for r in rows] == ["manual"] and rows[0]["focus"] == "the markers"
        again = c.call("command.run", {"line": "/compress", "session_id": sid})  # at once: no-op
        assert again["output"].startswith("Nothing compacted: nothing "), again  # and says why
        assert len(_compactions(home, sid)) == 1
        for i in range(7, 12):
            _turn(c, sid, f"question marker{i} please")
        done = run_hermesctl(
            ["--socket", str(daemon.socket), "sessions", "compress", sid[:12], "--focus", "x"]
        )
        assert done.returncode == 0, done.stderr
        assert f"Compacted {sid} with compressor" in done.stdout
        rows = _compactions(home, sid)
        assert len(rows) == 2
        # compressed twice: the reference's warning
        note = None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            note = c.next_notification(timeout=1)
            if note is not None and "accuracy may degrade" in str(note.params[0].get("message")):
                break
        assert note is not None
        assert "Consider /new to start fresh." in note.params[0]["message"]
        assert len(c.call("session.history", {"session_id": sid})["messages"]) == 22
    finally:
        daemon.stop()


def test_an_idle_session_near_its_threshold_is_compacted_between_turns(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, _ = model
    daemon = _start(home, _config(server.url, background=True))
    try:
        c = daemon.client()
        sid = c.call("session.create", {})["id"]
        background: list[dict[str, Any]] = []
        for i in range(1, 16):
            events = _turn(c, sid, f"q{i}")
            compacted = [e for e in events if e["type"] == "context.compacted"]
            assert all(e["turn_id"] is None for e in compacted), "compacted in-turn"
            background += compacted
            if f"compacting session {sid} with context engine 'compressor' (background;" not in (
                daemon.log()
            ):
                continue
            deadline = time.monotonic() + 30  # it started: wait for it to finish
            while time.monotonic() < deadline and not background:
                note = c.next_notification(timeout=1)
                if note is not None and note.params[0].get("type") == "context.compacted":
                    background.append(note.params[0])
            break
        assert background and background[0]["reason"] == "background"
        events = _turn(c, sid, "next question")
        assert not any(e["type"] == "context.compacted" and e["turn_id"] for e in events)
        sent = _chat_requests(server)[-1]["messages"]
        assert any(str(m.get("content")).startswith(SUMMARY_PREFIX) for m in sent)
        # (a turn that started while one ran may have left the session near it again)
        reasons = {r["reason"] for r in _compactions(home, sid)}
        assert reasons == {"background"}
    finally:
        daemon.stop()


def test_sessions_compacting_at_once_each_get_their_own_view(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, rules = model
    rules.summary = reply("SUMMARY-BODY: slow summary", delay=0.5)
    daemon = _start(home, _config(server.url))
    try:
        c = daemon.client()
        sids = [c.call("session.create", {})["id"] for _ in range(3)]
        for sid in sids:
            for i in range(1, 7):
                _turn(c, sid, f"{sid} question {i}")
        results: dict[str, Any] = {}

        def compress(sid: str) -> None:
            with daemon.client() as own:
                results[sid] = own.call("session.compress", {"session_id": sid}, timeout=60)

        threads = [threading.Thread(target=compress, args=(sid,)) for sid in sids]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert all(results[sid]["compacted"] for sid in sids), results
        for sid in sids:
            rows = _compactions(home, sid)
            assert len(rows) == 1
            view = json.loads(rows[0]["view"])
            assert view[0]["content"] == f"{sid} question 1"  # its own head, not another's
            assert all(other not in rows[0]["summary"] for other in sids if other != sid)
    finally:
        daemon.stop()


ENGINE = """
import json, os, time
from agent.context_engine import ContextEngine

class {cls}(ContextEngine):
    name = "{name}"
    def update_from_response(self, usage): self.last_prompt_tokens = usage.get("prompt_tokens", 0)
    def should_compress(self, prompt_tokens=None):
        {should}
    def compress(self, messages, current_tokens=None):
        {compress}
"""


def _engine(home: Path, name: str, should: str, compress: str) -> None:
    folder = home / "plugins" / "context_engine" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(
        ENGINE.format(cls=name.capitalize(), name=name, should=should, compress=compress)
    )


def test_a_two_argument_engine_gets_only_the_arguments_its_signature_takes(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, _ = model
    _engine(
        home,
        "recorder",
        "return (prompt_tokens or 0) >= self.threshold_tokens",
        'open(os.environ["HERMES_HOME"] + "/compress.json", "a").write(json.dumps('
        '{"n": len(messages), "current_tokens": current_tokens}) + "\\n")\n'
        '        return [messages[0], {"role": "user", "content": "[recorded]"}, *messages[-1:]]',
    )
    daemon = _start(home, _config(server.url, "context:\n  engine: recorder\n"))
    try:
        c = daemon.client()
        sid = c.call("session.create", {})["id"]
        turns, events = _drive_until_compacted(c, sid)
        assert events[-1]["status"] == "completed"
        calls = [json.loads(line) for line in (home / "compress.json").read_text().splitlines()]
        assert calls[0]["n"] == 2 * turns - 1 and calls[0]["current_tokens"] > 0
        sent = _chat_requests(server)[-1]["messages"]
        assert [m["content"] for m in sent[1:]] == [
            "question marker1 please",
            "[recorded]",
            f"question marker{turns} please",
        ]
        status = c.call("session.get", {"session_id": sid})["context"]
        assert status["engine"] == "recorder"
        assert "arguments: messages, current_tokens)" in daemon.log()
    finally:
        daemon.stop()


@pytest.mark.parametrize(
    ("name", "compress", "said"),
    [
        ("raiser", "raise RuntimeError('engine bug')", "raised RuntimeError: engine bug"),
        ("hanger", "time.sleep(60)", "did not return within 2 s"),
    ],
)
def test_an_engine_that_raises_or_hangs_is_isolated_and_the_builtin_takes_over(
    model: tuple[ScriptedModelServer, Model], home: Path, name: str, compress: str, said: str
) -> None:
    server, _ = model
    _engine(home, name, "return True", compress)
    config = _config(server.url, f"context:\n  engine: {name}\n  timeout: 2\n")
    daemon = _start(home, config)
    try:
        c = daemon.client()
        sid = c.call("session.create", {})["id"]
        events = _turn(c, sid, "hello")
        assert events[-1]["status"] == "completed"
        warning = next(e for e in events if e["type"] == "context.warning")
        assert f"The context engine '{name}' failed" in warning["message"]
        assert said in warning["message"]
        assert "built-in compressor" in warning["message"]
        assert c.call("session.get", {"session_id": sid})["context"]["engine"] == "compressor"
        assert f"context engine '{name}': compress()" in daemon.log()
        assert _turn(c, sid, "still there?")[-1]["status"] == "completed"
    finally:
        daemon.stop()


def test_an_unknown_engine_name_falls_back_to_the_builtin_with_the_reference_warning(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, _ = model
    daemon = _start(home, _config(server.url, "context:\n  engine: nowhere\n"))
    try:
        c = daemon.client()
        sid = c.call("session.create", {})["id"]
        assert _turn(c, sid, "hello")[-1]["status"] == "completed"
        assert "Context engine 'nowhere' not found — falling back to built-in compressor" in (
            daemon.log()
        )
        assert c.call("session.get", {"session_id": sid})["context"]["engine"] == "compressor"
    finally:
        daemon.stop()


def test_model_context_length_in_config_wins_over_the_endpoint(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, _ = model
    config = _config(server.url).replace(
        "  default: scripted-model\n", "  default: scripted-model\n  context_length: 50000\n"
    )
    daemon = _start(home, config)
    try:
        c = daemon.client()
        sid = c.call("session.create", {})["id"]
        _turn(c, sid, "hello")
        status = c.call("session.get", {"session_id": sid})["context"]
        assert (status["context_length"], status["context_length_source"]) == (50000, "config")
        assert status["threshold_tokens"] == 42500  # 85% of a window under the 64K floor
    finally:
        daemon.stop()


def test_the_published_lossless_hermes_engine_is_selected_and_called_as_its_signature_allows(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    """lossless-hermes-py 0.1.6 (PyPI): ``compress(messages, current_tokens=None, **kwargs)``,
    registered by a general plugin through ``ctx.register_context_engine``; installed into a
    test-only folder (the plugin corpus cache)."""
    server, _ = model
    try:
        target = corpus.install({"dist": "lossless-hermes-py", "version": "0.1.6"})
    except corpus.Unreachable as exc:
        pytest.skip(str(exc))
    extra = "plugins:\n  enabled: [lossless-hermes]\ncontext:\n  engine: lossless-hermes\n"
    env = {"PYTHONPATH": checkout_pythonpath(str(target))}
    daemon = _start(home, _config(server.url, extra), env=env)
    try:
        c = daemon.client()
        assert any(p["key"] == "lossless-hermes" for p in c.call("plugins.list")["plugins"])
        sid = c.call("session.create", {})["id"]
        for i in range(1, 13):  # past its threshold (75% of the window)
            assert _turn(c, sid, f"question marker{i} please")[-1]["status"] == "completed"
        log = daemon.log()
        assert "Using context engine: lossless-hermes" in log
        # **kwargs: every optional argument the host has (no memory provider: no memory_context)
        assert f"compacting session {sid} with context engine 'lossless-hermes' (threshold;" in log
        assert "arguments: messages, current_tokens, focus_topic, force)" in log
        done = c.call("session.compress", {"session_id": sid, "focus": "markers"})
        assert done["engine"] == "lossless-hermes"
        status = c.call("session.get", {"session_id": sid})["context"]
        assert status["engine"] == "lossless-hermes"
        assert status["context_length"] == WINDOW
        assert (home / "lcm.db").exists()  # it keeps its own store, in HERMES_HOME
        # whatever it made of the view, the transcript is whole
        assert len(c.call("session.history", {"session_id": sid})["messages"]) == 24
        assert _turn(c, sid, "after all that")[-1]["status"] == "completed"
    finally:
        daemon.stop()


PRECOMPRESS_PROVIDER = """
from agent.memory_provider import MemoryProvider

class Keeper(MemoryProvider):
    @property
    def name(self):
        return "keeper"
    def is_available(self):
        return True
    def initialize(self, session_id, **kwargs):
        self.home = kwargs["hermes_home"]
    def get_tool_schemas(self):
        return []
    def on_session_switch(self, new_session_id, **kwargs):
        import json, os
        with open(os.path.join(self.home, "switches.jsonl"), "a") as f:
            f.write(json.dumps({"new": new_session_id, **kwargs}) + "\\n")
    def on_pre_compress(self, messages):
        return ("KEEP-HEAD token sk-proj-abcdefghijklmnopqrstuvwxyz123456 " + "m" * 9000
                + " KEEP-TAIL")

def register(ctx):
    ctx.register_memory_provider(Keeper())
"""


def test_the_memory_providers_pre_compress_text_reaches_the_summary_redacted_and_capped(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, rules = model
    folder = home / "plugins" / "keeper"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(PRECOMPRESS_PROVIDER)
    daemon = _start(home, _config(server.url, "memory:\n  provider: keeper\n"))
    try:
        c = daemon.client()
        sid = c.call("session.create", {})["id"]
        for i in range(1, 7):
            _turn(c, sid, f"question marker{i} please")
        assert c.call("session.compress", {"session_id": sid})["compacted"]
        asked = rules.summaries[-1]["messages"][1]["content"]
        kept = asked.split("Context from the memory provider, to keep:\n", 1)[1]
        kept = kept.split("\n\nThe excerpt:", 1)[0]
        assert kept.startswith("KEEP-HEAD token [REDACTED]") and kept.endswith("KEEP-TAIL")
        assert "...[memory provider context truncated]..." in kept
        assert "sk-proj" not in asked
        assert len(kept) <= 6_000 + len("\n...[memory provider context truncated]...\n")
        # then the provider is told the conversation goes on, compressed, in the same session
        lines = written_lines(home / "switches.jsonl", "on_session_switch")
        told = [json.loads(line) for line in lines]
        assert [(t["new"], t.get("reason")) for t in told] == [(sid, "compression")]
    finally:
        daemon.stop()


def test_an_engine_answering_nonsense_and_bad_compress_params_are_refused(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, _ = model
    _engine(home, "liar", "return True", "return {'role': 'user'}")
    daemon = _start(home, _config(server.url, "context:\n  engine: liar\n"))
    try:
        c = daemon.client()
        sid = c.call("session.create", {})["id"]
        events = _turn(c, sid, "hello")
        assert events[-1]["status"] == "completed"
        warning = next(e for e in events if e["type"] == "context.warning")
        assert "compress() returned dict, not messages" in warning["message"]
        assert _compactions(home, sid) == []
        with pytest.raises(Exception) as refused:
            c.call("session.compress", {"session_id": sid, "focus": ["not", "text"]})
        assert "parameter 'focus' must be str" in str(refused.value)
        with pytest.raises(Exception) as missing:
            c.call("session.compress", {"session_id": "no-such-session"})
        assert "no-such-session" in str(missing.value)
    finally:
        daemon.stop()


def test_a_registered_engine_that_cannot_be_copied_means_the_builtin_with_a_warning(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, _ = model
    write_plugin(
        home / "plugins",
        "locky",
        """
        import threading
        from agent.context_engine import ContextEngine

        class Locky(ContextEngine):
            name = "locky"
            def __init__(self):
                self.lock = threading.Lock()  # no __deepcopy__: a session cannot get a copy
            def update_from_response(self, usage): pass
            def should_compress(self, prompt_tokens=None): return False
            def compress(self, messages, current_tokens=None): return messages

        def register(ctx):
            ctx.register_context_engine(Locky())
        """,
    )
    daemon = _start(home, _config(server.url, "context:\n  engine: locky\n"))
    try:
        c = daemon.client()
        c.call("plugins.list")  # plugins load in the background: wait for them
        sid = c.call("session.create", {})["id"]
        assert _turn(c, sid, "hello")[-1]["status"] == "completed"
        assert c.call("session.get", {"session_id": sid})["context"]["engine"] == "compressor"
        log = daemon.log()
        assert "Plugin 'locky' registered context engine: locky" in log
        assert "Context engine 'locky' could not be copied for a session" in log
        assert "__deepcopy__" in log
    finally:
        daemon.stop()


LIFECYCLE_ENGINE = """
import json, os
from agent.context_engine import ContextEngine

def _log(*call):
    with open(os.environ["HERMES_HOME"] + "/lifecycle.jsonl", "a") as f:
        f.write(json.dumps(call, default=str) + "\\n")

class Lifecycle(ContextEngine):
    name = "lifecycle"
    def update_from_response(self, usage): _log("update_from_response", sorted(usage))
    def should_compress(self, prompt_tokens=None): return False
    def compress(self, messages, current_tokens=None): return messages
    def update_model(self, model, context_length, **kwargs):
        _log("update_model", model, context_length)
    def on_session_start(self, session_id, **kwargs): _log("on_session_start", session_id)
    def on_session_reset(self): _log("on_session_reset")
    def on_session_end(self, session_id, messages):
        _log("on_session_end", session_id, len(messages))
"""


def test_an_engine_hears_of_its_sessions_start_reset_and_end(
    model: tuple[ScriptedModelServer, Model], home: Path
) -> None:
    server, _ = model
    folder = home / "plugins" / "context_engine" / "lifecycle"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(LIFECYCLE_ENGINE)
    daemon = _start(home, _config(server.url, "context:\n  engine: lifecycle\n"))
    log = home / "lifecycle.jsonl"

    def calls() -> list[list[Any]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def wait_for(name: str) -> list[Any]:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            found = [call for call in calls() if call[0] == name]
            if found:
                return found[-1]
            time.sleep(0.05)
        raise AssertionError(f"{name} never called: {calls()}")

    try:
        c = daemon.client()
        first = c.call("session.create", {})["id"]
        _turn(c, first, "hello there")
        names = [call[0] for call in calls()]
        assert names.index("update_model") < names.index("on_session_start")
        assert wait_for("on_session_start") == ["on_session_start", first]
        assert "prompt_tokens" in wait_for("update_from_response")[1]
        c.call("session.reset", {"session_id": first})  # /new
        wait_for("on_session_reset")
        second = c.call("session.create", {})["id"]
        _turn(c, second, "again")
        c.call("session.delete", {"session_id": second})
        assert wait_for("on_session_end")[:2] == ["on_session_end", second]
    finally:
        daemon.stop()


def _check_config(text: str) -> subprocess.CompletedProcess[str]:
    home = short_tmpdir()
    (home / "config.yaml").write_text(text + "\n")
    return subprocess.run(
        [sys.executable, "-m", "hermesd", "--check-config"],
        env=daemon_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("compression: {threshold: 7}", "'compression.threshold' must be a share of the window"),
        ("compression: {target_ratio: 0}", "'compression.target_ratio' must be a share"),
        ("compression: {protect_last_n: -3}", "'compression.protect_last_n' must not be negative"),
        ("compression: {enabled: maybe}", "'compression.enabled' must be a boolean"),
        ("context: {engine: 42}", "'context.engine' must be a string"),
        ("model: {context_length: big}", "'model.context_length' must be an integer"),
        (
            "auxiliary: {compression: {base_url: 'ftp://x'}}",
            "'auxiliary.compression' base_url must be an absolute http(s) URL",
        ),
        ("auxiliary: {compression: {model: 5}}", "'auxiliary.compression' model must be a string"),
    ],
)
def test_bad_compression_settings_are_refused_by_check_config(text: str, problem: str) -> None:
    out = _check_config(text)
    assert out.returncode == 78, out
    assert problem in out.stderr


def test_the_references_summary_model_settings_are_accepted() -> None:
    out = _check_config(
        "auxiliary:\n  compression:\n    provider: auto\n    model: ''\n    base_url: ''\n"
        "    api_key: ''\n    timeout: 120\n    extra_body: {}\n    reasoning_effort: ''\n"
    )
    assert out.returncode == 0, out.stderr
