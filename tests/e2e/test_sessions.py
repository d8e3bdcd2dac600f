"""`hermesctl sessions …` and the session.* methods end to end, over a real hermesd's socket.

One daemon for the module (sessions are made per test through real turns against the scripted
model, so titles, messages and search hits are real); tests that count sessions start their own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, calculator_rules, model_config


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=calculator_rules) as server:
        yield server


@pytest.fixture(scope="module")
def d(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    daemon = start_daemon(short_tmpdir(), config=model_config(model.url))
    yield daemon
    daemon.stop()


def hermesctl(d: DaemonProcess, *args: str) -> Any:
    return run_hermesctl(
        ["--socket", str(d.socket), *args], env={"HERMES_HOME": str(d.home)}, input=""
    )


def chat(d: DaemonProcess, message: str) -> str:
    """Run a one-shot chat turn in a new session; return the session id."""
    result = hermesctl(d, "chat", "--json", "-m", message)
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout.splitlines()[0])["session_id"])


@pytest.fixture(scope="module")
def calc_session(d: DaemonProcess) -> str:
    return chat(d, "What is 19 * 21?")


def test_list_json_is_an_array_of_sessions_with_id_and_title(
    d: DaemonProcess, calc_session: str
) -> None:
    result = hermesctl(d, "sessions", "list", "--json")
    assert result.returncode == 0
    sessions = json.loads(result.stdout)
    assert isinstance(sessions, list)
    mine = next(s for s in sessions if s["id"] == calc_session)
    assert mine["title"] == "What is 19 * 21?" and mine["message_count"] == 4


def test_list_for_people_shows_id_count_and_title(d: DaemonProcess, calc_session: str) -> None:
    out = hermesctl(d, "sessions", "list").stdout
    line = next(x for x in out.splitlines() if x.startswith(calc_session))
    assert " 4 " in line and " idle " in line and line.endswith("What is 19 * 21?")


def test_list_pages_newest_first_with_a_cursor(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    fresh = start(config=model_config(model.url))
    ids = [fresh.call("session.create", {"title": f"s{i}"})["id"] for i in range(5)]
    first = fresh.call("session.list", {"limit": 2})
    assert [s["id"] for s in first["sessions"]] == ids[::-1][:2]
    second = fresh.call("session.list", {"limit": 2, "before": first["next_cursor"]})
    assert [s["id"] for s in second["sessions"]] == ids[::-1][2:4]
    out = run_hermesctl(
        ["--socket", str(fresh.socket), "sessions", "list", "-n", "2"], input=""
    ).stdout
    assert "more: hermesctl sessions list --before" in out
    cursor = out.split("--before ")[1].strip()
    rest = run_hermesctl(
        ["--socket", str(fresh.socket), "--json", "sessions", "list", "--before", cursor], input=""
    ).stdout
    assert [s["id"] for s in json.loads(rest)] == ids[::-1][2:]


def test_show_prints_the_history_readably(d: DaemonProcess, calc_session: str) -> None:
    out = hermesctl(d, "sessions", "show", calc_session).stdout
    assert "[user] What is 19 * 21?" in out
    assert "[assistant] ⚙ calculate(expression='19 * 21')" in out
    assert '[tool calculate] {"expression": "19 * 21", "result": 399}' in out
    assert "[assistant] The result is:" in out


def test_show_of_an_unknown_session_fails_clearly(d: DaemonProcess) -> None:
    result = hermesctl(d, "sessions", "show", "20990101-000000-000000")
    assert result.returncode == 1
    assert "no session '20990101-000000-000000'" in result.stderr


def test_search_finds_words_with_snippets(d: DaemonProcess) -> None:
    sid = chat(d, "the quick zebrafish jumps")
    hits = json.loads(hermesctl(d, "--json", "sessions", "search", "zebrafish").stdout)
    assert {h["session_id"] for h in hits} == {sid}
    assert any("«zebrafish»" in h["snippet"] for h in hits)
    out = hermesctl(d, "sessions", "search", "zebrafish").stdout
    assert "«zebrafish»" in out and sid in out


def test_search_without_hits_says_so(d: DaemonProcess) -> None:
    assert "No messages match" in hermesctl(d, "sessions", "search", "xylophonic").stdout


def test_rename_sets_the_title(d: DaemonProcess) -> None:
    sid = chat(d, "name me")
    assert hermesctl(d, "sessions", "rename", sid, "Renamed chat").returncode == 0
    assert d.call("session.get", {"session_id": sid})["title"] == "Renamed chat"


def test_overlong_title_is_refused_and_the_old_one_kept(d: DaemonProcess) -> None:
    sid = chat(d, "keep my title")
    d.call("session.rename", {"session_id": sid, "title": "Short"})
    with pytest.raises(RpcError) as err:
        d.call("session.rename", {"session_id": sid, "title": "x" * 100_000})
    assert err.value.code == Codes.INVALID_PARAMS and "at most 200" in err.value.message
    with pytest.raises(RpcError) as err:
        d.call("command.run", {"line": "/title " + "y" * 500, "session_id": sid})
    assert "at most 200" in err.value.message
    assert d.call("session.get", {"session_id": sid})["title"] == "Short"


def test_delete_removes_the_session_and_its_messages(d: DaemonProcess) -> None:
    sid = chat(d, "delete me soon, platypus")
    result = hermesctl(d, "sessions", "delete", sid)
    assert result.returncode == 0 and "Deleted" in result.stdout
    with pytest.raises(RpcError) as err:
        d.call("session.get", {"session_id": sid})
    assert err.value.code == Codes.NOT_FOUND
    assert d.call("session.search", {"query": "platypus"})["hits"] == []
    with pytest.raises(RpcError) as err:  # it had run a turn: send must still look it up
        d.call("session.send", {"session_id": sid, "message": "are you gone?"})
    assert err.value.code == Codes.NOT_FOUND


def test_delete_of_an_unknown_session_exits_1(d: DaemonProcess) -> None:
    assert hermesctl(d, "sessions", "delete", "nope").returncode == 1


def test_fork_copies_up_to_a_message(d: DaemonProcess, calc_session: str) -> None:
    messages = d.call("session.history", {"session_id": calc_session})["messages"]
    result = hermesctl(
        d,
        "--json",
        "sessions",
        "fork",
        calc_session,
        "--upto",
        str(messages[0]["id"]),
        "--title",
        "just the question",
    )
    fork = json.loads(result.stdout)
    assert fork["parent_id"] == calc_session and fork["title"] == "just the question"
    copied = d.call("session.history", {"session_id": fork["id"]})["messages"]
    assert [m["content"] for m in copied] == ["What is 19 * 21?"]


def test_a_forked_session_continues_independently(d: DaemonProcess, calc_session: str) -> None:
    fork = json.loads(hermesctl(d, "--json", "sessions", "fork", calc_session).stdout)
    result = hermesctl(d, "chat", "--session", fork["id"], "-m", "What is 2 + 2?")
    assert result.returncode == 0
    assert len(d.call("session.history", {"session_id": fork["id"]})["messages"]) == 8
    assert len(d.call("session.history", {"session_id": calc_session})["messages"]) == 4


def test_export_json_has_the_session_and_every_message(d: DaemonProcess, calc_session: str) -> None:
    doc = json.loads(hermesctl(d, "sessions", "export", calc_session, "--format", "json").stdout)
    assert doc["session"]["id"] == calc_session and "running" not in doc["session"]
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert doc["messages"][1]["tool_calls"][0]["function"]["name"] == "calculate"


def test_export_markdown_is_a_readable_document(
    d: DaemonProcess, calc_session: str, tmp_path: Any
) -> None:
    target = tmp_path / "chat.md"
    result = hermesctl(
        d, "sessions", "export", calc_session, "--format", "markdown", "-o", str(target)
    )
    assert result.returncode == 0
    text = target.read_text()
    assert text.startswith("# What is 19 * 21?\n")
    assert "## User\n\nWhat is 19 * 21?" in text
    assert "Tool call `calculate`" in text and "### Tool result (calculate)" in text
    assert "## Assistant\n\nThe result is:" in text


def test_sessions_without_an_action_is_a_usage_error(d: DaemonProcess) -> None:
    result = hermesctl(d, "sessions")
    assert result.returncode == 2


def test_session_methods_reject_bad_params_and_keep_serving(d: DaemonProcess) -> None:
    with d.client() as c:
        with pytest.raises(RpcError) as err:
            c.call("session.list", {"limit": "many"})
        assert err.value.code == Codes.INVALID_PARAMS
        with pytest.raises(RpcError) as err:
            c.call("session.send", {"session_id": c.call("session.create")["id"], "message": "   "})
        assert err.value.code == Codes.INVALID_PARAMS
        assert c.call("session.list", {"limit": 1})["sessions"]
