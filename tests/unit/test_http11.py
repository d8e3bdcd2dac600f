"""hermesd's HTTP/1.1 transport (hermesd/http11.py) against real servers on 127.0.0.1.

Protocol details go through the SDK's HTTP client with the transport plugged in, as
``hermesd.model.client`` plugs it in; error mapping and the request on the wire go through
``ModelClient`` itself. The server is a raw scripted one (tests/support/rawhttp.py): it answers
with exact bytes and counts the connections it accepted and those the client closed.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import openai
import pytest

from hermesd.model import client as llm
from hermesd.model import fastjson
from hermesd.model.client import (
    Completion,
    ModelClient,
    ModelError,
    ModelRequestFailed,
    ModelSettings,
)
from hermesd.model.http11 import MAX_HEAD, READ_HIGH_WATER, Http11Transport, http
from tests.support.modelserver import ScriptedModelServer, reply
from tests.support.rawhttp import Answer, RawHTTPServer, chunked, response

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")
USER = [{"role": "user", "content": "hi"}]
SSE = "Content-Type: text/event-stream"
CHUNKED = "Transfer-Encoding: chunked"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """hermesd's transport is only used when no proxy is configured."""
    import os

    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


@pytest.fixture
def server() -> Iterator[RawHTTPServer]:
    with RawHTTPServer() as srv:
        yield srv


def events(text: str = "hello") -> list[bytes]:
    """The SSE events of a streamed completion answering ``text``."""
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    chunks = [
        {
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    return [b"data: " + json.dumps({**base, **c}).encode() + b"\n\n" for c in chunks] + [
        b"data: [DONE]\n\n"
    ]


def streamed(text: str = "hello") -> bytes:
    """A chunked SSE completion, as llama.cpp and vLLM send it."""
    return response("200 OK", chunked(*events(text)), SSE, CHUNKED, length=False)


def run_http(fn: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``fn(client)`` with the SDK's HTTP client on hermesd's transport."""

    async def main() -> T:
        async with asyncio.timeout(10):
            client = openai.DefaultAsyncHttpxClient(transport=Http11Transport(), timeout=2.0)
            async with client:
                return await fn(client)

    return asyncio.run(main())


def run_model(server_url: str, fn: Callable[[ModelClient], Awaitable[T]], **settings: Any) -> T:
    """Run ``fn(client)`` with a ModelClient (no retries unless asked) for ``server_url``."""
    opts = {
        "base_url": server_url + "/v1",
        "model": "m",
        "timeout": 2.0,
        "max_retries": 0,
        **settings,
    }

    async def no_sleep(delay: float) -> None:
        pass

    async def main() -> T:
        client = ModelClient(ModelSettings(**opts), sleep=no_sleep)
        try:
            async with asyncio.timeout(10):
                return await fn(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


async def outcome(
    client: ModelClient, tools: list[dict[str, Any]] | None = None
) -> Completion | ModelError:
    """One completion, or the ModelError it failed with."""
    try:
        return await client.stream_completion(USER, tools)
    except ModelError as exc:
        return exc


def completions(server_url: str, count: int, **settings: Any) -> list[Completion | ModelError]:
    """``count`` completions in a row on one ModelClient."""

    async def main(client: ModelClient) -> list[Completion | ModelError]:
        return [await outcome(client) for _ in range(count)]

    return run_model(server_url, main, **settings)


def assert_retryable_failure(result: Completion | ModelError, needle: str) -> None:
    assert isinstance(result, ModelRequestFailed), result
    assert result.retryable and result.status is None
    assert needle in str(result).lower(), str(result)


# -- bodies ----------------------------------------------------------------------------------


def test_a_content_length_body_is_read_exactly_and_the_connection_reused(
    server: RawHTTPServer,
) -> None:
    server.push(Answer(response("200 OK", b"hello")), Answer(response("200 OK", b"again")))

    async def main(client: Any) -> list[bytes]:
        return [
            (await client.get(server.url + "/a")).content,
            (await client.get(server.url + "/b")).content,
        ]

    assert run_http(main) == [b"hello", b"again"]
    assert server.accepted == 1


def test_a_chunked_body_with_extensions_and_trailers_is_decoded(server: RawHTTPServer) -> None:
    body = (
        b"5;name=value\r\nhello\r\n"
        b"1 ; ext\r\n,\r\n"
        b'6;a=1;b="x"\r\n world\r\n'
        b"0;last\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n"
    )
    server.push(
        Answer(response("200 OK", body, CHUNKED, length=False)), Answer(response("200 OK", b"next"))
    )

    async def main(client: Any) -> list[bytes]:
        return [(await client.get(server.url)).content, (await client.get(server.url)).content]

    # the second answer parses on the same connection: the trailers were consumed exactly
    assert run_http(main) == [b"hello, world", b"next"]
    assert server.accepted == 1


def test_a_chunked_body_split_across_many_writes_is_reassembled(server: RawHTTPServer) -> None:
    text = b"".join(events("a streamed answer " * 20))
    server.push(
        Answer(
            response(
                "200 OK",
                chunked(*[text[i : i + 7] for i in range(0, len(text), 7)]),
                SSE,
                CHUNKED,
                length=False,
            )
        )
    )

    async def main(client: Any) -> bytes:
        async with client.stream("GET", server.url) as r:
            return b"".join([piece async for piece in r.aiter_bytes()])

    assert run_http(main) == text


def test_a_close_delimited_body_runs_to_the_end_of_the_connection(server: RawHTTPServer) -> None:
    server.push(
        Answer(response("200 OK", b"until the end", length=False), close=True),
        Answer(response("200 OK", b"fresh")),
    )

    async def main(client: Any) -> list[bytes]:
        return [(await client.get(server.url)).content, (await client.get(server.url)).content]

    assert run_http(main) == [b"until the end", b"fresh"]
    assert server.accepted == 2


def test_204_and_head_responses_have_no_body(server: RawHTTPServer) -> None:
    server.push(
        Answer(response("204 No Content", length=False)),
        Answer(response("200 OK", b"", "Content-Length: 10", length=False)),
        Answer(response("200 OK", b"after")),
    )

    async def main(client: Any) -> list[tuple[int, bytes]]:
        out = []
        for method in ("DELETE", "HEAD", "GET"):
            r = await client.request(method, server.url)
            out.append((r.status_code, r.content))
        return out

    assert run_http(main) == [(204, b""), (200, b""), (200, b"after")]
    assert server.accepted == 1  # no body was waited for, and none was left in the way


def test_an_interim_100_continue_is_skipped_before_the_real_response(server: RawHTTPServer) -> None:
    server.push(
        Answer(
            b"HTTP/1.1 100 Continue\r\n\r\n"
            b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
            + response("200 OK", b"real", "X-Final: yes")
        )
    )

    async def main(client: Any) -> tuple[int, str, bytes]:
        r = await client.post(server.url, content=b"{}")
        return r.status_code, r.headers["x-final"], r.content

    assert run_http(main) == (200, "yes", b"real")


def test_a_body_larger_than_the_read_high_water_arrives_intact(server: RawHTTPServer) -> None:
    payload = bytes(range(256)) * (3 * 1024 * 1024 // 256)
    assert len(payload) > 2 * READ_HIGH_WATER
    server.push(Answer(response("200 OK", payload)), Answer(response("200 OK", b"next")))

    async def main(client: Any) -> list[bytes]:
        async with client.stream("GET", server.url) as r:
            await asyncio.sleep(0.2)  # let the socket fill the buffer past the high water
            big = b"".join([piece async for piece in r.aiter_bytes()])
        return [big, (await client.get(server.url)).content]

    big, after = run_http(main)
    assert len(big) == len(payload) and big == payload
    assert after == b"next" and server.accepted == 1


def test_a_large_streamed_completion_arrives_intact_through_the_model_client(
    server: RawHTTPServer,
) -> None:
    text = "0123456789abcdef" * (3 * 1024 * 1024 // 16)
    server.push(Answer(streamed(text)))
    [result] = completions(server.url, 1)
    assert isinstance(result, Completion) and result.content == text


def test_a_gzip_compressed_stream_is_decoded_for_the_model_client(server: RawHTTPServer) -> None:
    # the HTTP library asks for gzip (Accept-Encoding) and decodes it; the transport hands it
    # the raw bytes, as proxies in front of model servers sometimes compress event streams
    import zlib

    compressor = zlib.compressobj(wbits=31)  # gzip framing
    body = compressor.compress(b"".join(events("squeezed"))) + compressor.flush()
    half = len(body) // 2
    server.push(
        Answer(
            response(
                "200 OK",
                chunked(body[:half], body[half:]),
                SSE,
                CHUNKED,
                "Content-Encoding: gzip",
                length=False,
            )
        )
    )
    [result] = completions(server.url, 1)
    assert isinstance(result, Completion) and result.content == "squeezed"
    assert b"accept-encoding: gzip" in server.requests[0].head.lower()


def test_a_request_far_larger_than_the_socket_buffer_is_sent_whole(server: RawHTTPServer) -> None:
    # a long conversation: the write waits for the socket to drain (pause/resume writing)
    history = [{"role": "user", "content": f"message {i} " + "x" * 4000} for i in range(1000)]
    server.push(Answer(streamed("read it all")))

    async def main(client: ModelClient) -> Completion:
        return await client.stream_completion(history)

    result = run_model(server.url, main)
    assert result.content == "read it all"
    body = server.requests[0].data.partition(b"\r\n\r\n")[2]
    assert len(body) > 4_000_000 and json.loads(body)["messages"] == history


# -- keep-alive ------------------------------------------------------------------------------


def test_sequential_completions_reuse_one_connection(server: RawHTTPServer) -> None:
    server.push(*[Answer(streamed(f"answer {i}")) for i in range(3)])
    results = completions(server.url, 3)
    assert [r.content for r in results if isinstance(r, Completion)] == [
        "answer 0",
        "answer 1",
        "answer 2",
    ]
    assert server.accepted == 1 and [r.conn for r in server.requests] == [0, 0, 0]


def test_concurrent_requests_each_get_a_connection_and_both_are_pooled(
    server: RawHTTPServer,
) -> None:
    server.push(*[Answer(response("200 OK", b"x")) for _ in range(4)])

    async def main(client: Any) -> None:
        await asyncio.gather(client.get(server.url), client.get(server.url))
        await asyncio.gather(client.get(server.url), client.get(server.url))

    run_http(main)
    assert server.accepted == 2


def test_connection_close_from_the_server_is_honoured(server: RawHTTPServer) -> None:
    # the server keeps its socket open: only the header tells the client not to reuse it
    server.push(
        Answer(response("200 OK", b"one", "Connection: close")), Answer(response("200 OK", b"two"))
    )

    async def main(client: Any) -> list[bytes]:
        return [(await client.get(server.url)).content, (await client.get(server.url)).content]

    assert run_http(main) == [b"one", b"two"]
    assert server.accepted == 2 and [r.conn for r in server.requests] == [0, 1]
    assert server.wait_for("client_closed", 1)


@pytest.mark.parametrize(
    ("headers", "reused"),
    [
        ((), False),
        (("Connection: keep-alive",), True),
    ],
    ids=["plain", "keep-alive"],
)
def test_an_http10_response_is_kept_alive_only_when_it_says_so(
    server: RawHTTPServer, headers: tuple[str, ...], reused: bool
) -> None:
    server.push(
        Answer(response("200 OK", b"old", *headers, version="HTTP/1.0")),
        Answer(response("200 OK", b"new")),
    )

    async def main(client: Any) -> list[bytes]:
        return [(await client.get(server.url)).content, (await client.get(server.url)).content]

    assert run_http(main) == [b"old", b"new"]
    assert server.accepted == (1 if reused else 2)


def test_a_connection_idle_past_the_keepalive_expiry_is_not_reused(server: RawHTTPServer) -> None:
    server.push(
        Answer(response("200 OK", b"one")),
        Answer(response("200 OK", b"two")),
        Answer(response("200 OK", b"three")),
    )

    async def main() -> list[bytes]:
        transport = Http11Transport(keepalive_expiry=0.2)
        async with openai.DefaultAsyncHttpxClient(transport=transport, timeout=2.0) as client:
            out = [(await client.get(server.url)).content, (await client.get(server.url)).content]
            await asyncio.sleep(0.3)
            return [*out, (await client.get(server.url)).content]

    assert asyncio.run(main()) == [b"one", b"two", b"three"]
    assert [r.conn for r in server.requests] == [0, 0, 1]
    assert server.wait_for("client_closed", 2)  # the expired one was closed, then the last


@pytest.mark.parametrize("noticed", [True, False], ids=["eof-seen", "eof-unseen"])
def test_a_kept_alive_connection_closed_while_idle_is_replaced_transparently(
    server: RawHTTPServer, noticed: bool
) -> None:
    server.push(Answer(streamed("first"), close=True), Answer(streamed("second")))

    async def main(client: ModelClient) -> list[Completion | ModelError]:
        first = await outcome(client)
        assert server.wait_for("accepted", 1)
        time.sleep(0.2)  # noqa: ASYNC251 (the FIN reaches the kernel; the loop must not run)
        if noticed:
            await asyncio.sleep(0.1)  # now the loop has seen it
        return [first, await outcome(client)]

    results = run_model(server.url, main)  # max_retries=0: any resend is the transport's
    assert [r.content for r in results if isinstance(r, Completion)] == ["first", "second"]
    assert server.accepted == 2 and [r.conn for r in server.requests] == [0, 1]


def test_a_request_the_server_hung_up_on_without_answering_is_resent_once(
    server: RawHTTPServer,
) -> None:
    # a kept-alive connection the server closes as the request arrives (its idle timeout)
    server.push(Answer(streamed("first")), Answer(b"", close=True), Answer(streamed("second")))
    results = completions(server.url, 2)
    assert [r.content for r in results if isinstance(r, Completion)] == ["first", "second"]
    assert server.accepted == 2 and [r.conn for r in server.requests] == [0, 0, 1]
    assert server.requests[1].body == server.requests[2].body


def test_a_request_on_a_fresh_connection_the_server_hangs_up_on_is_not_resent(
    server: RawHTTPServer,
) -> None:
    server.push(Answer(b"", close=True), Answer(streamed("later")))
    failed, later = completions(server.url, 2)
    assert_retryable_failure(failed, "without a complete response")
    assert isinstance(later, Completion) and later.content == "later"
    assert [r.conn for r in server.requests] == [0, 1]


def test_a_kept_alive_connection_dropped_after_part_of_a_response_is_not_resent(
    server: RawHTTPServer,
) -> None:
    server.push(
        Answer(streamed("first")),
        Answer(b"HTTP/1.1 200 OK\r\nContent-Ty", close=True),
        Answer(streamed("third")),
    )
    first, cut, third = completions(server.url, 3)
    assert isinstance(first, Completion) and isinstance(third, Completion)
    assert_retryable_failure(cut, "in the middle of a response")
    assert [r.conn for r in server.requests] == [0, 0, 1]  # the cut request was sent once


# -- broken responses ------------------------------------------------------------------------

_STREAM = streamed("a long enough answer to cut")
_BODY = b"".join(events("a long enough answer to cut"))


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/ev",
        _STREAM[: _STREAM.index(b"data: [DONE]") - 40],
        response("200 OK", _BODY, SSE, length=False).replace(
            b"\r\n\r\n", f"\r\nContent-Length: {len(_BODY)}\r\n\r\n".encode(), 1
        )[:-60],
    ],
    ids=["mid-headers", "mid-chunk", "mid-content-length-body"],
)
def test_a_response_cut_short_is_a_retryable_failure_and_the_next_request_works(
    server: RawHTTPServer, data: bytes
) -> None:
    server.push(Answer(data, close=True), Answer(streamed("whole")))
    cut, whole = completions(server.url, 2)
    assert_retryable_failure(cut, "connection to the model endpoint")
    assert "closed the connection" in str(cut)
    assert isinstance(whole, Completion) and whole.content == "whole"


def test_a_cut_response_is_retried_by_the_model_client(server: RawHTTPServer) -> None:
    server.push(Answer(_STREAM[:-30], close=True), Answer(streamed("whole")))
    [result] = completions(server.url, 1, max_retries=1)
    assert isinstance(result, Completion) and result.content == "whole"
    assert result.attempts == 2


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"HTTP/1.1 OK\r\nContent-Length: 0\r\n\r\n", "malformed status line"),
        (b"ICY 200 OK\r\nContent-Length: 0\r\n\r\n", "malformed status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (
            response("200 OK", b"zz\r\nhello\r\n0\r\n\r\n", CHUNKED, length=False),
            "malformed chunk size",
        ),
        (
            response("200 OK", b"0x5\r\nhello\r\n0\r\n\r\n", CHUNKED, length=False),
            "malformed chunk size",
        ),
        (response("200 OK", b"5\r\nhelloXX0\r\n\r\n", CHUNKED, length=False), "no CRLF"),
        (response("200 OK", b"1" * 5000, CHUNKED, length=False), "chunk-size line too long"),
        (
            response("200 OK", b"hello", "Content-Length: 5", "Content-Length: 6", length=False),
            "conflicting Content-Length",
        ),
        (
            response("200 OK", b"hello", "Content-Length: five", length=False),
            "malformed Content-Length",
        ),
        (
            response("200 OK", b"hello", "Content-Length: +5", length=False),
            "malformed Content-Length",
        ),
        (response("200 OK", b"", "X-Big: " + "x" * (MAX_HEAD + 10)), "headers too long"),
    ],
    ids=[
        "no-status-code",
        "not-http",
        "header-without-colon",
        "chunk-size",
        "chunk-size-0x",
        "chunk-crlf",
        "chunk-line-length",
        "conflicting-length",
        "bad-length",
        "signed-length",
        "huge-headers",
    ],
)
def test_a_malformed_response_is_a_protocol_error_and_the_connection_is_dropped(
    server: RawHTTPServer, data: bytes, needle: str
) -> None:
    server.push(Answer(data), Answer(response("200 OK", b"fine")))

    async def main(client: Any) -> bytes:
        with pytest.raises(http.RemoteProtocolError, match=needle):
            await client.get(server.url)
        return (await client.get(server.url)).content

    assert run_http(main) == b"fine"
    assert server.accepted == 2


def test_headers_over_the_limit_fail_even_when_they_arrive_in_pieces(server: RawHTTPServer) -> None:
    head = b"HTTP/1.1 200 OK\r\n" + b"".join(
        b"X-H%d: %s\r\n" % (i, b"y" * 1000) for i in range(MAX_HEAD // 1000 + 2)
    )
    server.push(Answer(head))  # no blank line: the client must give up, not wait

    async def main(client: Any) -> None:
        with pytest.raises(http.RemoteProtocolError, match="headers too long"):
            await client.get(server.url)

    run_http(main)


def test_a_malformed_response_through_the_model_client_is_retryable(server: RawHTTPServer) -> None:
    server.push(Answer(b"HTTP/1.1 2OO OK\r\n\r\n"), Answer(streamed("ok")))
    bad, good = completions(server.url, 2)
    assert_retryable_failure(bad, "malformed status line")
    assert isinstance(good, Completion) and good.content == "ok"


# -- timeouts and refusals -------------------------------------------------------------------


def test_a_silent_server_is_a_retryable_timeout(server: RawHTTPServer) -> None:
    server.push(Answer(b""), Answer(streamed("awake")))  # the silent one never answers at all
    silent, awake = completions(server.url, 2, timeout=0.3)
    assert_retryable_failure(silent, "timed out")
    assert isinstance(awake, Completion) and awake.content == "awake"


def test_a_body_that_stalls_midway_is_a_retryable_timeout(server: RawHTTPServer) -> None:
    server.push(
        Answer(_STREAM[: _STREAM.index(b"data: [DONE]") - 40]),  # and then nothing
        Answer(streamed("moving")),
    )
    stalled, moving = completions(server.url, 2, timeout=0.3)
    assert_retryable_failure(stalled, "timed out")
    assert isinstance(moving, Completion) and moving.content == "moving"
    assert server.accepted == 2  # the stalled connection was not reused


def test_a_refused_connection_is_a_retryable_failure() -> None:
    with RawHTTPServer() as gone:
        url = gone.url
    [refused] = completions(url, 1)
    assert_retryable_failure(refused, "connection to the model endpoint")
    assert "cannot connect" in str(refused)


def test_connect_ahead_opens_a_connection_only_when_none_is_idle(server: RawHTTPServer) -> None:
    server.push(Answer(streamed("one")), Answer(streamed("two")))
    url = server.url + "/v1/chat/completions"

    async def main() -> list[str]:
        transport = Http11Transport()
        client = openai.DefaultAsyncHttpxClient(transport=transport, timeout=2.0)
        texts = []
        async with client:
            await transport.connect_ahead(url, 2.0)
            await transport.connect_ahead(url, 2.0)  # one is idle: nothing opened
            for _ in range(2):
                response = await client.post(url, content=b"{}")
                texts.append(response.text)
                await transport.connect_ahead(url, 2.0)  # the used one is idle again
            await transport.connect_ahead("ftp://127.0.0.1:1/x", 2.0)  # not HTTP: ignored
        await transport.connect_ahead(url, 2.0)  # closed: nothing opened
        return texts

    texts = asyncio.run(main())
    assert all("data: [DONE]" in text for text in texts)
    assert server.accepted == 1
    assert [r.conn for r in server.requests] == [0, 0]


def test_a_url_that_is_not_http_is_refused_by_the_transport() -> None:
    async def main() -> None:
        transport = Http11Transport()
        try:
            with pytest.raises(http.UnsupportedProtocol, match="'ftp'"):
                await transport.handle_async_request(http.Request("GET", "ftp://127.0.0.1/x"))
        finally:
            await transport.aclose()

    asyncio.run(main())


def test_connect_ahead_leaves_a_refused_connection_to_the_request() -> None:
    with RawHTTPServer() as gone:
        url = gone.url

    async def main() -> None:
        transport = Http11Transport()
        try:
            await transport.connect_ahead(url + "/v1/chat/completions", 2.0)  # no exception
        finally:
            await transport.aclose()

    asyncio.run(main())
    [refused] = completions(url, 1)  # the request itself reports it, as before
    assert_retryable_failure(refused, "connection to the model endpoint")


def test_requests_started_together_go_out_as_each_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cold pool, a burst's first request is sent before the last one is built (its
    connection is opened before the SDK's work), not after all of them are."""
    order: list[str] = []
    post, exchange = ModelClient._post, Http11Transport._exchange

    async def logged_post(self: ModelClient, *args: Any) -> None:
        order.append("built")
        await post(self, *args)

    async def logged_exchange(self: Http11Transport, *args: Any) -> Any:
        order.append("sent")
        return await exchange(self, *args)

    monkeypatch.setattr(ModelClient, "_post", logged_post)
    monkeypatch.setattr(Http11Transport, "_exchange", logged_exchange)

    async def burst(client: ModelClient) -> list[Completion | ModelError]:
        await outcome(client)  # the SDK's first request detects the platform on a thread
        pool = client._pool
        assert pool is not None
        for conns in pool._idle.values():  # cold: every request of the burst connects
            for conn in conns:
                conn.close()
        order.clear()
        return list(await asyncio.gather(*(outcome(client) for _ in range(8))))

    with ScriptedModelServer([reply(f"answer {i}") for i in range(-1, 8)]) as model:
        results = run_model(model.url, burst, base_url=model.url)
    assert sorted(r.content for r in results if isinstance(r, Completion)) == [
        f"answer {i}" for i in range(8)
    ]
    assert order.count("built") == order.count("sent") == 8
    assert order.index("sent") < len(order) - 1 - order[::-1].index("built"), order


# -- the request on the wire -----------------------------------------------------------------


def test_the_request_is_one_post_with_host_length_authorization_and_a_json_body(
    server: RawHTTPServer,
) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "calculate",
                "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
            },
        }
    ]
    server.push(Answer(streamed()))
    run_model(
        server.url, lambda client: client.stream_completion(USER, tools), api_key="sk-test-key"
    )
    [request] = server.requests
    assert bytes(server.connection_bytes[0]) == request.data  # nothing more was sent
    lines = request.head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert request.data.count(b" HTTP/1.1\r\n") == 1
    assert request.header("host") == [f"127.0.0.1:{server.port}".encode()]
    assert request.header("content-length") == [str(len(request.body)).encode()]
    assert request.header("authorization") == [b"Bearer sk-test-key"]
    assert request.header("transfer-encoding") == []
    body = json.loads(request.body)
    assert body["model"] == "m" and body["messages"] == USER and body["stream"] is True
    assert body["tools"] == tools


def test_without_an_api_key_a_placeholder_is_sent(server: RawHTTPServer) -> None:
    server.push(Answer(streamed()))
    completions(server.url, 1)
    assert server.requests[0].header("authorization") == [b"Bearer not-needed"]


def test_the_tools_sent_follow_the_tools_passed_when_they_change(server: RawHTTPServer) -> None:
    def tool(name: str) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": name, "description": "é ✓", "parameters": {"type": "object"}},
        }

    first, second = [tool("a"), tool("b")], [tool("a")]
    server.push(*[Answer(streamed()) for _ in range(4)])

    async def main(client: ModelClient) -> None:
        for tools in (first, first, second, [tool("a"), tool("b")]):
            await client.stream_completion(USER, tools)

    run_model(server.url, main)
    sent = [json.loads(r.body)["tools"] for r in server.requests]
    assert sent == [first, first, second, first]
    assert json.loads(fastjson.dumps(second)) == second


# -- the SDK's own transport ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "url", "proxied"),
    [
        ({}, "https://api.example.com/v1", False),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "https://api.example.com/v1", True),
        ({"https_proxy": "http://proxy:3128"}, "https://api.example.com/v1", True),
        ({"HTTP_PROXY": "http://proxy:3128"}, "http://127.0.0.1:8080/v1", True),
        ({"ALL_PROXY": "http://proxy:3128"}, "http://127.0.0.1:8080/v1", True),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "http://127.0.0.1:8080/v1", False),
        (
            {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "127.0.0.1,localhost"},
            "http://127.0.0.1:8080/v1",
            False,
        ),
        (
            {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": ".example.com"},
            "https://api.example.com/v1",
            False,
        ),
        (
            {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "*"},
            "https://api.example.com/v1",
            False,
        ),
    ],
    ids=[
        "none",
        "https",
        "https-lower",
        "http",
        "all",
        "other-scheme",
        "no-proxy-host",
        "no-proxy-domain",
        "no-proxy-star",
    ],
)
def test_proxied_says_whether_the_environment_routes_the_endpoint_through_a_proxy(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], url: str, proxied: bool
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert llm._proxied(url) is proxied


def test_the_httpx_transport_setting_still_streams_a_completion() -> None:
    with ScriptedModelServer([reply("through httpx")]) as model:
        [result] = completions(model.url.removesuffix("/v1"), 1, transport="httpx")
    assert isinstance(result, Completion) and result.content == "through httpx"


def test_a_proxied_endpoint_goes_through_the_proxy(
    server: RawHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", server.url)  # the raw server plays the proxy
    server.push(Answer(streamed("via proxy")))
    [result] = completions("http://model.invalid:8080", 1)
    assert isinstance(result, Completion) and result.content == "via proxy"
    head = server.requests[0].head
    assert head.startswith(b"POST http://model.invalid:8080/v1/chat/completions HTTP/1.1\r\n")


# -- closing ---------------------------------------------------------------------------------


def test_aclose_closes_pooled_connections(server: RawHTTPServer) -> None:
    server.push(Answer(response("200 OK", b"x")))

    async def main() -> tuple[int, int]:
        transport = Http11Transport()
        async with openai.DefaultAsyncHttpxClient(transport=transport, timeout=2.0) as client:
            await client.get(server.url)
            await asyncio.sleep(0.05)
            before = server.client_closed
        # leaving the client closed the transport
        with pytest.raises(http.ConnectError, match="closed"):
            await transport.handle_async_request(http.Request("GET", server.url))
        return before, server.accepted

    before, accepted = asyncio.run(main())
    assert before == 0 and accepted == 1
    assert server.wait_for("client_closed", 1)


def test_model_client_aclose_closes_its_connection(server: RawHTTPServer) -> None:
    server.push(Answer(streamed()))
    completions(server.url, 1)  # run_model closes the client at the end
    assert server.wait_for("client_closed", 1)


def test_a_response_abandoned_midway_is_not_pooled(server: RawHTTPServer) -> None:
    # larger than one socket read, so the body cannot have been buffered whole already
    server.push(
        Answer(response("200 OK", b"x" * 3 * READ_HIGH_WATER)), Answer(response("200 OK", b"y"))
    )

    async def main(client: Any) -> bytes:
        async with client.stream("GET", server.url) as r:
            async for _ in r.aiter_raw(10):
                break
        return (await client.get(server.url)).content

    assert run_http(main) == b"y"
    assert server.accepted == 2


def test_a_fully_read_body_whose_reader_stopped_early_leaves_its_pooled_connection_alone(
    server: RawHTTPServer,
) -> None:
    # The SSE reader stops at a malformed event after the whole (small) body arrived: the
    # connection is clean and goes back to the pool. The abandoned iteration is finalized later,
    # when it is collected; that must not close the connection, which by then is pooled or
    # carrying the next request (it did, and that request was then sent a second time).
    server.push(
        Answer(response("200 OK", b"data: {not json}\n\n", SSE)),
        Answer(response("200 OK", b"second")),
    )

    async def main(client: Any) -> bytes:
        r = await client.send(client.build_request("GET", server.url), stream=True)
        chunks = r.aiter_raw()
        assert await chunks.__anext__() == b"data: {not json}\n\n"
        await r.aclose()  # the reader gave up; the body was complete: pooled
        del r, chunks  # the abandoned generators are finalized by the loop once collected
        gc.collect()
        for _ in range(5):
            await asyncio.sleep(0)
        return bytes((await client.get(server.url)).content)

    assert run_http(main) == b"second"
    assert server.accepted == 1  # the pooled connection was still there to be reused


# --- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for ``localhost`` (not for 127.0.0.1), made by openssl."""
    import subprocess

    folder = tmp_path_factory.mktemp("tls")
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture
def tls_server(certificate: tuple[str, str]) -> Iterator[RawHTTPServer]:
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    with RawHTTPServer(tls=context) as srv:
        yield srv


def test_https_with_a_trusted_certificate_works_and_keeps_the_connection(
    tls_server: RawHTTPServer, certificate: tuple[str, str]
) -> None:
    import ssl

    tls_server.push(
        Answer(response("200 OK", b"secret one")), Answer(response("200 OK", b"secret two"))
    )
    url = f"https://localhost:{tls_server.port}"

    async def main() -> list[bytes]:
        trusted = ssl.create_default_context(cafile=certificate[0])
        client = openai.DefaultAsyncHttpxClient(transport=Http11Transport(trusted), timeout=5.0)
        async with client:
            return [(await client.get(url + "/a")).content, (await client.get(url + "/b")).content]

    assert asyncio.run(main()) == [b"secret one", b"secret two"]
    assert tls_server.accepted == 1
    assert tls_server.requests[0].head.startswith(b"GET /a HTTP/1.1\r\n")  # decrypted on our side


def test_https_refuses_an_untrusted_certificate_and_a_wrong_host_name(
    tls_server: RawHTTPServer, certificate: tuple[str, str]
) -> None:
    import ssl

    async def attempt(url: str, context: ssl.SSLContext) -> BaseException | None:
        client = openai.DefaultAsyncHttpxClient(transport=Http11Transport(context), timeout=5.0)
        async with client:
            try:
                await client.get(url)
            except http.ConnectError as exc:
                return exc
        return None

    untrusted = asyncio.run(
        attempt(f"https://localhost:{tls_server.port}", ssl.create_default_context())
    )
    assert untrusted is not None and "certificate" in str(untrusted).lower()
    wrong_name = asyncio.run(
        attempt(
            f"https://127.0.0.1:{tls_server.port}",
            ssl.create_default_context(cafile=certificate[0]),
        )
    )
    assert wrong_name is not None and "127.0.0.1" in str(wrong_name)
    assert tls_server.requests == []  # nothing was sent over an unverified connection


def test_the_model_client_speaks_https_with_the_ca_it_is_told_to_trust(
    tls_server: RawHTTPServer, certificate: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the daemon's own path: ModelClient builds the SDK's TLS context (SSL_CERT_FILE honoured)
    # and hands it to hermesd's transport
    monkeypatch.setenv("SSL_CERT_FILE", certificate[0])
    tls_server.push(Answer(streamed("over tls")))
    result = run_model(f"https://localhost:{tls_server.port}", lambda client: outcome(client))
    assert isinstance(result, Completion), result
    assert result.content == "over tls"
