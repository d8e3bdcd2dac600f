"""The model client against real HTTP servers on 127.0.0.1: how the request URL is joined, what
the SDK's HTTP stack accepts, and what the event-stream reader refuses.

The servers are the scripted model server (tests/support/modelserver.py) and a raw one that
answers with exact bytes (tests/support/rawhttp.py); the client is the real ``openai`` SDK on
its own HTTP stack, through ``hermesd.model.client.ModelClient``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from hermesd.model.client import (
    Completion,
    ModelClient,
    ModelRequestFailed,
    ModelResponseInvalid,
    ModelSettings,
    RetryInfo,
)
from hermesd.model.stream import MAX_EVENT_BYTES
from tests.support.modelserver import ScriptedModelServer, reply
from tests.support.rawhttp import Answer, RawHTTPServer, chunked, response

USER = [{"role": "user", "content": "hi"}]


def complete(
    base_url: str, rounds: int = 1, **settings: Any
) -> tuple[list[Completion | ModelRequestFailed], list[RetryInfo]]:
    """``rounds`` completions on one ModelClient (one connection pool): each one's result, or
    the connection error it failed with; and the retries announced."""
    retries: list[RetryInfo] = []
    opts = {"base_url": base_url, "model": "m", "timeout": 5.0, "max_retries": 0, **settings}

    async def no_wait(delay: float) -> None:
        pass

    async def on_retry(info: RetryInfo) -> None:
        retries.append(info)

    async def main() -> list[Completion | ModelRequestFailed]:
        client = ModelClient(ModelSettings(**opts), sleep=no_wait)
        out: list[Completion | ModelRequestFailed] = []
        try:
            for _ in range(rounds):
                try:
                    out.append(await client.stream_completion(USER, on_retry=on_retry))
                except ModelRequestFailed as exc:
                    out.append(exc)
        finally:
            await client.aclose()
        return out

    return asyncio.run(main()), retries


def sse_answer(text: str) -> bytes:
    """A streamed answer's events, as a chunked body."""
    chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}
    return chunked(f"data: {json.dumps(chunk)}\n\n".encode(), b"data: [DONE]\n\n")


def streamed(text: str) -> bytes:
    """A whole keep-alive response streaming ``text``."""
    return response(
        "200 OK",
        sse_answer(text),
        "Content-Type: text/event-stream",
        "Transfer-Encoding: chunked",
        length=False,
    )


# --- the request URL ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "sent"),
    [
        ("", "/chat/completions"),
        ("/", "/chat/completions"),
        ("/v1", "/v1/chat/completions"),
        ("/v1/", "/v1/chat/completions"),
    ],
    ids=["no-path", "root-slash", "v1", "v1-slash"],
)
def test_the_completions_url_is_joined_to_any_form_of_base_url(path: str, sent: str) -> None:
    with ScriptedModelServer([reply("joined")]) as server:
        (done,), _ = complete(server.root_url + path)
        assert isinstance(done, Completion) and done.content == "joined"
        assert server.request_paths == [sent]


# --- what the HTTP stack accepts -----------------------------------------------------------------


def test_a_response_head_ending_lines_in_bare_lf_is_accepted_and_not_retried() -> None:
    # RFC 9112 §2.2: a recipient may take a bare LF as a line end; llama.cpp-style servers and
    # small proxies send them.
    head = b"HTTP/1.1 200 OK\nContent-Type: text/event-stream\nTransfer-Encoding: chunked\n\n"
    with RawHTTPServer(Answer(head + sse_answer("bare LF is fine"))) as server:
        (done,), retries = complete(server.url + "/v1", max_retries=3)
        assert isinstance(done, Completion) and done.content == "bare LF is fine"
        assert len(server.requests) == 1 and retries == []


def test_a_post_on_a_reused_connection_closed_unanswered_is_not_sent_again() -> None:
    # The server reads the second POST on the kept-alive connection and hangs up without a
    # byte: the request may have been acted on, so it is not silently resent.
    with RawHTTPServer(Answer(streamed("first")), Answer(close=True)) as server:
        (first, second), retries = complete(server.url + "/v1", rounds=2, max_retries=0)
        assert isinstance(first, Completion) and first.content == "first"
        assert isinstance(second, ModelRequestFailed)
        assert "connection to the model endpoint" in str(second), second
        assert "timed out" not in str(second)
        assert [r.conn for r in server.requests] == [0, 0]  # the second reused the connection
        assert retries == []


def test_with_retries_each_copy_of_a_post_the_server_sees_is_an_announced_retry() -> None:
    answers = [Answer(streamed("first")), Answer(close=True), Answer(close=True)]
    with RawHTTPServer(*answers, Answer(streamed("third time"))) as server:
        (_, second), retries = complete(server.url + "/v1", rounds=2, max_retries=3)
        assert isinstance(second, Completion) and second.content == "third time"
        copies = len(server.requests) - 1  # after the first completion's one request
        assert copies == 1 + len(retries) == 3
        assert all("connection" in str(r.error) for r in retries)


def test_requests_go_through_the_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with RawHTTPServer(Answer(streamed("via the proxy"))) as proxy:
        for name in ("http_proxy", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        (done,), _ = complete("http://model.invalid:9/v1")
        assert isinstance(done, Completion) and done.content == "via the proxy"
        (request,) = proxy.requests
        assert request.head.startswith(b"POST http://model.invalid:9/v1/chat/completions ")


# --- the event stream ----------------------------------------------------------------------------


def event_stream(body: bytes) -> bytes:
    return response("200 OK", body, "Content-Type: text/event-stream")


def test_a_large_event_within_the_cap_is_read() -> None:
    text = "x" * (1 << 20)
    chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}
    body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    with RawHTTPServer(Answer(event_stream(body))) as server:
        (done,), _ = complete(server.url + "/v1")
        assert isinstance(done, Completion) and done.content == text


def test_a_stream_that_never_ends_an_event_fails_past_the_cap_and_is_not_retried() -> None:
    body = b"data: " + b"x" * (MAX_EVENT_BYTES + (1 << 20))  # no blank line, ever
    with RawHTTPServer(Answer(event_stream(body))) as server:
        with pytest.raises(ModelResponseInvalid, match="MiB without ending an event"):
            complete(server.url + "/v1", max_retries=3)
        assert len(server.requests) == 1


# --- a new endpoint on reload --------------------------------------------------------------------


def test_a_new_endpoint_on_reload_lets_requests_in_flight_finish_then_closes_the_old_client() -> (
    None
):
    async def main(old: RawHTTPServer, new: RawHTTPServer) -> list[str]:
        client = ModelClient(ModelSettings(base_url=old.url, model="m", max_retries=0))
        try:
            in_flight = asyncio.create_task(client.stream_completion(USER))
            # the old endpoint has the connection (and answers the request after 0.5 s)
            assert await asyncio.to_thread(old.wait_for, "accepted", 1)
            client.settings = ModelSettings(base_url=new.url, model="m", max_retries=0)
            after = await client.stream_completion(USER)
            assert old.client_closed == 0  # still serving the request in flight
            before = await in_flight
            # closed once its last request is done, not only when the daemon stops
            assert await asyncio.to_thread(old.wait_for, "client_closed", 1)
            return [before.content, after.content]
        finally:
            await client.aclose()

    with (
        RawHTTPServer(Answer(streamed("from the old one"), delay=0.5)) as old,
        RawHTTPServer(Answer(streamed("from the new one"))) as new,
    ):
        assert asyncio.run(main(old, new)) == ["from the old one", "from the new one"]
        assert len(old.requests) == 1 and len(new.requests) == 1


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/v1", "127.0.0.1:8080/v1", "file:///tmp/x"])
def test_a_base_url_that_is_not_http_is_a_permanent_error_before_any_request(url: str) -> None:
    from hermesd.model.client import ModelNotConfigured

    settings = ModelSettings(base_url=url, model="m")
    with pytest.raises(ModelNotConfigured, match="not an absolute http\\(s\\) URL") as caught:
        settings.check()
    assert caught.value.retryable is False
