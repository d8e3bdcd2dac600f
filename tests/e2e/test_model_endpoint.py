"""A real hermesd against real HTTP servers on 127.0.0.1: a base URL without a path, and a chat
request that is never sent twice behind the turn's back.

The no-resend rule: a POST may have been acted on even when no answer came (a model may have
started generating, a proxy may have billed it), so it is sent again only as a retry the turn
announces (a ``model.retry`` event), never silently by the HTTP layer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.support.daemon import DaemonProcess, send_and_follow
from tests.support.modelserver import ScriptedModelServer, calculator_rules, model_config
from tests.support.rawhttp import Answer, RawHTTPServer, chunked, response

CALCULATED = 'The result is: {"expression": "15 * 23", "result": 345}'


def test_a_base_url_without_a_path_completes_a_tool_turn(
    start: Callable[..., DaemonProcess],
) -> None:
    # as llama.cpp users write it: http://127.0.0.1:8080, no /v1
    with ScriptedModelServer(rules=calculator_rules) as model:
        d = start(config=model_config(model.root_url))
        with d.client() as c:
            sid = c.call("session.create")["id"]
            events = send_and_follow(c, sid, "What is 15 * 23?")
        assert events[-1]["status"] == "completed", events[-1]
        assert events[-1]["final_text"] == CALCULATED
        assert model.request_paths == ["/chat/completions"] * 2


def streamed(text: str) -> Answer:
    """A whole keep-alive answer streaming ``text``."""
    chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}
    body = chunked(f"data: {json.dumps(chunk)}\n\n".encode(), b"data: [DONE]\n\n")
    return Answer(
        response(
            "200 OK",
            body,
            "Content-Type: text/event-stream",
            "Transfer-Encoding: chunked",
            length=False,
        )
    )


HUNG_UP = Answer(close=True)  # the request read, the connection closed without a byte


def two_turns(d: DaemonProcess) -> list[list[dict[str, Any]]]:
    with d.client(timeout=30) as c:
        sid = c.call("session.create")["id"]
        return [send_and_follow(c, sid, "hi", timeout=30) for _ in range(2)]


def test_without_retries_a_post_the_endpoint_hung_up_on_is_sent_once_and_fails_clearly(
    start: Callable[..., DaemonProcess],
) -> None:
    with RawHTTPServer(streamed("first answer"), HUNG_UP) as server:
        # a configured window: the daemon asks no /v1/models, the script answers only the POSTs
        d = start(config=model_config(server.url + "/v1", max_retries=0, context_length=128000))
        first, second = two_turns(d)
        assert first[-1]["final_text"] == "first answer"
        assert [r.conn for r in server.requests] == [0, 0]  # on the kept-alive connection
    failed = second[-1]
    assert failed["status"] == "failed"
    assert "connection to the model endpoint" in failed["error"], failed["error"]
    assert not [e for e in second if e["type"] == "model.retry"]


def test_with_retries_every_copy_of_a_post_the_endpoint_sees_is_an_announced_retry(
    start: Callable[..., DaemonProcess],
) -> None:
    answers = [streamed("first answer"), HUNG_UP, HUNG_UP, streamed("third try")]
    with RawHTTPServer(*answers) as server:
        d = start(
            config=model_config(
                server.url + "/v1", max_retries=3, retry_max_wait=0.05, context_length=128000
            )
        )
        _, second = two_turns(d)
        copies = len(server.requests) - 1  # the second turn's
    retries = [e for e in second if e["type"] == "model.retry"]
    assert second[-1]["status"] == "completed" and second[-1]["final_text"] == "third try"
    assert copies == 1 + len(retries) == 3
    assert all("connection" in r["error"] for r in retries), retries
