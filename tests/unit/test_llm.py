"""The model client: accumulation, retries and errors, against the scripted model server."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from hermesd.daemon import config
from hermesd.model.client import (
    Completion,
    ModelClient,
    ModelNotConfigured,
    ModelRequestFailed,
    ModelResponseInvalid,
    ModelSettings,
    RetryInfo,
    StreamAccumulator,
    parse_retry_after,
)
from hermesd.model.stream import read_chunks
from tests.support.modelserver import (
    ScriptedModelServer,
    Step,
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


class Run:
    """A ModelClient whose retry waits are recorded instead of slept."""

    def __init__(self, server_url: str, **settings: Any) -> None:
        self.sleeps: list[float] = []
        self.events: list[dict[str, Any]] = []
        self.retries: list[RetryInfo] = []
        opts = {"base_url": server_url, "model": "test-model", "timeout": 5.0, **settings}

        async def sleep(delay: float) -> None:
            self.sleeps.append(delay)

        self.client = ModelClient(ModelSettings(**opts), sleep=sleep)

    def __call__(
        self, messages: list[dict[str, Any]] = USER, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        async def on_retry(info: RetryInfo) -> None:
            self.retries.append(info)

        async def main() -> Completion:
            try:
                return await self.client.stream_completion(
                    messages, tools, on_event=self.events.append, on_retry=on_retry
                )
            finally:
                await self.client.aclose()

        return asyncio.run(main())


# -- accumulator ------------------------------------------------------------------------------


def chunk(
    *calls: dict[str, Any], content: str | None = None, finish: str | None = None
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if calls:
        delta["tool_calls"] = list(calls)
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def part(
    index: int | None = None,
    id: str | None = None,
    name: str | None = None,
    args: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"function": {}}
    if index is not None:
        out["index"] = index
    if id:
        out["id"] = id
    if name:
        out["function"]["name"] = name
    if args is not None:
        out["function"]["arguments"] = args
    return out


def test_accumulates_text_and_emits_deltas() -> None:
    events: list[dict[str, Any]] = []
    acc = StreamAccumulator(events.append)
    for text in ("Hel", "lo"):
        acc.add(chunk(content=text))
        acc.flush()  # one read each
    acc.add(chunk(finish="stop"))
    assert acc.message() == {"role": "assistant", "content": "Hello"}
    assert [e["text"] for e in events] == ["Hel", "lo"] and acc.finish_reason == "stop"


def test_text_of_one_read_is_one_delta_and_order_is_kept() -> None:
    events: list[dict[str, Any]] = []
    acc = StreamAccumulator(events.append)
    for text in ("Let", " me", " check"):  # three chunks in one read
        acc.add(chunk(content=text))
    assert events == [] and not acc.emitted
    acc.add(chunk(part(0, "call_1", "calculate", "{}")))  # the text goes out before the call
    acc.add(chunk(content="!"))
    assert [(e["type"], e.get("text")) for e in events] == [
        ("text.delta", "Let me check"),
        ("tool_call.started", None),
    ]
    acc.flush()
    acc.flush()  # nothing new: nothing sent
    assert events[-1] == {"type": "text.delta", "text": "!"} and len(events) == 3
    assert acc.message()["content"] == "Let me check!" and len(events) == 3


def test_repeated_ids_and_names_are_kept_once() -> None:
    events: list[dict[str, Any]] = []
    acc = StreamAccumulator(events.append)
    for piece in ('{"expr', 'ession": ', '"2**16"}'):
        acc.add(chunk(part(0, "call_1", "calculate", piece)))
    [call] = acc.message()["tool_calls"]
    assert call == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "calculate", "arguments": '{"expression": "2**16"}'},
    }
    assert [e for e in events if e["type"] == "tool_call.started"] == [
        {"type": "tool_call.started", "index": 0, "id": "call_1", "name": "calculate"}
    ]


def test_parallel_tool_calls_are_kept_apart_by_index() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(part(0, "a", "calculate", '{"x":'), part(1, "b", "unit_convert", "")))
    acc.add(chunk(part(1, args='{"v": 2}')))
    acc.add(chunk(part(0, args=" 1}")))
    calls = acc.message()["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("a", "calculate", '{"x": 1}'),
        ("b", "unit_convert", '{"v": 2}'),
    ]


def test_chunks_without_index_continue_the_call_until_a_new_id() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(part(None, "a", "f", '{"x"')))
    acc.add(chunk(part(None, None, None, ": 1}")))
    acc.add(chunk(part(None, "b", "g", "{}")))
    calls = acc.message()["tool_calls"]
    assert [(c["id"], c["function"]["arguments"]) for c in calls] == [
        ("a", '{"x": 1}'),
        ("b", "{}"),
    ]


def test_missing_ids_and_arguments_get_sane_defaults() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(part(0, None, "get_time", "")))
    [call] = acc.message()["tool_calls"]
    assert call["id"].startswith("call_") and call["function"]["arguments"] == "{}"


def test_a_name_sent_in_fragments_is_joined() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(part(0, "a", "unit_")))
    acc.add(chunk(part(0, None, "convert", "{}")))
    assert acc.message()["tool_calls"][0]["function"]["name"] == "unit_convert"


# -- against the server -----------------------------------------------------------------------


def test_streams_text_and_reports_usage(server: ScriptedModelServer) -> None:
    server.push(reply("Hello from the model", chunk_chars=4))
    run = Run(server.url)
    done = run()
    assert done.content == "Hello from the model" and done.finish_reason == "stop"
    assert done.usage and done.usage["total_tokens"] > 0
    assert "".join(e["text"] for e in run.events if e["type"] == "text.delta") == done.content
    assert server.last_request["stream_options"] == {"include_usage": True}


def test_tools_are_sent_and_parallel_calls_returned(server: ScriptedModelServer) -> None:
    tools = [{"type": "function", "function": {"name": "calculate", "parameters": {}}}]
    server.push(
        call_tools(
            tool_call("calculate", {"expression": "1"}),
            tool_call("calculate", {"expression": "2"}),
            repeat_ids=True,
        )
    )
    done = Run(server.url)(tools=tools)
    assert server.last_request["tools"] == tools
    assert [json.loads(c["function"]["arguments"]) for c in done.tool_calls] == [
        {"expression": "1"},
        {"expression": "2"},
    ]
    assert done.finish_reason == "tool_calls"


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_are_retried(server: ScriptedModelServer, status: int) -> None:
    server.push(http_error(status), reply("recovered"))
    run = Run(server.url)
    assert run().content == "recovered"
    assert len(run.sleeps) == 1 and 0 < run.sleeps[0] <= 0.5
    assert run.retries[0].error.status == status  # type: ignore[attr-defined]


def test_retry_after_is_honoured_up_to_the_cap(server: ScriptedModelServer) -> None:
    server.push(http_error(429, retry_after=0.25), http_error(429, retry_after=100), reply("ok"))
    run = Run(server.url, retry_max_wait=1.0)
    assert run().content == "ok"
    assert run.sleeps == [0.25, 1.0]


def test_backoff_grows_exponentially_without_retry_after(server: ScriptedModelServer) -> None:
    server.push(*[http_error(429)] * 3, reply("ok"))
    run = Run(server.url, backoff_base=1.0, retry_max_wait=100)
    run()
    assert [0.5 <= d <= 1 for d in run.sleeps] == [True, False, False]
    assert 1 <= run.sleeps[1] <= 2 and 2 <= run.sleeps[2] <= 4


def test_gives_up_after_max_retries(server: ScriptedModelServer) -> None:
    server.push(*[http_error(503, "overloaded")] * 3)
    run = Run(server.url, max_retries=2)
    with pytest.raises(ModelRequestFailed, match=r"HTTP 503: overloaded \(after 3 attempts\)"):
        run()
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(server: ScriptedModelServer) -> None:
    server.push(http_error(401, "bad key"))
    with pytest.raises(ModelRequestFailed) as info:
        Run(server.url)()
    assert info.value.status == 401 and len(server.requests) == 1


def test_rejected_stream_options_fall_back_to_plain_streaming() -> None:
    with ScriptedModelServer([reply("one"), reply("two")], reject_stream_options=True) as srv:
        run = Run(srv.url)
        assert run().content == "one"
        assert "stream_options" not in srv.requests[-1]
        assert run().content == "two"
        assert len(srv.requests) == 3  # only the first answer needed a second try
        assert run.sleeps == []


def test_a_refusal_of_stream_options_is_remembered_per_base_url() -> None:
    with (
        ScriptedModelServer([reply("a1"), reply("a2")], reject_stream_options=True) as refusing,
        ScriptedModelServer([reply("b1")]) as accepting,
    ):
        run = Run(refusing.url)
        assert run().content == "a1"
        run.client.settings = ModelSettings(base_url=accepting.url, model="m", timeout=5.0)
        assert run().content == "b1"
        assert accepting.requests[0]["stream_options"] == {"include_usage": True}
        run.client.settings = ModelSettings(base_url=refusing.url, model="m", timeout=5.0)
        assert run().content == "a2"
        assert len(refusing.requests) == 3  # back on the refusing endpoint: not asked again


def test_a_bad_request_unrelated_to_stream_options_still_fails(server: ScriptedModelServer) -> None:
    server.push(http_error(400, "context too long"), http_error(400, "context too long"))
    run = Run(server.url)
    with pytest.raises(ModelRequestFailed, match="context too long"):
        run()
    assert run.client._without_usage == set()


def test_a_stream_cut_midway_is_retried_and_flagged(server: ScriptedModelServer) -> None:
    server.push(cut_stream("partial answer", after=3), reply("full answer"))
    run = Run(server.url)
    assert run().content == "full answer"
    assert run.retries[0].discarded_output is True
    assert "connection" in str(run.retries[0].error)


def test_an_unreachable_endpoint_fails_after_retries() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    run = Run(f"http://127.0.0.1:{port}/v1", max_retries=1)
    with pytest.raises(ModelRequestFailed, match="connection to the model endpoint") as info:
        run()
    assert info.value.status is None and len(run.sleeps) == 1


def test_a_slow_endpoint_times_out(server: ScriptedModelServer) -> None:
    server.push(reply("late", delay=1.0))
    with pytest.raises(ModelRequestFailed, match=r"timed out after 0\.2s"):
        Run(server.url, timeout=0.2, max_retries=0)()


@pytest.mark.parametrize(
    "step,message",
    [
        (raw("<html>502 Bad Gateway</html>"), "content-type: text/html"),
        (raw('{"choices": []}', content_type="application/json"), "OpenAI-compatible"),
        (empty_choices(), "empty choices"),
        (raw("data: {not json}\n\n", content_type="text/event-stream"), "malformed"),
    ],
)
def test_invalid_responses_are_reported(
    server: ScriptedModelServer, step: Step, message: str
) -> None:
    server.push(step)
    with pytest.raises(ModelResponseInvalid, match=message):
        Run(server.url)()
    assert len(server.requests) == 1


def test_not_configured_says_what_to_set() -> None:
    with pytest.raises(ModelNotConfigured, match=r"model\.base_url and model\.default"):
        Run("")()
    with pytest.raises(ModelNotConfigured, match=r"model\.default"):
        ModelSettings(base_url="http://x/v1", model=None).check()


def test_settings_come_from_config_then_environment() -> None:
    cfg = config.parse("model:\n  default: llama\n  max_retries: 5\n  retry_max_wait: 2\n")
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-env"}
    s = ModelSettings.from_config(cfg, env)
    assert (s.base_url, s.model, s.api_key, s.max_retries, s.retry_max_wait) == (
        "http://127.0.0.1:9/v1",
        "llama",
        "sk-env",
        5,
        2.0,
    )
    cfg = config.parse("model:\n  base_url: http://h/v1\n  api_key: sk-cfg\n")
    s = ModelSettings.from_config(cfg, env)
    assert (s.base_url, s.api_key) == ("http://h/v1", "sk-cfg")


def test_retry_after_header_forms() -> None:
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_importing_the_client_module_does_not_import_openai() -> None:
    code = "import sys, hermesd.model.client, hermesd.agent.loop; print('openai' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


# -- the event stream (hermesd.model.stream) -------------------------------------------------------


def sse(*events: str, end: str = "\n") -> str:
    return "".join(f"data: {e}{end}{end}" for e in events)


TEXT_CHUNK = json.dumps(chunk(content="hello"))
STOP_CHUNK = json.dumps(chunk(finish="stop"))


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_event_stream_line_ends_lf_crlf_and_cr_all_work(
    server: ScriptedModelServer, end: str
) -> None:
    server.push(
        raw(sse(TEXT_CHUNK, STOP_CHUNK, "[DONE]", end=end), content_type="text/event-stream")
    )
    done = Run(server.url)()
    assert done.content == "hello" and done.finish_reason == "stop"


def test_event_stream_comments_other_fields_and_split_data_lines_are_understood(
    server: ScriptedModelServer,
) -> None:
    half = 1  # after the opening brace: the joining newline is JSON whitespace
    body = (
        ": keep-alive comment\n\nevent: message\nid: 7\n"
        f"data: {TEXT_CHUNK[:half]}\ndata:{TEXT_CHUNK[half:]}\n\n"
        f"data: {STOP_CHUNK}\n\ndata: [DONE]\n\n"
    )
    server.push(raw(body, content_type="text/event-stream"))
    assert Run(server.url)().content == "hello"


def test_events_after_done_are_ignored(server: ScriptedModelServer) -> None:
    body = sse(TEXT_CHUNK, STOP_CHUNK, "[DONE]", json.dumps(chunk(content=" more")))
    server.push(raw(body, content_type="text/event-stream"))
    assert Run(server.url)().content == "hello"


def test_an_error_event_in_the_stream_is_reported_with_its_message(
    server: ScriptedModelServer,
) -> None:
    error = json.dumps({"error": {"message": "context length exceeded", "type": "invalid"}})
    server.push(raw(sse(TEXT_CHUNK, error), content_type="text/event-stream"))
    with pytest.raises(ModelRequestFailed, match="context length exceeded"):
        Run(server.url, max_retries=0)()


class Reads:
    """A response whose body arrives in the given reads (what ``read_chunks`` is handed)."""

    http_version = "HTTP/2"  # nothing to drain after [DONE]
    request = None

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for data in self.reads:
            yield data


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_events_split_across_reads_anywhere_are_read_whole(end: str, size: int) -> None:
    body = sse(TEXT_CHUNK, json.dumps(chunk(content=" world")), STOP_CHUNK, "[DONE]", end=end)
    data = body.encode()
    acc = StreamAccumulator()
    reads = [data[i : i + size] for i in range(0, len(data), size)]
    asyncio.run(read_chunks(Reads(reads), acc.add, acc.flush))
    assert acc.message()["content"] == "hello world" and acc.finish_reason == "stop"
