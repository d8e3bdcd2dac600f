"""The HTTP door end to end: the openai client, the session API, SSE replay, approvals both
ways, tokens and access, bad input (docs/clients.md)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from typing import Any

import openai
import pytest

from tests.support.approvals import client_answering, wait_pending
from tests.support.daemon import follow_turn, run_hermesctl, short_tmpdir, start_daemon
from tests.support.http_client import (
    MEMBER_TOKEN,
    OWNER_TOKEN,
    client,
    events,
    free_port,
    http_config,
)
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    http_error,
    reply,
    tool_call,
)
from tests.support.plugin_factory import write_plugin


def _config(model: ScriptedModelServer, port: int, http_extra: str = "") -> str:
    base = f"model:\n  base_url: {model.url}\n  default: scripted-model\nterminal:\n  cwd: /tmp\n"
    return http_config(port, base, http_extra)


def _openai(port: int, token: str = OWNER_TOKEN) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0)


def test_openai_chat_completion_is_a_turn_of_a_fresh_session(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    model.push(reply("Paris."))
    raw = _openai(port).chat.completions.with_raw_response.create(
        model="hermes-agent",
        store=True,  # kept: the session is looked at below
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


def test_system_messages_reach_the_model_for_their_turn_only(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    oa = _openai(port)
    model.push(reply("Ahoy."), reply("Hello."), reply("Arr."))
    raw = oa.chat.completions.with_raw_response.create(
        model="hermes-agent",
        store=True,
        messages=[
            {"role": "system", "content": "Answer like a pirate."},
            {"role": "user", "content": "Greet me."},
        ],
    )
    assert raw.parse().choices[0].message.content == "Ahoy."
    system = model.last_request["messages"][0]
    assert system["role"] == "system" and system["content"].endswith("Answer like a pirate.")
    sid = raw.headers["x-hermes-session-id"]
    oa.chat.completions.create(  # the next turn of that session, without a system message
        model="hermes-agent",
        messages=[{"role": "user", "content": "Again."}],
        extra_headers={"X-Hermes-Session-Id": sid},
    )
    assert "pirate" not in json.dumps(model.last_request["messages"])
    stored = daemon.call("session.history", {"session_id": sid})["messages"]
    assert "pirate" not in json.dumps(stored)
    oa.responses.create(model="hermes-agent", input="Greet.", instructions="Be a parrot.")
    assert model.last_request["messages"][0]["content"].endswith("Be a parrot.")


def test_openai_stream_and_a_bound_session_continue_one_conversation(start, model) -> None:
    port = free_port()
    start(config=_config(model, port))
    oa = _openai(port)
    model.push(reply("first answer here"), reply("second"))
    stream = oa.chat.completions.with_raw_response.create(
        model="hermes-agent", messages=[{"role": "user", "content": "one"}], stream=True, store=True
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


def test_a_stateless_chat_completion_leaves_no_session_behind(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    oa = _openai(port)
    model.push(reply("plain"), reply("streamed"))
    raw = oa.chat.completions.with_raw_response.create(
        model="hermes-agent", messages=[{"role": "user", "content": "one"}]
    )
    assert raw.parse().choices[0].message.content == "plain"
    assert "x-hermes-session-id" not in raw.headers  # nothing to continue
    stream = oa.chat.completions.with_raw_response.create(
        model="hermes-agent", messages=[{"role": "user", "content": "two"}], stream=True
    )
    sid = stream.headers["x-hermes-session-id"]  # named while its turn runs (approvals)
    assert "".join(c.choices[0].delta.content or "" for c in stream.parse() if c.choices)
    assert daemon.call("session.list", {})["sessions"] == []
    with pytest.raises(openai.NotFoundError):
        oa.chat.completions.create(
            model="hermes-agent",
            messages=[{"role": "user", "content": "three"}],
            extra_headers={"X-Hermes-Session-Id": sid},
        )


def test_a_stateless_stream_whose_client_leaves_stops_and_goes(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    model.push(reply("a long answer " * 50, delay=30))
    with (
        client(port) as c,
        c.stream(
            "POST",
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "go"}], "stream": True},
        ) as r,
    ):
        assert r.status_code == 200
        next(r.iter_lines())  # the first chunk: the turn runs; then the client hangs up
    for _ in range(600):
        if not daemon.call("session.list", {})["sessions"]:
            break
        time.sleep(0.1)
    assert daemon.call("session.list", {})["sessions"] == []


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


def _danger(model: ScriptedModelServer, answer: str) -> str:
    target = short_tmpdir("hx-")
    (target / "sub").mkdir()
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {target}"})), reply(answer))
    return str(target)


def test_approval_of_a_hermesctl_session_is_answered_over_http(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    target = _danger(model, "left it")
    sock, asked = client_answering(daemon, None)  # asked, answers nothing
    with sock:
        sid = sock.call("session.create")["id"]
        turn = sock.call("session.send", {"session_id": sid, "message": "clean"})["turn_id"]
        wait_pending(daemon)
        with client(port) as c:
            pending = c.get(f"/v1/sessions/{sid}/approvals").json()["pending"]
            assert [p["command"] for p in pending] == [f"rm -r {target}"]
            other = c.post(f"/v1/sessions/nosuch/approvals/{pending[0]['id']}", json={})
            assert other.status_code == 404
            answered = c.post(
                f"/v1/sessions/{sid}/approvals/{pending[0]['id']}",
                json={"choice": "deny", "reason": "not over http"},
            )
            assert answered.json() == {"id": pending[0]["id"], "choice": "deny"}
        finished = follow_turn(sock, turn)[-1]
    assert finished["final_text"] == "left it"
    assert asked.requests and asked.requests[0]["session_id"] == sid
    tool_results = [m for m in model.last_request["messages"] if m["role"] == "tool"]
    assert "not over http" in tool_results[0]["content"]


def test_approval_raised_over_http_is_streamed_and_answered_by_hermesctl(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    target = _danger(model, "done")
    with client(port) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
    found: list[dict[str, Any]] = []
    reader = threading.Thread(target=_stream_events, args=(port, sid, found, "turn.finished"))
    reader.start()
    while daemon.call("session.get", {"session_id": sid})["attached"] < 1:
        pass
    with client(port) as c:
        c.post(f"/v1/sessions/{sid}/messages", json={"message": "clean"})
    pending = wait_pending(daemon)
    done = run_hermesctl(["--socket", str(daemon.socket), "approvals", "approve", pending[0]["id"]])
    assert done.returncode == 0, done.stderr
    reader.join(30)
    kinds = [e.get("event") for e in found]
    assert kinds.index("approval.request") < kinds.index("approval.resolved")
    request = found[kinds.index("approval.request")]["data"]
    assert request["id"] == pending[0]["id"] and request["command"] == f"rm -r {target}"
    assert found[kinds.index("approval.resolved")]["data"]["choice"] == "once"
    assert found[-1]["data"]["final_text"] == "done"


def test_last_event_id_replays_across_a_daemon_restart_with_curl(model) -> None:
    port = free_port()
    home = short_tmpdir()
    config = _config(model, port)
    daemon = start_daemon(home, config=config)
    try:
        sid = daemon.call("session.create", {"attach": False})["id"]
        model.push(reply("before restart"))
        with client(port) as c:
            c.post(f"/v1/sessions/{sid}/messages", json={"message": "one", "wait": True})
        curl = ["curl", "-sN", "--max-time", "3", "-H", f"Authorization: Bearer {OWNER_TOKEN}"]
        url = f"http://127.0.0.1:{port}/v1/sessions/{sid}/events"
        first = list(
            events(
                iter(
                    subprocess.run(
                        [*curl, "-H", "Last-Event-ID: 0", url], capture_output=True, text=True
                    ).stdout.splitlines()
                )
            )
        )
        seen = [e for e in first if "id" in e]
        assert seen[-1]["event"] == "turn.finished"
        middle = seen[1]["id"]  # replay from there: the rest, and nothing before
        again = list(
            events(
                iter(
                    subprocess.run(
                        [*curl, "-H", f"Last-Event-ID: {middle}", url],
                        capture_output=True,
                        text=True,
                    ).stdout.splitlines()
                )
            )
        )
        assert [e["id"] for e in again if "id" in e] == [e["id"] for e in seen[2:]]
    finally:
        daemon.stop()
    daemon = start_daemon(home, config=config)
    try:
        model.push(reply("after restart"))
        with client(port) as c:
            c.post(f"/v1/sessions/{sid}/messages", json={"message": "two", "wait": True})
        after = list(
            events(
                iter(
                    subprocess.run(
                        [*curl, "-H", f"Last-Event-ID: {seen[-1]['id']}", url],
                        capture_output=True,
                        text=True,
                    ).stdout.splitlines()
                )
            )
        )
    finally:
        daemon.stop()
    kinds = [e.get("event") for e in after]
    assert kinds[:2] == ["attached", "replay.incomplete"]  # the old run's events are gone
    new = [e for e in after if "id" in e]
    assert int(new[0]["id"]) > int(seen[-1]["id"])
    assert new[-1]["data"]["final_text"] == "after restart"


def test_bad_bodies_get_clear_errors_and_the_door_stays_up(start, model) -> None:
    port = free_port()
    start(config=_config(model, port, "  max_body: 2048\n"))
    with client(port) as c:
        big = c.post(
            "/v1/chat/completions",
            content=b"x" * 5000,
            headers={"content-type": "application/json"},
        )
        assert big.status_code == 413
        assert big.json()["error"]["code"] == "body_too_large"

        def chunks() -> Any:
            for _ in range(100):  # no Content-Length: counted while read, refused past the bound
                yield b"y" * 1024

        streamed = c.post("/v1/chat/completions", content=chunks())
        assert streamed.status_code == 413
        broken = c.post(
            "/v1/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_json"
        empty = c.post("/v1/chat/completions", json={"messages": []})
        assert empty.status_code == 400
        wrong = c.post("/v1/rpc/session.get", json={"session_id": 5})
        assert wrong.status_code == 400
        assert wrong.json()["error"]["code"] == "hermes.error.InvalidParams"
        assert c.post("/v1/rpc/no.such", json={}).status_code == 404
        assert c.get("/health").status_code == 200


def test_metrics_and_openapi_come_from_the_daemon(start, model) -> None:
    port = free_port()
    start(config=_config(model, port))
    model.push(reply("counted"))
    with client(port) as c:
        c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        text = c.get("/metrics").text
        doc = c.get("/openapi.json").json()
    assert 'hermesd_connections_by_kind{kind="socket"}' in text
    assert 'hermesd_http_responses_total{code="200"}' in text
    assert "hermesd_sessions 0.0" in text  # the stateless request's session is gone
    assert "hermesd_usage_total_requests 1.0" in text  # the model request of the turn
    assert "hermesd_approvals_pending 0.0" in text
    assert doc["paths"]["/v1/rpc/session.send"]["post"]["x-hermes-access"] == "session"
    schema = doc["paths"]["/v1/rpc/session.send"]["post"]["requestBody"]["content"]
    assert schema["application/json"]["schema"]["required"] == ["session_id", "message"]
    assert (
        doc["paths"]["/v1/sessions/{session_id}/approvals/{approval_id}"]["post"]["x-hermes-method"]
        == "approvals.respond"
    )


def test_metrics_count_turns_tool_calls_and_model_requests_from_the_events(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    with client(port) as c:
        before = c.get("/metrics").text
        model.push(call_tools(tool_call("terminal", {"command": "echo counted"})), reply("done"))
        c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "run"}]})
        text = c.get("/metrics").text
    assert "hermesd_turns_started_total 0.0" in before, daemon.log()
    assert "hermesd_turns_started_total 1.0" in text
    assert 'hermesd_turns_finished_total{status="completed"} 1.0' in text
    assert 'hermesd_tool_calls_total{outcome="ok",tool="terminal"} 1.0' in text
    assert "hermesd_model_request_seconds_count 2.0" in text  # the tool call's and the answer's
    assert "hermesd_approvals_pending 0.0" in text
    assert "hermesd_mcp_ready 0.0" in text


def test_metrics_label_tools_the_model_made_up_as_other(start, model) -> None:
    port = free_port()
    start(config=_config(model, port))
    made_up = [tool_call(f"no_such_tool_{i}", {}) for i in range(3)]
    model.push(call_tools(*made_up, tool_call("terminal", {"command": "echo ok"})), reply("ok"))
    with client(port) as c:
        c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "go"}]})
        text = c.get("/metrics").text
    assert 'tool="terminal"' in text
    assert "no_such_tool" not in text
    assert 'hermesd_tool_calls_total{outcome="error",tool="other"} 3.0' in text


def test_metrics_count_cron_runs_and_model_errors(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    model.push(reply("checked"))
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": "check"})
    daemon.call("cron.run", {"job_id": job["id"]})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = daemon.call("cron.runs", {"job_id": job["id"]})["runs"]
        if runs and runs[0]["status"] != "running":
            break
        time.sleep(0.1)
    assert runs[0]["status"] == "ok", runs
    model.push(http_error(400, "no such model"))
    with client(port) as c:
        failed = c.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
        )
        text = c.get("/metrics").text
    assert failed.status_code >= 400
    assert 'hermesd_cron_runs_total{result="ok"} 1.0' in text
    assert 'hermesd_model_errors_total{kind="ModelRequestFailed"} 1.0' in text
    assert 'hermesd_turns_finished_total{status="failed"} 1.0' in text


def test_socket_activation_hands_the_http_listener_over_as_a_named_fd(model) -> None:
    import os
    import shutil
    import signal
    import sys

    from hermesctl.client import Client
    from tests.support.daemon import NotifyListener, daemon_env

    tool = shutil.which("systemd-socket-activate")
    if tool is None:
        pytest.skip("systemd-socket-activate not installed")
    home, run, port = short_tmpdir(), short_tmpdir(), free_port()
    (home / "config.yaml").write_text(
        http_config(port).replace(f"  listen: 127.0.0.1:{port}\n", "")
    )
    sock, notify = run / "activated.sock", NotifyListener(run / "notify.sock")
    env = daemon_env(home, {"NOTIFY_SOCKET": str(notify.path)})
    argv = [tool, "-l", str(sock), "-l", f"127.0.0.1:{port}", "--fdname=hermesd:http"]
    for name in ("HERMES_HOME", "NOTIFY_SOCKET", "PYTHONPATH", "PATH", "HOME"):
        argv += ["-E", f"{name}={env[name]}"]
    argv += [sys.executable, "-m", "hermesd", *(["--allow-root"] if os.geteuid() == 0 else [])]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        # the first HTTP connection starts the daemon; no listen address is configured
        with client(port, timeout=60) as c:
            assert c.get("/ready").json()["status"] == "ready"
            created = c.post("/v1/sessions", json={"title": "activated"}).json()
        with Client.connect(sock, timeout=30) as rpc:
            status = rpc.call("status")
            assert status["socket_activated"] is True and status["socket"] == str(sock)
            assert status["http"]["listen"] == f"127.0.0.1:{port}"
            assert rpc.call("session.get", {"session_id": created["id"]})["title"] == "activated"
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0].decode()
        notify.close()
    assert proc.returncode == 0, out


def test_two_hundred_event_streams_each_get_the_turn(start, model) -> None:
    import asyncio

    port = free_port()
    daemon = start(config=_config(model, port))
    sid = daemon.call("session.create", {"attach": False})["id"]
    clients = 200

    async def one(c: Any, ready: asyncio.Queue[None]) -> str:
        async with c.stream("GET", f"/v1/sessions/{sid}/events") as r:
            lines = r.aiter_lines()
            kind = ""
            async for line in lines:
                if line.startswith("event:"):
                    kind = line[6:].strip()
                    if kind == "attached":
                        ready.put_nowait(None)
                if line.startswith("data:") and kind == "turn.finished":
                    return str(json.loads(line[5:])["final_text"])
        return ""

    async def main() -> list[str]:
        import httpx2

        limits = httpx2.Limits(max_connections=clients + 10)
        headers = {"Authorization": f"Bearer {OWNER_TOKEN}"}
        base = f"http://127.0.0.1:{port}"
        async with httpx2.AsyncClient(
            base_url=base, headers=headers, limits=limits, timeout=60
        ) as c:
            ready: asyncio.Queue[None] = asyncio.Queue()
            tasks = [asyncio.create_task(one(c, ready)) for _ in range(clients)]
            for _ in range(clients):
                await ready.get()
            model.push(reply("to everyone"))
            await c.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
            return await asyncio.gather(*tasks)

    assert asyncio.run(main()) == ["to everyone"] * clients
    with client(port) as c:
        assert "hermesd_connections_by_kind" in c.get("/metrics").text


def _answer_or_close(sock: socket.socket) -> bytes:
    """What the door sends before it closes ``sock`` (waits as long as a loaded machine may)."""
    sock.settimeout(120)
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def test_a_stalled_request_body_holds_up_no_one_and_times_out(start, model) -> None:
    port = free_port()
    # the bound is short for the stalled body; the requests meanwhile send theirs at once
    start(config=_config(model, port, "  body_timeout: 1\n"))
    stalled = socket.create_connection(("127.0.0.1", port))
    head = (
        "POST /v1/sessions HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {OWNER_TOKEN}\r\nContent-Length: 1000\r\n\r\n{{"
    )
    stalled.sendall(head.encode())  # 1 byte of the promised 1000, then nothing
    try:
        with client(port) as c:
            # GET and a body-less POST: nothing here may meet the 1 s bound on a busy machine
            assert c.post("/v1/sessions").status_code == 200
            assert c.get("/v1/sessions").json()["sessions"][0]["id"]
        answer = _answer_or_close(stalled)  # after http.body_timeout: 408, and the door lets go
        assert answer.startswith(b"HTTP/1.1 408"), answer
    finally:
        stalled.close()


def _trickle(sock: socket.socket, head: bytes, stop: threading.Event) -> None:
    """Send ``head`` a byte at a time, then header lines forever, until the door hangs up."""
    data = head + b"X-Slow: " + b"a" * 10_000_000
    for i in range(len(data)):
        if stop.is_set():
            return
        try:
            sock.send(data[i : i + 1])
        except OSError:
            return
        time.sleep(0.05)


def test_a_request_head_sent_a_byte_at_a_time_is_cut_off_and_holds_up_no_one(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port, "  header_timeout: 1\n"))
    slow = socket.create_connection(("127.0.0.1", port))
    stop = threading.Event()
    trickling = threading.Thread(
        target=_trickle, args=(slow, b"GET /health HTTP/1.1\r\nHost: x\r\n", stop), daemon=True
    )
    trickling.start()
    try:
        with client(port) as c:
            assert c.get("/health").status_code == 200
            assert c.post("/v1/sessions", json={"title": "meanwhile"}).status_code == 200
        # closed without an answer: not the 400 of a head over h11_max_incomplete_event_size
        assert _answer_or_close(slow) == b""
    finally:
        stop.set()
        slow.close()
        trickling.join()
    assert "no complete request head within 1s" in daemon.log()


def test_a_kept_alive_connection_has_the_head_deadline_for_its_next_request(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port, "  header_timeout: 1\n"))
    slow = socket.create_connection(("127.0.0.1", port))
    stop = threading.Event()
    slow.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    slow.settimeout(120)
    first = b""
    while not first.endswith(b'{"status":"ok"}'):
        chunk = slow.recv(65536)
        assert chunk, first
        first += chunk
    assert first.startswith(b"HTTP/1.1 200")
    trickling = threading.Thread(
        target=_trickle, args=(slow, b"GET /health HTTP/1.1\r\n", stop), daemon=True
    )
    trickling.start()
    try:
        assert _answer_or_close(slow) == b""
    finally:
        stop.set()
        slow.close()
        trickling.join()
    assert "no complete request head within 1s" in daemon.log()


def test_a_reload_rereads_the_token_file(start, model) -> None:
    import re

    port = free_port()
    config = _config(model, port)
    daemon = start(config=config)
    path = re.search(r"token_file: (\S+)", config)
    assert path is not None
    fresh = "fresh-token-0123456789abcdef"
    with open(path.group(1), "w") as fh:
        fh.write(f"{fresh}\n")
    daemon.call("config.reload")
    with client(port) as old, client(port, fresh) as new:
        assert old.get("/v1/sessions").status_code == 401
        assert new.get("/v1/sessions").status_code == 200


def test_a_widening_call_needs_a_terminal_and_is_refused_over_http(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port), env={"HERMESD_CONFIRM_WIDENING": "on"})
    with client(port) as c:
        refused = c.post("/v1/rpc/config.set", json={"key": "sandbox.mode", "value": "off"})
    assert refused.status_code == 403
    assert "terminal" in refused.json()["error"]["message"]
    assert daemon.call("config.get", {"key": "sandbox.mode"})["value"] != "off"


def test_the_models_question_is_answered_over_http(start, model) -> None:
    port = free_port()
    daemon = start(config=_config(model, port))
    question = {"question": "Which environment?", "choices": ["staging", "prod"]}
    model.push(call_tools(tool_call("clarify", question)), reply("noted"))
    with client(port) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        c.post(f"/v1/sessions/{sid}/messages", json={"message": "deploy"})
        pending: list[dict[str, Any]] = []
        while not pending:
            pending = c.get(f"/v1/sessions/{sid}/clarify").json()["pending"]
        assert pending[0]["question"] == "Which environment?"
        answer = c.post(f"/v1/sessions/{sid}/clarify/{pending[0]['id']}", json={"choice": 2})
        assert answer.json() == {"id": pending[0]["id"], "response": "prod"}
        while c.get(f"/v1/sessions/{sid}").json()["running"]:
            pass
    tool_results = [m for m in model.last_request["messages"] if m["role"] == "tool"]
    assert json.loads(tool_results[-1]["content"])["user_response"] == "prod"
    assert daemon.alive()


GATEKEEPER = """
import getpass
import time
from hermes_cli.dashboard_auth import DashboardAuthProvider, ProviderError, TokenPrincipal

class Gatekeeper(DashboardAuthProvider):
    name = "gatekeeper"
    supports_token = True

    def verify_token(self, *, token):
        if token == "sso-owner-0123456789":
            return TokenPrincipal("owner", self.name)
        if token == "sso-nobody-0123456789":
            return TokenPrincipal("no-such-user-here", self.name)
        if token == "sso-slow-0123456789":
            time.sleep(30)
        if token == "sso-down-0123456789":
            raise ProviderError("directory offline")
        return None

def register(ctx):
    ctx.register_dashboard_auth_provider(Gatekeeper())
"""


def test_a_dashboard_auth_plugin_vouches_for_tokens_the_file_lacks(start, model) -> None:
    home = short_tmpdir("authplug-")
    write_plugin(home / "plugins", "gatekeeper", GATEKEEPER)
    port = free_port()
    extra = "  auth_provider: gatekeeper\n  auth_timeout: 1\n"
    daemon = start(home, config=_config(model, port, extra))
    with client(port, "sso-owner-0123456789") as c:
        assert c.get("/v1/sessions").status_code == 200
        assert c.post("/v1/rpc/config.get", json={"key": "http.listen"}).status_code == 200
    for refused in ("sso-nobody-0123456789", "sso-slow-0123456789", "sso-down-0123456789", "x"):
        with client(port, refused) as c:
            assert c.get("/v1/sessions").status_code == 401, refused
    with client(port) as c:  # the token file still answers
        assert c.get("/v1/sessions").status_code == 200
    listed = daemon.call("plugins.info", {"name": "gatekeeper"})
    assert "in use" in json.dumps(listed)
    log = daemon.log()
    assert "no-such-user-here" in log and "did not answer in 1.0s" in log
    assert "directory offline" in log


def test_a_dashboard_auth_plugin_is_not_asked_unless_named(start, model) -> None:
    home = short_tmpdir("authplug-")
    write_plugin(home / "plugins", "gatekeeper", GATEKEEPER)
    port = free_port()
    start(home, config=_config(model, port))
    with client(port, "sso-owner-0123456789") as c:
        assert c.get("/v1/sessions").status_code == 401
