"""The chat REPL as people use it every day, on a real pseudo-terminal against a real hermesd:
pastes, recalled messages, approvals answered elsewhere, daemon restarts, and the everyday
slash commands (/retry, /undo, /history, /resume, /usage, /version, /config)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import DaemonProcess, send_and_follow, short_tmpdir, start_daemon
from tests.support.modelserver import (
    ScriptedModelServer,
    calculator_rules,
    call_tools,
    model_config,
    reply,
    tool_call,
)
from tests.support.terminal import Terminal

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
UP = "\x1b[A"


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=calculator_rules) as server:
        yield server


@pytest.fixture(scope="module")
def chatd(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    daemon = start_daemon(
        short_tmpdir(),
        config=model_config(model.url, timeout=5, max_retries=1, retry_max_wait=0.05)
        + "approvals:\n  timeout: 60\n",
    )
    yield daemon
    daemon.stop()


def open_terminal(socket: Path, home: Path, *args: str) -> Terminal:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(home), TERM="xterm")
    return Terminal(
        [sys.executable, "-m", "hermesctl", "--socket", str(socket), "chat", *args], env
    )


@pytest.fixture
def repl(chatd: DaemonProcess) -> Iterator[Callable[..., Terminal]]:
    terminals: list[Terminal] = []

    def open_repl(*args: str) -> Terminal:
        t = open_terminal(chatd.socket, chatd.home, *args)
        terminals.append(t)
        return t

    yield open_repl
    for t in terminals:
        t.close()


def ready(t: Terminal) -> None:
    """The prompt is up and hermesctl waits for keys."""
    t.expect("› ")
    t.wait_reading()


def user_messages(d: DaemonProcess, sid: str) -> list[tuple[str, bool]]:
    history = d.call("session.history", {"session_id": sid})["messages"]
    return [(m["content"], m["undone"]) for m in history if m["role"] == "user"]


def sent_user_contents(model: ScriptedModelServer, since: int) -> list[list[str]]:
    """For each model request since ``since``: the user messages it carried."""
    return [
        [m["content"] for m in r["messages"] if m["role"] == "user"] for r in model.requests[since:]
    ]


# --- 1. pastes and recalled messages ------------------------------------------------------


def test_a_multi_line_paste_is_one_message(
    repl: Callable[..., Terminal], model: ScriptedModelServer, chatd: DaemonProcess
) -> None:
    t = repl()
    sid = t.expect(r"session (\S+)").group(1)
    ready(t)
    before = len(model.requests)
    t.send(PASTE_START + "line one\rline two\rline three\rline four" + PASTE_END + "\r")
    t.expect("You said: line one\nline two\nline three\nline four")
    ready(t)
    t.sendline("/quit")
    assert t.wait() == 0
    assert len(model.requests) == before + 1
    assert user_messages(chatd, sid) == [("line one\nline two\nline three\nline four", False)]


def test_a_recalled_multi_line_message_comes_back_whole_in_this_run_and_the_next(
    repl: Callable[..., Terminal], chatd: DaemonProcess
) -> None:
    pasted = "first pasted line\nsecond pasted line"
    t = repl()
    sid = t.expect(r"session (\S+)").group(1)
    ready(t)
    t.send(PASTE_START + pasted.replace("\n", "\r") + PASTE_END + "\r")
    t.expect("You said: first pasted line\nsecond pasted line")
    ready(t)
    t.send(UP + "\r")
    t.expect("You said: first pasted line\nsecond pasted line")
    ready(t)
    t.sendline("/quit")
    assert t.wait() == 0
    assert user_messages(chatd, sid) == [(pasted, False), (pasted, False)]

    again = repl()
    second = again.expect(r"session (\S+)").group(1)
    ready(again)
    again.send(UP + UP + "\r")  # past "/quit"
    again.expect("You said: first pasted line\nsecond pasted line")
    ready(again)
    again.sendline("/quit")
    assert again.wait() == 0
    assert user_messages(chatd, second) == [(pasted, False)]


def test_a_triple_quoted_message_is_recalled_as_one_message(
    repl: Callable[..., Terminal], chatd: DaemonProcess
) -> None:
    t = repl()
    sid = t.expect(r"session (\S+)").group(1)
    ready(t)
    for line in ('"""', "alpha", "beta", '"""'):
        t.sendline(line)
    t.expect("You said: alpha\nbeta")
    ready(t)
    t.send(UP + "\r")
    t.expect("You said: alpha\nbeta")
    ready(t)
    t.sendline("/quit")
    assert t.wait() == 0
    assert user_messages(chatd, sid) == [("alpha\nbeta", False), ("alpha\nbeta", False)]


# --- 2. an approval answered elsewhere -----------------------------------------------------


def test_an_approval_answered_elsewhere_closes_the_prompt_and_keeps_what_was_typed(
    repl: Callable[..., Terminal], model: ScriptedModelServer, chatd: DaemonProcess
) -> None:
    workspace = chatd.home / "workspace"  # the sandbox lets a command delete only there
    workspace.mkdir(exist_ok=True)
    victim = Path(tempfile.mkdtemp(prefix="victim-", dir=workspace))
    t = repl()
    sid = t.expect(r"session (\S+)").group(1)
    ready(t)
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {victim}"})))
    t.sendline("clean up")
    t.expect(r"Choice \[o/s/a/D\]: ")
    t.wait_reading()
    t.send("half typed")
    t.expect("half typed")
    [pending] = chatd.call("approvals.pending", {"session_id": sid})["pending"]
    chatd.call("approvals.respond", {"id": pending["id"], "choice": "once"})
    t.expect(r"✓ Allowed once by \S+ \(uid \d+\), answered elsewhere")
    t.expect(r"⚙ terminal\(command='rm -r .*'\) ✓")
    t.expect("› half typed")
    t.wait_reading()
    t.send(" and finished\r")
    t.expect("You said: half typed and finished")
    ready(t)
    t.sendline("/quit")
    assert t.wait() == 0
    assert not victim.exists()
    assert ("half typed and finished", False) in user_messages(chatd, sid)
    assert "✗ Denied" not in t.text


@pytest.mark.parametrize("editor", ["toolbar", "plain"])
def test_an_idle_chat_shows_an_approval_raised_elsewhere_at_once_and_keeps_what_was_typed(
    repl: Callable[..., Terminal], model: ScriptedModelServer, chatd: DaemonProcess, editor: str
) -> None:
    workspace = chatd.home / "workspace"
    workspace.mkdir(exist_ok=True)
    victim = Path(tempfile.mkdtemp(prefix="victim-", dir=workspace))
    t = repl(*(["--plain"] if editor == "plain" else []))
    sid = t.expect(r"session (\S+)").group(1)
    ready(t)
    t.send("half typed")
    t.expect("half typed")
    t.wait_reading()
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {victim}"})))
    chatd.call("session.send", {"session_id": sid, "message": "from elsewhere"})  # not this chat
    t.expect("another client started a turn: from elsewhere", timeout=30)
    t.expect(r"Choice \[o/s/a/D\]: ")  # no key was pressed
    t.wait_reading()
    t.sendline("o")
    t.expect("Allowed once")
    t.expect("from that turn:")
    t.expect(r"› half typed")
    t.wait_reading()
    t.send(" and finished\r")
    t.expect("You said: half typed and finished")
    ready(t)
    t.sendline("/quit")
    assert t.wait() == 0
    assert not victim.exists()
    assert ("half typed and finished", False) in user_messages(chatd, sid)


def test_an_idle_chat_asks_the_models_question_from_a_turn_started_elsewhere(
    repl: Callable[..., Terminal], model: ScriptedModelServer, chatd: DaemonProcess
) -> None:
    question = {"question": "Which environment?", "choices": ["staging", "prod"]}
    model.push(call_tools(tool_call("clarify", question)), reply("deploying to prod"))
    t = repl("--plain")
    sid = t.expect(r"session (\S+)").group(1)
    ready(t)
    chatd.call("session.send", {"session_id": sid, "message": "deploy"})
    t.expect("Which environment?", timeout=30)
    t.expect(r"Choice \[1-3, or type an answer\]: ")
    t.wait_reading()
    t.sendline("2")
    t.expect("from that turn:")
    t.expect("deploying to prod")
    ready(t)
    t.sendline("/quit")
    assert t.wait() == 0


# --- 3. a daemon restart ---------------------------------------------------------------------


@pytest.fixture
def restartable(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> Callable[[], DaemonProcess]:
    home = short_tmpdir()
    socket = short_tmpdir("run-") / "hermesd.sock"
    config = model_config(model.url, timeout=5, max_retries=1, retry_max_wait=0.05)

    def again() -> DaemonProcess:
        return start(home, config=config, socket_path=socket)

    return again


def test_the_repl_reconnects_after_a_daemon_restart_and_the_next_message_goes_through(
    restartable: Callable[[], DaemonProcess], model: ScriptedModelServer
) -> None:
    first = restartable()
    t = open_terminal(first.socket, first.home)
    try:
        sid = t.expect(r"session (\S+)").group(1)
        ready(t)
        t.sendline("before the restart")
        t.expect("You said: before the restart")
        ready(t)
        first.stop()
        second = restartable()
        t.sendline("after the restart")
        t.expect("lost the connection to hermesd; reconnecting")
        t.expect(rf"reconnected to hermesd .*\(session {sid}\)")
        t.expect("You said: after the restart")
        ready(t)
        t.sendline("/quit")
        assert t.wait() == 0
    finally:
        t.close()
    assert user_messages(second, sid) == [
        ("before the restart", False),
        ("after the restart", False),
    ]


def test_a_message_whose_turn_a_restart_cut_is_not_sent_again(
    restartable: Callable[[], DaemonProcess], model: ScriptedModelServer
) -> None:
    first = restartable()
    t = open_terminal(first.socket, first.home)
    try:
        sid = t.expect(r"session (\S+)").group(1)
        ready(t)
        before = len(model.requests)
        model.push(reply("slow words " * 200, chunk_delay=0.05, chunk_chars=6))
        t.sendline("tell me a long story")
        t.expect("slow words")
        first.stop()
        t.expect("lost the connection to hermesd; reconnecting")
        second = restartable()
        t.expect(rf"reconnected to hermesd .*\(session {sid}\)")
        t.expect("the turn did not finish: hermesd restarted while it ran")
        ready(t)
        t.sendline("/quit")
        assert t.wait() == 0
    finally:
        t.close()
    assert user_messages(second, sid) == [("tell me a long story", False)]
    asked = [users for users in sent_user_contents(model, before) if users]
    assert asked == [["tell me a long story"]]


def test_attach_with_after_seq_replays_the_missed_events_and_names_who_else_is_attached(
    chatd: DaemonProcess,
) -> None:
    with chatd.client() as a, chatd.client() as b:
        sid = a.call("session.create")["id"]
        events = send_and_follow(a, sid, "replay me")
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        attached: dict[str, Any] = b.call(
            "session.attach", {"session_id": sid, "after_seq": seqs[0]}
        )
        assert [e["seq"] for e in attached["missed"]] == seqs[1:]
        assert attached["missed"][-1]["type"] == "turn.finished"
        assert attached["missed_complete"] is True
        assert attached["event_seq"] == seqs[-1]
        assert [c["client"] for c in attached["clients"]] == ["hermesctl"]
        assert attached["clients"][0]["pid"] == os.getpid()


def test_attach_after_a_restart_says_the_earlier_events_are_not_in_memory(
    restartable: Callable[[], DaemonProcess],
) -> None:
    first = restartable()
    with first.client() as c:
        sid = c.call("session.create")["id"]
        last = send_and_follow(c, sid, "before")[-1]["seq"]
    first.stop()
    second = restartable()
    with second.client() as c:
        attached = c.call("session.attach", {"session_id": sid, "after_seq": last})
        assert attached["missed"] == [] and attached["missed_complete"] is False
        later = send_and_follow(c, sid, "after")
    assert later[0]["seq"] > last


# --- 5. everyday chat commands ----------------------------------------------------------------


def test_undo_takes_the_last_turn_out_of_what_the_model_is_sent_and_keeps_the_record(
    repl: Callable[..., Terminal], model: ScriptedModelServer, chatd: DaemonProcess
) -> None:
    t = repl()
    sid = t.expect(r"session (\S+)").group(1)
    ready(t)
    t.sendline("remember apples")
    t.expect("You said: remember apples")
    ready(t)
    t.sendline("/undo")
    t.expect(r"Undone: 'remember apples' and its answer \(2 messages kept in the record")
    ready(t)
    before = len(model.requests)
    t.sendline("what now")
    t.expect("You said: what now")
    ready(t)
    t.sendline("/quit")
    assert t.wait() == 0
    assert sent_user_contents(model, before) == [["what now"]]
    assert user_messages(chatd, sid) == [("remember apples", True), ("what now", False)]


def test_retry_sends_the_last_message_again_in_place_of_its_answer(
    repl: Callable[..., Terminal], model: ScriptedModelServer, chatd: DaemonProcess
) -> None:
    t = repl()
    sid = t.expect(r"session (\S+)").group(1)
    ready(t)
    t.sendline("say it twice")
    t.expect("You said: say it twice")
    ready(t)
    before = len(model.requests)
    t.sendline("/retry")
    t.expect("Retrying: say it twice")
    t.expect("You said: say it twice")
    ready(t)
    t.sendline("/quit")
    assert t.wait() == 0
    assert sent_user_contents(model, before) == [["say it twice"]]
    assert user_messages(chatd, sid) == [("say it twice", True), ("say it twice", False)]


def test_history_lists_the_sessions_messages_with_their_ids(
    repl: Callable[..., Terminal], chatd: DaemonProcess
) -> None:
    t = repl()
    sid = t.expect(r"session (\S+)").group(1)
    ready(t)
    t.sendline("a line for the history")
    t.expect("You said: a line for the history")
    ready(t)
    t.sendline("/history")
    ids = [m["id"] for m in chatd.call("session.history", {"session_id": sid})["messages"]]
    t.expect(rf"#{ids[0]} \[user\] a line for the history")
    t.expect(rf"#{ids[1]} \[assistant\] You said: a line for the history")
    t.sendline("/quit")
    assert t.wait() == 0


def test_resume_switches_to_the_session_a_prefix_names(
    repl: Callable[..., Terminal], chatd: DaemonProcess
) -> None:
    other = chatd.call("session.create")["id"]
    with chatd.client() as c:
        send_and_follow(c, other, "the other conversation")
    t = repl()
    t.expect(r"session (\S+)")
    ready(t)
    t.sendline(f"/resume {other[:-1]}")
    t.expect(rf"Resumed session {other} “the other conversation” \(2 messages\)")
    ready(t)
    t.sendline("continuing there")
    t.expect("You said: continuing there")
    ready(t)
    t.sendline("/quit")
    assert t.wait() == 0
    assert [m for m, _ in user_messages(chatd, other)] == [
        "the other conversation",
        "continuing there",
    ]


def test_usage_version_and_config_answer_in_the_repl(repl: Callable[..., Terminal]) -> None:
    t = repl()
    t.expect(r"session (\S+)")
    ready(t)
    t.sendline("count my tokens")
    t.expect("You said: count my tokens")
    ready(t)
    t.sendline("/usage")
    t.expect(r"Session \S+ \(model scripted-model\): 1 request . \d+ tokens \(\d+ in, \d+ out\)")
    t.expect(r"cost unknown")  # the scripted model has no price
    t.expect(r"Today: \d+ requests? . ")
    t.sendline("/version")
    t.expect(r"hermesd \d+\.\d+\.\d+ \(protocol ")
    t.expect(r"hermesctl \d+\.\d+\.\d+")
    t.sendline("/config model")
    t.expect(r"model\.base_url\s+\"http://127\.0\.0\.1:\d+/v1\"")
    t.expect(r"model\.api_key\s+(null|\"\[hidden\]\")")
    t.expect("read-only")
    t.sendline("/quit")
    assert t.wait() == 0


def test_ctrl_c_while_reconnecting_keeps_the_message_for_when_hermesd_is_back(
    restartable: Callable[[], DaemonProcess], model: ScriptedModelServer
) -> None:
    first = restartable()
    t = open_terminal(first.socket, first.home)
    try:
        sid = t.expect(r"session (\S+)").group(1)
        ready(t)
        first.stop()
        t.sendline("written while it was down")
        t.expect(r"reconnecting… \(Ctrl-C stops trying\)")
        t.send("\x03")
        t.expect("your message is back at the prompt")
        t.expect("› written while it was down")
        t.wait_reading()
        second = restartable()
        t.send("\r")
        t.expect(rf"reconnected to hermesd .*\(session {sid}\)")
        t.expect("You said: written while it was down")
        ready(t)
        t.sendline("/quit")
        assert t.wait() == 0
    finally:
        t.close()
    assert user_messages(second, sid) == [("written while it was down", False)]


def test_resume_recaps_the_last_exchange(
    repl: Callable[..., Terminal], chatd: DaemonProcess
) -> None:
    other = chatd.call("session.create")["id"]
    with chatd.client() as c:
        send_and_follow(c, other, "where were we")
    t = repl()
    t.expect(r"session (\S+)")
    ready(t)
    t.sendline(f"/resume {other}")
    t.expect("last exchange:")
    t.expect(r"\[user\] where were we")
    t.expect(r"\[assistant\] You said: where were we")
    ready(t)
    t.sendline("/quit")
    assert t.wait() == 0


def test_the_status_line_counts_approvals_waiting_in_another_session(
    repl: Callable[..., Terminal], chatd: DaemonProcess
) -> None:
    from tests.support.approvals import Background, client_answering, terminal, wait_pending

    workspace = chatd.home / "workspace"
    workspace.mkdir(exist_ok=True)
    victim = Path(tempfile.mkdtemp(prefix="victim-", dir=workspace))
    other = chatd.call("session.create")["id"]
    caller, _ = client_answering(chatd, None)
    with caller:
        running = Background(terminal, caller, f"rm -r {victim}", other)
        [pending] = wait_pending(chatd)
        t = repl("--plain")  # the status line printed under the answer (else: the toolbar)
        t.expect(r"session (\S+)")
        ready(t)
        t.sendline("anything waiting?")
        t.expect("You said: anything waiting?")
        t.expect(r"· 1 approval pending \(hermesctl approvals\)")
        ready(t)
        chatd.call("approvals.respond", {"id": pending["id"], "choice": "deny"})
        running.result()
        t.sendline("/quit")
        assert t.wait() == 0
    assert victim.exists()
