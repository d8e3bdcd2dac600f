"""LeanAsyncClient builds the same requests as the SDK's own HTTP client, only cheaper."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from hermesd.model.client import ModelClient, ModelSettings
from hermesd.model.http11 import Http11Transport
from hermesd.model.httpclient import LeanAsyncClient, http
from tests.support.modelserver import ScriptedModelServer, reply

URL = "http://127.0.0.1:9/v1/chat/completions"
HEADERS = [
    ("Accept", "application/json"),
    ("Content-Type", "application/json"),
    ("User-Agent", "AsyncOpenAI/Python 3"),
    ("Authorization", "Bearer sk-test"),
    ("X-Extra", "two"),
    ("x-extra", "values"),
]


@pytest.fixture
def clients() -> Iterator[tuple[Any, Any]]:
    lean, stock = LeanAsyncClient(), openai.DefaultAsyncHttpxClient()
    yield lean, stock
    asyncio.run(lean.aclose())
    asyncio.run(stock.aclose())


def shape(request: Any) -> tuple[Any, ...]:
    return (
        request.method,
        str(request.url),
        request.headers.multi_items(),
        request.read(),
        request.extensions,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"content": b'{"model":"m"}', "headers": HEADERS, "timeout": http.Timeout(30.0)},
        {"content": b"", "headers": [], "timeout": 5.0},
        # the library's own path: cookies, query, JSON, relative URL, no timeout, extensions
        {"content": b"{}", "headers": HEADERS, "timeout": 5.0, "cookies": {"a": "b"}},
        {"content": b"{}", "headers": HEADERS, "timeout": 5.0, "params": {"q": "1"}},
        {"json": {"a": 1}, "headers": HEADERS, "timeout": 5.0},
        {"content": b"{}", "headers": HEADERS},
        {"content": b"{}", "headers": HEADERS, "timeout": 5.0, "extensions": {"trace": None}},
        {"content": b"{}", "headers": dict(HEADERS[:3]), "timeout": 5.0},
    ],
)
def test_requests_are_built_exactly_as_the_sdk_client_builds_them(
    clients: tuple[Any, Any], kwargs: dict[str, Any]
) -> None:
    lean, stock = clients
    for _ in range(2):  # the second one from the caches
        assert shape(lean.build_request("POST", URL, **kwargs)) == shape(
            stock.build_request("POST", URL, **kwargs)
        )


def test_a_relative_url_is_merged_with_the_base_url(clients: tuple[Any, Any]) -> None:
    lean = LeanAsyncClient(base_url="http://127.0.0.1:9/v1/")
    try:
        request = lean.build_request(
            "POST", "chat/completions", content=b"{}", headers=HEADERS, timeout=5.0
        )
        assert str(request.url) == URL
    finally:
        asyncio.run(lean.aclose())


def test_each_request_gets_headers_of_its_own_and_client_changes_are_seen(
    clients: tuple[Any, Any],
) -> None:
    lean, stock = clients
    first = lean.build_request("POST", URL, content=b"{}", headers=HEADERS, timeout=5.0)
    first.headers["X-Mutated"] = "yes"
    second = lean.build_request("POST", URL, content=b"{}", headers=HEADERS, timeout=5.0)
    assert "x-mutated" not in second.headers
    for client in clients:
        client.headers["X-Client-Wide"] = "set later"
    assert shape(
        lean.build_request("POST", URL, content=b"{}", headers=HEADERS, timeout=5.0)
    ) == shape(stock.build_request("POST", URL, content=b"{}", headers=HEADERS, timeout=5.0))
    assert (
        lean.build_request("POST", URL, content=b"{}", headers=HEADERS, timeout=5.0).headers[
            "x-client-wide"
        ]
        == "set later"
    )


def test_the_model_client_sends_through_it_and_takes_the_cached_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[object] = []
    real_uuid4 = uuid.uuid4
    monkeypatch.setattr(uuid, "uuid4", lambda: made.append(1) or real_uuid4())
    with ScriptedModelServer() as server:
        server.push(reply("one"), reply("two"))
        model = ModelClient(ModelSettings(base_url=server.url, model="m", api_key="sk-lean"))

        async def main() -> list[str]:
            try:
                texts = []
                for _ in range(2):
                    done = await model.stream_completion([{"role": "user", "content": "hi"}])
                    texts.append(done.content)
                client = model._shared._client
                assert isinstance(client, LeanAsyncClient)
                assert isinstance(client._transport, Http11Transport)
                assert list(client._urls) == [server.url + "/chat/completions"]
                assert len(client._merged) == 1  # both rounds: the same merged headers
                return texts
            finally:
                await model.aclose()

        assert asyncio.run(main()) == ["one", "two"]
        sent = server.request_headers
        assert [h["authorization"] for h in sent] == ["Bearer sk-lean"] * 2
        assert sent[0] == sent[1]
    assert made == []  # the request's idempotency key is ours: no uuid4 per request
