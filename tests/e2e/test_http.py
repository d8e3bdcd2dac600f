"""The HTTP door end to end: the openai client, the session API, SSE replay, approvals both
ways, tokens and access, bad input (docs/clients.md)."""

from __future__ import annotations

import threading
from typing import Any

import openai
import pytest

from tests.support.http import (
    MEMBER_TOKEN,
    OWNER_TOKEN,
    client,
    events,
    free_port,
    http_config,
)
from tests.support.modelserver import ScriptedModelServer, reply


def _config(model: ScriptedModelServer, port: int, extra: str = "") -> str:
    base = f"model:\n  base_url: {model.url}\n  default: scripted-model\nterminal:\n  cwd: /tmp\n"
    return http_config(port, base + extra)


def _openai(port: int, token: str = OWNER_TOKEN) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0)


def test_openai_chat_completion_is_a_turn_of_a_fresh_session(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    model.push(reply("Paris."))
    raw = _openai(port).chat.completions.with_raw_response.create(
        model="hermes-agent",
        messages=[
            {"role": "user", "content": "Name a city."},
            {"role": "assistant", "content": "Lyon."},
            {"role": "user", "content": "Another?"},
        ],
    )
    answer = raw.parse()
    assert answer.choices[0].message.content == "Paris."
    sid = raw.headers["x-hermes-session-id"]
    sent = [(m["role"], m["content"]) for m in model.last_request["messages"][1:]]
    assert sent == [("user", "Name a city."), ("assistant", "Lyon."), ("user", "Another?")]
    history = daemon.call("session.history", {"session_id": sid})["messages"]
    assert [m["content"] for m in history][-1] == "Paris."


def test_openai_stream_and_a_bound_session_continue_one_conversation(start, model) -> None:
    port = free_port()
    start(config=_config(model, port))
    oa = _openai(port)
    model.push(reply("first answer here"), reply("second"))
    stream = oa.chat.completions.with_raw_response.create(
        model="hermes-agent", messages=[{"role": "user", "content": "one"}], stream=True
    )
    sid = stream.headers["x-hermes-session-id"]
    text = "".join(c.choices[0].delta.content or "" for c in stream.parse() if c.choices)
    assert text == "first answer here"
    again = oa.chat.completions.create(
        model="hermes-agent",
        messages=[{"role": "user", "content": "two"}],
        extra_headers={"X-Hermes-Session-Id": sid},
    )
    assert again.choices[0].message.content == "second"
    sent = [m["content"] for m in model.last_request["messages"][1:]]
    assert sent == ["one", "first answer here", "two"]


def test_openai_responses_chain_with_previous_response_id(start, model) -> None:
    port = free_port()
    start(config=_config(model, port))
    oa = _openai(port)
    model.push(reply("hello there"), reply("streamed reply"))
    first = oa.responses.create(model="hermes-agent", input="hi")
    assert first.output_text == "hello there"
    with oa.responses.stream(
        model="hermes-agent", input="and again", previous_response_id=first.id
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "streamed reply" == final.output_text
    sent = [m["content"] for m in model.last_request["messages"][1:]]
    assert sent == ["hi", "hello there", "and again"]


def test_models_lists_the_agent_and_needs_a_token(start, model) -> None:
    port = free_port()
    start(config=_config(model, port))
    ids = [m.id for m in _openai(port).models.list()]
    assert ids == ["hermes-agent", "scripted-model"]
    with pytest.raises(openai.AuthenticationError):
        _openai(port, "wrong-token-0123456789abcdef").models.list()


def test_only_health_answers_without_a_token(start, model) -> None:
    port = free_port()
    start(config=_config(model, port))
    with client(port, token=None) as anon:
        assert anon.get("/health").json() == {"status": "ok"}
        for path in ("/ready", "/metrics", "/openapi.json", "/v1/sessions", "/v1/models"):
            answer = anon.get(path)
            assert answer.status_code == 401, path
            assert answer.headers["www-authenticate"].startswith("Bearer")
        assert anon.get("/ready", headers={"Authorization": "Bearer x"}).status_code == 401
    with client(port) as owner:
        assert owner.get("/ready").json()["status"] == "ready"


def test_a_member_token_sees_only_its_sessions_and_may_not_run_owner_methods(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    mine = daemon.call("session.create", {"attach": False})["id"]
    with client(port, MEMBER_TOKEN) as member:
        theirs = member.post("/v1/sessions", json={"title": "member's"}).json()["id"]
        listed = [s["id"] for s in member.get("/v1/sessions").json()["sessions"]]
        assert listed == [theirs]
        assert member.get(f"/v1/sessions/{mine}").status_code == 404
        refused = member.post("/v1/rpc/shutdown", json={})
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "hermes.error.PermissionDenied"
    with client(port) as owner:
        assert owner.get(f"/v1/sessions/{theirs}").json()["owner_uid"] == 65534
    assert daemon.alive()


def _stream_events(
    port: int, sid: str, found: list[dict[str, Any]], stop: str, **headers: str
) -> None:
    with client(port) as c, c.stream("GET", f"/v1/sessions/{sid}/events", headers=headers) as r:
        for event in events(r.iter_lines()):
            found.append(event)
            if event.get("event") == stop:
                return


def test_event_stream_carries_the_socket_events_with_their_seq(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    sid = daemon.call("session.create", {"attach": False})["id"]
    found: list[dict[str, Any]] = []
    reader = threading.Thread(target=_stream_events, args=(port, sid, found, "turn.finished"))
    reader.start()
    with daemon.client() as sock:
        sock.call("session.attach", {"session_id": sid})
        while daemon.call("session.get", {"session_id": sid})["attached"] < 2:
            pass  # the SSE reader attaches on its own thread
        model.push(reply("streamed to both"))
        with client(port) as c:
            c.post(f"/v1/sessions/{sid}/messages", json={"message": "go"})
        socket_events: list[dict[str, Any]] = []
        while not socket_events or socket_events[-1]["type"] != "turn.finished":
            note = sock.next_notification(timeout=20)
            assert note is not None
            if note.method == "session.event":
                socket_events.append(note.params[0])
    reader.join(30)
    http_events = [e for e in found if "id" in e]
    assert [(int(e["id"]), e["event"]) for e in http_events] == [
        (e["seq"], e["type"]) for e in socket_events
    ]
    assert http_events[-1]["data"]["final_text"] == "streamed to both"
