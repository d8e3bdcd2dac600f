"""The scripted model server, driven through the real ``openai`` client."""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.daemon import REPO
from tests.support.modelserver import (
    ScriptedModelServer,
    Step,
    calculator_rules,
    call_tools,
    cut_stream,
    empty_choices,
    http_error,
    raw,
    reply,
    tool_call,
)

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as srv:
        yield srv


def client(server: ScriptedModelServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url, api_key="test", max_retries=0, timeout=5)


def complete(server: ScriptedModelServer, **kw: Any) -> Any:
    async def main() -> Any:
        async with client(server) as c:
            return await c.chat.completions.create(model="m", messages=USER, **kw)

    return asyncio.run(main())


def stream(server: ScriptedModelServer, **kw: Any) -> list[Any]:
    async def main() -> list[Any]:
        async with client(server) as c:
            s = await c.chat.completions.create(model="m", messages=USER, stream=True, **kw)
            return [chunk async for chunk in s]

    return asyncio.run(main())


def text_of(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_plain_reply_without_streaming(server: ScriptedModelServer) -> None:
    server.push(reply("hello there"))
    resp = complete(server)
    assert resp.choices[0].message.content == "hello there"
    assert resp.choices[0].finish_reason == "stop" and resp.usage.total_tokens > 0


def test_streamed_reply_arrives_in_pieces(server: ScriptedModelServer) -> None:
    server.push(reply("hello there, streaming world", chunk_chars=5))
    chunks = stream(server)
    assert text_of(chunks) == "hello there, streaming world"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 6
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_usage_is_sent_in_a_last_chunk_only_when_asked(server: ScriptedModelServer) -> None:
    server.push(reply("a"), reply("b"))
    assert all(c.usage is None for c in stream(server))
    last = stream(server, stream_options={"include_usage": True})[-1]
    assert last.choices == [] and last.usage.completion_tokens > 0


def test_parallel_tool_calls_without_streaming(server: ScriptedModelServer) -> None:
    server.push(
        call_tools(
            tool_call("calculate", {"expression": "2**16"}, "c1"),
            tool_call("unit_convert", {"value": 1}, "c2"),
        )
    )
    msg = complete(server).choices[0]
    assert msg.finish_reason == "tool_calls"
    assert [(t.id, t.function.name) for t in msg.message.tool_calls] == [
        ("c1", "calculate"),
        ("c2", "unit_convert"),
    ]
    assert json.loads(msg.message.tool_calls[0].function.arguments) == {"expression": "2**16"}


def test_streamed_tool_calls_send_id_and_name_once(server: ScriptedModelServer) -> None:
    server.push(call_tools(tool_call("calculate", {"expression": "1+2+3+4"}), chunk_chars=4))
    parts = [t for c in stream(server) if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert len(parts) > 2
    assert [p.function.name for p in parts if p.function.name] == ["calculate"]
    assert "".join(p.function.arguments for p in parts) == '{"expression": "1+2+3+4"}'


def test_llama_cpp_style_repeats_id_and_name_in_every_chunk(server: ScriptedModelServer) -> None:
    server.push(
        call_tools(tool_call("calculate", {"expression": "1+2"}), repeat_ids=True, chunk_chars=3)
    )
    parts = [t for c in stream(server) if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert len(parts) > 2 and all(p.function.name == "calculate" and p.id for p in parts)


def test_invalid_tool_call_json_is_sent_verbatim(server: ScriptedModelServer) -> None:
    server.push(call_tools(tool_call("calculate", '{"expression": "2+')))
    assert (
        complete(server).choices[0].message.tool_calls[0].function.arguments == '{"expression": "2+'
    )


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors(server: ScriptedModelServer, status: int) -> None:
    server.push(http_error(status, "boom"))
    with pytest.raises(openai.APIStatusError) as info:
        stream(server)
    assert info.value.status_code == status and "boom" in str(info.value)


def test_rate_limit_with_and_without_retry_after(server: ScriptedModelServer) -> None:
    server.push(http_error(429, retry_after=2), http_error(429))
    with pytest.raises(openai.RateLimitError) as first:
        stream(server)
    assert first.value.response.headers["retry-after"] == "2"
    with pytest.raises(openai.RateLimitError) as second:
        stream(server)
    assert "retry-after" not in second.value.response.headers


def test_delay_slows_the_response(server: ScriptedModelServer) -> None:
    server.push(reply("late", delay=0.2))
    started = time.monotonic()
    stream(server)
    assert time.monotonic() - started >= 0.2


def test_a_stream_cut_midway_is_a_connection_error(server: ScriptedModelServer) -> None:
    server.push(cut_stream("this will not finish", after=3))
    with pytest.raises(openai.APIConnectionError):
        stream(server)


def test_non_json_and_wrong_content_type_bodies(server: ScriptedModelServer) -> None:
    server.push(raw("<html>gateway</html>"), raw('{"no": "sse"}', content_type="text/plain"))
    assert stream(server) == []
    assert stream(server) == []


def test_empty_choices(server: ScriptedModelServer) -> None:
    server.push(empty_choices(), empty_choices())
    assert complete(server).choices == []
    assert all(c.choices == [] for c in stream(server))


def test_requests_are_recorded(server: ScriptedModelServer) -> None:
    server.push(reply("x"))
    stream(server, tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    assert server.last_request["messages"] == USER
    assert server.last_request["stream"] is True and server.last_request["tools"]


def test_an_exhausted_script_is_a_500(server: ScriptedModelServer) -> None:
    with pytest.raises(openai.InternalServerError, match="script exhausted"):
        stream(server)


def test_rules_answer_when_the_script_is_empty() -> None:
    with ScriptedModelServer(rules=lambda req: reply(f"{len(req['messages'])} messages")) as srv:
        assert complete(srv).choices[0].message.content == "1 messages"


def test_models_endpoint_and_keep_alive(server: ScriptedModelServer) -> None:
    server.push(reply("one"), reply("two"))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", "/v1/models")
    assert json.loads(conn.getresponse().read())["data"][0]["id"] == "scripted-model"
    sock = conn.sock
    for _ in range(2):
        conn.request(
            "POST",
            "/v1/chat/completions",
            json.dumps({"model": "m", "messages": USER, "stream": True}),
        )
        resp = conn.getresponse()
        assert resp.getheader("transfer-encoding") == "chunked"
        assert resp.read().endswith(b"data: [DONE]\n\n")
    assert conn.sock is sock  # same connection throughout
    conn.close()


def test_latency_applies_to_every_response() -> None:
    with ScriptedModelServer([reply("a")], latency=0.15) as srv:
        started = time.monotonic()
        complete(srv)
        assert time.monotonic() - started >= 0.15


@pytest.mark.parametrize(
    "prompt,tool,args",
    [
        ("2 的 16 次方是多少？", "calculate", {"expression": "2**16"}),
        (
            "将 100 华氏度转换为摄氏度",
            "unit_convert",
            {"value": 100.0, "from_unit": "F", "to_unit": "C"},
        ),
        ("2 乘以 π 的平方根是多少？", "calculate", {"expression": "2 * sqrt(pi)"}),
        ("1.5 TB 是多少 GB？", "unit_convert", {"value": 1.5, "from_unit": "TB", "to_unit": "GB"}),
        ("what is 2 to the power of 16", "calculate", {"expression": "2**16"}),
        ("convert 5 km to mi", "unit_convert", {"value": 5.0, "from_unit": "km", "to_unit": "mi"}),
        ("what is (3 + 4) * 2?", "calculate", {"expression": "(3 + 4) * 2"}),
    ],
)
def test_calculator_rules_call_the_guide_tools(prompt: str, tool: str, args: dict) -> None:
    step = calculator_rules({"messages": [{"role": "user", "content": prompt}]})
    assert [(c.name, c.arguments) for c in step.tool_calls] == [(tool, args)]


def test_calculator_rules_answer_with_the_tool_result() -> None:
    step = calculator_rules({"messages": [{"role": "tool", "content": '{"result": 65536}'}]})
    assert isinstance(step, Step) and "65536" in (step.content or "")


def test_runs_as_a_separate_process_and_prints_its_url() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "tests.support.modelserver", "--port", "0", "--script", "rules"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")

            async def main() -> Any:
                async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as c:
                    return await c.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "1.5 TB in GB"}]
                    )

            msg = asyncio.run(main()).choices[0].message
            assert msg.tool_calls[0].function.name == "unit_convert"
        finally:
            proc.terminate()
            proc.wait(5)


# -- the asyncio engine (tests.support.modelserver_async), used by bench/turn.py -----------------


@pytest.fixture
def async_url() -> Iterator[str]:
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.modelserver",
            "--engine",
            "asyncio",
            "--port",
            "0",
            "--script",
            "rules",
            "--latency",
            "0.05",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
            yield url
        finally:
            proc.terminate()
            proc.wait(5)


def test_the_asyncio_engine_answers_like_the_threaded_one(async_url: str) -> None:
    # the same rules and the same event stream, streamed and not, on one kept-alive
    # connection, each answer after the latency
    question = [{"role": "user", "content": "What is 15 * 23?"}]

    async def main() -> tuple[Any, list[Any], Any, float]:
        async with openai.AsyncOpenAI(
            base_url=async_url, api_key="x", max_retries=0, timeout=5
        ) as c:
            started = time.monotonic()
            plain = await c.chat.completions.create(model="m", messages=question)
            elapsed = time.monotonic() - started
            s = await c.chat.completions.create(
                model="m", messages=question, stream=True, stream_options={"include_usage": True}
            )
            chunks = [chunk async for chunk in s]
            answer = await c.chat.completions.create(
                model="m",
                messages=[
                    *question,
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "calculate", "arguments": "{}"},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "345"},
                ],
                stream=True,
            )
            return plain, chunks, [chunk async for chunk in answer], elapsed

    plain, chunks, answer, elapsed = asyncio.run(main())
    call = plain.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "calculate",
        {"expression": "15 * 23"},
    )
    assert elapsed >= 0.05
    streamed = [
        c.choices[0].delta.tool_calls[0]
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
    ]
    assert streamed[0].function.name == "calculate"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert text_of(answer) == "The result is: 345"


def test_the_asyncio_engine_refuses_what_is_not_a_chat_completion(async_url: str) -> None:
    host, port = async_url.removeprefix("http://").removesuffix("/v1").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=b"{not json",
            headers={"content-type": "application/json"},
        )
        first = conn.getresponse()
        assert (first.status, b"not a chat completion" in first.read()) == (400, True)
        conn.request("POST", "/v1/embeddings", body=b"{}")  # same connection: still served
        second = conn.getresponse()
        assert second.status == 400
        second.read()
    finally:
        conn.close()
