"""``/v1/models``, ``/v1/chat/completions`` and ``/v1/responses``: a turn as OpenAI clients see it.

Stateless by default, as the reference's API server: a chat completion runs in a fresh session
(platform ``api``) holding the request's earlier user/assistant messages (``session.create``'s
``history``), and its last user message is the turn. ``X-Hermes-Session-Id`` binds the request
to an existing session instead (its stored history is used, the body's earlier messages are
not). Every answer names its session in ``X-Hermes-Session-Id``, so an approval the turn waits
for can be listed and answered (``/v1/sessions/{id}/approvals``, ``hermesctl``). A response of
``/v1/responses`` is named after its session and turn; ``previous_response_id`` continues that
session. A stateless chat completion's session is ephemeral: deleted once the turn is over (or
its client gone), unless the body says ``"store": true`` (OpenAI's flag for keeping a
completion); the sessions of ``/v1/responses`` are kept (``previous_response_id`` needs them).
Everything goes through `hermesd.http.door` as the token's identity.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from hermesd.http.common import BodyBounds, HttpError, identity, read_json, sse
from hermesd.http.door import Door, Link
from hermesd.http.tokens import Identity

SESSION_HEADER = "X-Hermes-Session-Id"
MODEL_NAME = "hermes-agent"

log = logging.getLogger(__name__)
DONE = sse("[DONE]")  # the last chunk of a streamed chat completion


def _text(content: Any) -> str:
    """A message's content as text (the text parts of a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


def conversation(messages: Any) -> tuple[list[dict[str, str]], str, str]:
    """(earlier user/assistant messages, the last user message, the system messages' text)
    of a chat request; the system text goes on top of the daemon's prompt for this turn only,
    as the reference's API server does."""
    if not isinstance(messages, list) or not messages:
        raise HttpError(400, "'messages' must be a non-empty list", "invalid_messages")
    kept, system = [], []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise HttpError(400, f"messages[{i}] must be an object", "invalid_messages")
        if m.get("role") in ("user", "assistant"):
            kept.append({"role": str(m["role"]), "content": _text(m.get("content"))})
        elif m.get("role") in ("system", "developer") and _text(m.get("content")).strip():
            system.append(_text(m.get("content")))
    if not kept or kept[-1]["role"] != "user" or not kept[-1]["content"].strip():
        raise HttpError(400, "the last message must be a user message with text", "no_user_message")
    return kept[:-1], kept[-1]["content"], "\n".join(system)


class OpenAIRoutes:
    """The OpenAI-compatible endpoints, over a `Door`."""

    def __init__(self, door: Door, bounds: BodyBounds) -> None:
        self.door = door
        self.bounds = bounds
        self._forgetting: set[asyncio.Task[None]] = set()  # deletions of ephemeral sessions

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: the agent, under its name and the configured model's."""
        status = await self.door.call(identity(request), "status")
        names = [MODEL_NAME] + ([status["model"]] if status.get("model") else [])
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "hermesd"} for n in names]
        return JSONResponse({"object": "list", "data": data})

    async def _session(
        self, link: Link, request: Request, history: list[dict[str, str]]
    ) -> tuple[str, bool]:
        """The session of a chat request, and whether this request created it."""
        bound = request.headers.get(SESSION_HEADER, "").strip()
        if bound:
            return str((await link.call("session.get", {"session_id": bound}))["id"]), False
        created = await link.call(
            "session.create", {"attach": False, "platform": "api", "history": history}
        )
        return str(created["id"]), True

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``, streamed (SSE) or not."""
        body = await read_json(request, self.bounds)
        history, message, system = conversation(body.get("messages"))
        model = str(body.get("model") or MODEL_NAME)
        who = identity(request)
        link = self.door.open(who, "http:chat")
        if not body.get("stream"):
            with contextlib.closing(link):
                sid, created = await self._session(link, request, history)
                ephemeral = created and body.get("store") is not True
                try:
                    result = await link.call("session.send", _send(sid, message, system, wait=True))
                finally:
                    if ephemeral:
                        await self._forget(who, sid)
            head = {} if ephemeral else {SESSION_HEADER: sid}
            return JSONResponse(_completion(result, model), headers=head)
        sid, ephemeral = "", False
        try:
            sid, created = await self._session(link, request, history)
            ephemeral = created and body.get("store") is not True
            sent = await link.call("session.send", _send(sid, message, system))
        except BaseException:
            link.close()
            if ephemeral:
                self._forget_later(who, sid)
            raise
        chunks = _chat_chunks(link, sent["turn_id"], model)
        if ephemeral:
            chunks = self._then_forget(chunks, who, sid)
        return StreamingResponse(chunks, media_type="text/event-stream", headers=_sse_headers(sid))

    async def _forget(self, who: Identity, sid: str) -> None:
        """Delete an ephemeral session (its turn stops if it still runs)."""
        try:
            await self.door.call(who, "session.delete", {"session_id": sid})
        except Exception:  # gone already (deleted by a person), or the daemon is stopping
            log.info("ephemeral session %s was not deleted", sid, exc_info=True)

    def _forget_later(self, who: Identity, sid: str) -> None:
        """`_forget` from where nothing may be awaited (a cancelled stream)."""
        task = asyncio.get_running_loop().create_task(self._forget(who, sid))
        self._forgetting.add(task)
        task.add_done_callback(self._forgetting.discard)

    async def _then_forget(
        self, chunks: AsyncIterator[str], who: Identity, sid: str
    ) -> AsyncIterator[str]:
        """The stream's chunks, its session deleted before ``[DONE]`` (so a client that has
        read the whole stream finds it gone), or after the client went away."""
        done = False
        try:
            async for chunk in chunks:
                if chunk == DONE:
                    await self._forget(who, sid)
                    done = True
                yield chunk
        finally:
            if not done:
                self._forget_later(who, sid)

    async def responses(self, request: Request) -> Response:
        """``POST /v1/responses``: ``input`` (text or messages), ``previous_response_id``."""
        body = await read_json(request, self.bounds)
        given = body.get("input")
        history: list[dict[str, str]] = []
        system = body.get("instructions")
        if system is not None and not isinstance(system, str):
            raise HttpError(400, "'instructions' must be a string", "invalid_instructions")
        if isinstance(given, str):
            message = given
        else:
            history, message, from_messages = conversation(given)
            system = "\n".join(s for s in (system, from_messages) if s)
        if not message.strip():
            raise HttpError(400, "'input' has no text", "invalid_input")
        model = str(body.get("model") or MODEL_NAME)
        who = identity(request)
        link = self.door.open(who, "http:responses")
        try:
            sid = await self._responses_session(
                link, who, body.get("previous_response_id"), history
            )
            if not body.get("stream"):
                result = await link.call("session.send", _send(sid, message, system, wait=True))
                return JSONResponse(_response(sid, result, model), headers={SESSION_HEADER: sid})
            sent = await link.call("session.send", _send(sid, message, system))
        except BaseException:
            link.close()
            raise
        events = _response_events(link, sid, sent["turn_id"], model)
        return StreamingResponse(events, media_type="text/event-stream", headers=_sse_headers(sid))

    async def _responses_session(
        self, link: Link, who: Identity, previous: Any, history: list[dict[str, str]]
    ) -> str:
        if previous is None:
            created = await link.call(
                "session.create", {"attach": False, "platform": "api", "history": history}
            )
            return str(created["id"])
        if not isinstance(previous, str) or not previous.startswith("resp_") or "." not in previous:
            raise HttpError(404, f"no response '{previous}'", "response_not_found")
        sid = previous[5:].split(".", 1)[0]
        return str((await link.call("session.get", {"session_id": sid}))["id"])


def _send(sid: str, message: str, system: str | None, wait: bool = False) -> dict[str, Any]:
    sent: dict[str, Any] = {"session_id": sid, "message": message, "wait": wait, "platform": "api"}
    if system:
        sent["system"] = system  # this turn's only, as the reference's ephemeral system prompt
    return sent


def _sse_headers(sid: str) -> dict[str, str]:
    return {SESSION_HEADER: sid, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _usage(result: dict[str, Any]) -> dict[str, int]:
    usage = result.get("usage") or {}
    prompt, completion = (
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
    )
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _failed(result: dict[str, Any]) -> None:
    if result.get("status") == "failed":
        raise HttpError(
            502, f"the turn failed: {result.get('error')}", str(result.get("error_type") or "")
        )


def _completion(result: dict[str, Any], model: str) -> dict[str, Any]:
    _failed(result)
    return {
        "id": f"chatcmpl-{result['turn_id']}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.get("final_text") or ""},
                "finish_reason": "stop" if result.get("status") == "completed" else "length",
            }
        ],
        "usage": _usage(result),
    }


async def turn_events(link: Link, turn_id: str) -> AsyncIterator[dict[str, Any]]:
    """The ``session.event`` payloads of one turn, up to its ``turn.finished``; closes the link."""
    try:
        while True:
            kind, method, params = await link.inbox.get()
            if kind == "closed":
                return
            if kind != "notification" or method != "session.event":
                continue
            event = params[0]
            if event.get("turn_id") != turn_id:
                continue
            yield event
            if event.get("type") == "turn.finished":
                return
    finally:
        link.close()


async def _chat_chunks(link: Link, turn_id: str, model: str) -> AsyncIterator[str]:
    base = {
        "id": f"chatcmpl-{turn_id}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    yield sse(
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
    )
    async for event in turn_events(link, turn_id):
        if event["type"] == "text.delta":
            delta = {"content": event.get("text") or ""}
            yield sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        elif event["type"] == "turn.finished":
            if event.get("status") == "failed":
                error = {
                    "message": str(event.get("error")),
                    "type": "server_error",
                    "code": event.get("error_type"),
                }
                yield sse({"error": error})
            else:
                done = {"index": 0, "delta": {}, "finish_reason": "stop"}
                yield sse({**base, "choices": [done], "usage": _usage(event)})
    yield DONE


def _message_item(turn_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "id": f"msg_{turn_id}",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _response(sid: str, result: dict[str, Any], model: str) -> dict[str, Any]:
    _failed(result)
    usage = _usage(result)
    text = result.get("final_text") or ""
    return {
        "id": f"resp_{sid}.{result['turn_id']}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed" if result.get("status") == "completed" else "incomplete",
        "model": model,
        "output": [_message_item(result["turn_id"], text)],
        "output_text": text,
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
        },
    }


async def _response_events(link: Link, sid: str, turn_id: str, model: str) -> AsyncIterator[str]:
    rid = f"resp_{sid}.{turn_id}"
    shell = {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "in_progress",
        "output": [],
    }
    seq = 0

    def event(kind: str, **fields: Any) -> str:
        nonlocal seq
        seq += 1
        return sse({"type": kind, "sequence_number": seq, **fields}, event=kind)

    yield event("response.created", response=shell)
    item = f"msg_{turn_id}"
    yield event(
        "response.output_item.added", output_index=0, item=_message_item(turn_id, "", "in_progress")
    )
    text: list[str] = []
    async for ev in turn_events(link, turn_id):
        if ev["type"] == "text.delta":
            text.append(ev.get("text") or "")
            yield event(
                "response.output_text.delta",
                item_id=item,
                output_index=0,
                content_index=0,
                delta=text[-1],
                logprobs=[],
            )
        elif ev["type"] == "turn.finished":
            result = {**ev, "turn_id": turn_id}
            if ev.get("status") == "failed":
                yield event(
                    "response.failed",
                    response={
                        **shell,
                        "status": "failed",
                        "error": {"code": "server_error", "message": str(ev.get("error"))},
                    },
                )
                return
            final = ev.get("final_text") or "".join(text)
            yield event(
                "response.output_text.done",
                item_id=item,
                output_index=0,
                content_index=0,
                text=final,
                logprobs=[],
            )
            yield event(
                "response.output_item.done", output_index=0, item=_message_item(turn_id, final)
            )
            yield event(
                "response.completed",
                response=_response(sid, {**result, "final_text": final}, model),
            )
