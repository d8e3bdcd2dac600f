"""The ``clarify`` tool on a real daemon: the scripted model asks the person a question, which is
pending like an approval: answered by a second client's reply or ``clarify.respond``, asked of a
client that attaches later, answered at ``hermesctl chat``'s prompt on a terminal (a number, or
text of one's own), closed there when someone answers elsewhere, and answered with the
reference's fallback when no one can be asked."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hermesctl.client import Client
from hermesd.rpc.protocol import Codes, RpcError
from tests.support.approvals import Background
from tests.support.daemon import (
    DaemonProcess,
    follow_turn,
    run_hermesctl,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)
from tests.support.terminal import Terminal

QUESTION = {"question": "Which target?", "choices": ["staging", "prod", "qa"]}


@pytest.fixture(scope="module")
def daemon(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    process = start_daemon(
        short_tmpdir("clq-"),
        config=model_config(model.url) + "clarify:\n  unattended_after: 600\n",
    )
    yield process
    process.stop()


def _ask(model: ScriptedModelServer, args: dict[str, Any] | str = QUESTION) -> None:
    model.push(call_tools(tool_call("clarify", args)), reply("noted"))


def _tool_result(model: ScriptedModelServer, seen: int) -> Any:
    """The clarify result the model was sent in the request after the question."""
    last = model.requests[seen:][-1]
    return json.loads([m["content"] for m in last["messages"] if m["role"] == "tool"][-1])


def _start_turn(daemon: DaemonProcess, sid: str | None = None) -> tuple[Client, str, str]:
    """A client (answering nothing) that created a session and sent a message in it."""
    client = daemon.client()
    if sid is None:
        sid = client.call("session.create")["id"]
    turn = client.call("session.send", {"session_id": sid, "message": "deploy it"})["turn_id"]
    return client, sid, turn


def _wait_question(daemon: DaemonProcess, sid: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        pending = daemon.call("clarify.pending", {"session_id": sid})["pending"]
        if pending:
            return dict(pending[0])
        time.sleep(0.02)
    raise AssertionError("no question became pending")


class Answers:
    """An ``on_request`` answering ``clarify.request`` with ``reply``, recording each."""

    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply = reply
        self.asked: list[dict[str, Any]] = []

    def __call__(self, method: str, params: list[Any]) -> Any:
        assert method == "clarify.request"
        self.asked.append(params[0])
        return self.reply


def test_a_second_client_answers_with_a_choice(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    seen = len(model.requests)
    _ask(model)
    sender = daemon.client()
    sid = sender.call("session.create")["id"]
    second = daemon.client()
    answers = Answers({"choice": 2})
    second.on_request = answers
    second.call("session.attach", {"session_id": sid})
    turn = sender.call("session.send", {"session_id": sid, "message": "deploy it"})["turn_id"]
    listening = Background(follow_turn, second, turn)
    events = follow_turn(sender, turn)
    listening.result()
    assert events[-1]["status"] == "completed"
    assert answers.asked[0]["question"] == "Which target?"
    assert answers.asked[0]["choices"] == ["staging", "prod", "qa"]
    assert _tool_result(model, seen) == {
        "question": "Which target?",
        "choices_offered": ["staging", "prod", "qa"],
        "user_response": "prod",
    }
    assert daemon.call("clarify.pending", {"session_id": sid})["pending"] == []


def test_clarify_respond_answers_with_text_of_ones_own(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    seen = len(model.requests)
    _ask(model)
    sender, sid, turn = _start_turn(daemon)
    question = _wait_question(daemon, sid)
    assert question["choices"] == ["staging", "prod", "qa"]
    with daemon.client() as other:
        answered = other.call(
            "clarify.respond",
            {"session_id": sid, "id": question["id"], "response": "  canary first  "},
        )
    assert answered == {"id": question["id"], "response": "canary first"}
    assert follow_turn(sender, turn)[-1]["status"] == "completed"
    assert _tool_result(model, seen)["user_response"] == "canary first"


def test_a_client_attaching_later_is_asked_the_open_question(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    seen = len(model.requests)
    _ask(model, {"question": "Name the release?"})
    sender, sid, turn = _start_turn(daemon)
    _wait_question(daemon, sid)
    late = daemon.client()
    answers = Answers({"response": "v2.1"})
    late.on_request = answers
    late.call("session.attach", {"session_id": sid})
    listening = Background(follow_turn, late, turn)
    assert follow_turn(sender, turn)[-1]["status"] == "completed"
    listening.result()
    assert answers.asked[0]["question"] == "Name the release?"
    assert answers.asked[0]["choices"] == []
    result = _tool_result(model, seen)
    assert result == {
        "question": "Name the release?",
        "choices_offered": None,
        "user_response": "v2.1",
    }


def test_bad_answers_are_refused_and_the_question_stays_open(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    _ask(model)
    sender, sid, turn = _start_turn(daemon)
    question = _wait_question(daemon, sid)
    other_sid = daemon.call("session.create", {"attach": False})["id"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"session_id": sid, "id": question["id"], "choice": 4}, Codes.INVALID_PARAMS),
        ({"session_id": sid, "id": question["id"], "response": "   "}, Codes.INVALID_PARAMS),
        ({"session_id": sid, "id": question["id"]}, Codes.INVALID_PARAMS),
        ({"session_id": sid, "id": question["id"], "choice": "2"}, Codes.INVALID_PARAMS),
        ({"session_id": other_sid, "id": question["id"], "choice": 1}, Codes.NOT_FOUND),
        ({"session_id": sid, "id": "clq_nope", "choice": 1}, Codes.NOT_FOUND),
    ]
    with daemon.client() as other:
        for params, code in cases:
            with pytest.raises(RpcError) as caught:
                other.call("clarify.respond", params)
            assert caught.value.code == code, (params, caught.value)
        assert (
            other.call("clarify.pending", {"session_id": sid})["pending"][0]["id"] == question["id"]
        )
        other.call("clarify.respond", {"session_id": sid, "id": question["id"], "choice": 1})
    assert follow_turn(sender, turn)[-1]["status"] == "completed"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({}, "Question text is required"),
        ({"question": 42}, "Question text is required"),
        ({"question": "Which?", "choices": "a, b"}, "choices must be a list"),
        ({"question": "x" * 5000}, "the limit is 4000"),
        ({"question": "Which?", "choices": ["y" * 600]}, "the limit is 500"),
        ("not json at all", "arguments"),
    ],
)
def test_bad_questions_get_an_error_and_ask_no_one(
    model: ScriptedModelServer, daemon: DaemonProcess, args: Any, error: str
) -> None:
    seen = len(model.requests)
    _ask(model, args)
    sender, _sid, turn = _start_turn(daemon)
    assert follow_turn(sender, turn)[-1]["status"] == "completed"
    assert error in _tool_result(model, seen)["error"]


def test_choices_sent_as_objects_are_shown_by_their_label(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    seen = len(model.requests)
    choices = [{"label": "fast"}, {"description": "safe"}, {"name": "dropped"}, "  slow ", "", 5]
    _ask(model, {"question": "How?", "choices": choices})
    sender, sid, turn = _start_turn(daemon)
    question = _wait_question(daemon, sid)
    assert question["choices"] == ["fast", "safe", "slow", "5"]  # at most 4, labels unwrapped
    daemon.call("clarify.respond", {"session_id": sid, "id": question["id"], "choice": 4})
    assert follow_turn(sender, turn)[-1]["status"] == "completed"
    assert _tool_result(model, seen)["user_response"] == "5"


# --- nobody to ask ---------------------------------------------------------------------------


def test_with_no_one_attached_the_model_is_told_to_decide(
    model: ScriptedModelServer, start: Any
) -> None:
    d = start(
        short_tmpdir("clq-"), config=model_config(model.url) + "clarify:\n  unattended_after: 0.5\n"
    )
    seen = len(model.requests)
    _ask(model)
    with d.client() as c:
        sid = c.call("session.create", {"attach": False})["id"]
        finished = c.call("session.send", {"session_id": sid, "message": "go", "wait": True})
    assert finished["status"] == "completed"
    result = _tool_result(model, seen)
    assert result["question"] == "Which target?"
    assert result["user_response"].startswith("No one could be asked")
    assert "Decide for yourself" in result["user_response"]
    assert "clarify in session" in d.log() and "unattended" in d.log()


def test_a_one_shot_chat_without_a_terminal_lets_the_model_decide_at_once(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    seen = len(model.requests)
    _ask(model)
    # this daemon waits 600 s for someone to attach: the answer comes from the client's reply
    done = run_hermesctl(["--socket", str(daemon.socket), "chat", "-m", "deploy it"], input="")
    assert done.returncode == 0, done.stderr
    assert _tool_result(model, seen)["user_response"].startswith("No one could be asked")


def test_a_question_times_out_into_the_fallback(model: ScriptedModelServer, start: Any) -> None:
    d = start(
        short_tmpdir("clq-"),
        config=model_config(model.url) + "clarify:\n  timeout: 1\n  unattended_after: 60\n",
    )
    seen = len(model.requests)
    _ask(model)
    keeper = d.client()
    keeper.on_request = lambda method, params: time.sleep(5) or {"choice": 1}
    sid = keeper.call("session.create")["id"]
    turn = keeper.call("session.send", {"session_id": sid, "message": "go"})["turn_id"]
    assert follow_turn(keeper, turn, timeout=30)[-1]["status"] == "completed"
    assert _tool_result(model, seen)["user_response"].startswith("The user did not answer in time")


# --- hermesctl chat on a terminal ------------------------------------------------------------


def _chat(daemon: DaemonProcess, *args: str) -> Terminal:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(daemon.home), TERM="xterm")
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket), "chat", *args]
    return Terminal(argv, env)


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for t in opened:
        t.close()


def test_chat_shows_numbered_choices_and_takes_a_number(
    model: ScriptedModelServer, daemon: DaemonProcess, terminals: list[Terminal]
) -> None:
    seen = len(model.requests)
    _ask(model)
    t = _chat(daemon)
    terminals.append(t)
    t.expect("› ")
    t.wait_reading()
    t.sendline("deploy it")
    t.expect("❓ Which target?")
    t.expect(r"1\. staging\s+2\. prod\s+3\. qa\s+4\. Other \(type your answer\)")
    t.expect(r"Choice \[1-4, or type an answer\]: ")
    t.wait_reading()
    t.sendline("3")
    t.expect("✓ qa")
    t.expect("noted")
    t.expect("› ")
    t.sendline("/quit")
    assert t.wait() == 0
    assert _tool_result(model, seen)["user_response"] == "qa"


def test_chat_takes_an_answer_of_ones_own_after_other(
    model: ScriptedModelServer, daemon: DaemonProcess, terminals: list[Terminal]
) -> None:
    seen = len(model.requests)
    _ask(model)
    t = _chat(daemon, "-m", "deploy it")
    terminals.append(t)
    t.expect(r"Choice \[1-4, or type an answer\]: ")
    t.wait_reading()
    t.sendline("4")
    t.expect(r"Your answer \[type your answer\]: ")
    t.wait_reading()
    t.sendline("both, staging first")
    t.expect("noted")
    assert t.wait() == 0
    assert _tool_result(model, seen)["user_response"] == "both, staging first"


def test_an_answer_given_elsewhere_closes_the_chat_prompt(
    model: ScriptedModelServer, daemon: DaemonProcess, terminals: list[Terminal]
) -> None:
    seen = len(model.requests)
    _ask(model)
    t = _chat(daemon)
    terminals.append(t)
    sid = t.expect(r"session (\S+)").group(1)
    t.expect("› ")
    t.wait_reading()
    t.sendline("deploy it")
    t.expect(r"Choice \[1-4, or type an answer\]: ")
    t.wait_reading()
    question = _wait_question(daemon, sid)
    daemon.call("clarify.respond", {"session_id": sid, "id": question["id"], "choice": 1})
    t.expect(r"⊘ Question answered elsewhere \(uid \d+\)")
    t.expect("noted")
    t.expect("› ")
    t.sendline("/quit")
    assert t.wait() == 0
    assert _tool_result(model, seen)["user_response"] == "staging"


def test_the_clarify_toolset_can_be_turned_off(model: ScriptedModelServer, start: Any) -> None:
    d = start(
        short_tmpdir("clq-"),
        config=model_config(model.url) + "tools:\n  enabled_toolsets: [todo]\n",
    )
    seen = len(model.requests)
    model.push(reply("hi"))
    with d.client() as c:
        sid = c.call("session.create", {"attach": False})["id"]
        c.call("session.send", {"session_id": sid, "message": "go", "wait": True})
    names = [t["function"]["name"] for t in model.requests[seen]["tools"]]
    assert "clarify" not in names and "todo" in names


def test_a_question_open_when_the_daemon_stops_gets_the_fallback(
    model: ScriptedModelServer, start: Any
) -> None:
    home = short_tmpdir("clq-")
    config = model_config(model.url) + "clarify:\n  unattended_after: 600\n"
    d = start(home, config=config)
    _ask(model)
    sender, sid, _turn = _start_turn(d)
    _wait_question(d, sid)
    sender.close()
    d.stop()
    again = start(home, config=config)
    history = again.call("session.history", {"session_id": sid})["messages"]
    [result] = [json.loads(m["content"]) for m in history if m["role"] == "tool"]
    assert result["question"] == "Which target?"
    assert result["user_response"].startswith("hermesd stopped before the user answered")


def test_a_secret_in_the_question_is_hidden_from_the_person(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    secret = "ghp_abcdefghijklmnopqrstuvwx12"
    _ask(model, {"question": f"Use token {secret}?", "choices": [f"yes, {secret}", "no"]})
    sender, sid, turn = _start_turn(daemon)
    question = _wait_question(daemon, sid)
    assert secret not in json.dumps(question)
    assert "REDACTED" in question["question"]
    daemon.call("clarify.respond", {"session_id": sid, "id": question["id"], "choice": 2})
    assert follow_turn(sender, turn)[-1]["status"] == "completed"
