"""``pre_auxiliary_call`` / ``post_auxiliary_call``: the hooks around one auxiliary model call.

An auxiliary call is a model request hermesd makes for something other than a turn's answer: a
compaction summary (``compression``), ``vision_analyze``'s look at an image (``vision``), a
plugin's ``call_llm`` or ``ctx.llm.complete(task=<key>)`` (the task's key). `run_auxiliary`
fires ``pre_auxiliary_call`` before the call and ``post_auxiliary_call`` after it, with the
answer or the error it raised, in upstream's payload (NousResearch/hermes-agent
``agent/auxiliary_hooks.py``): the ids of the turn it runs under (empty when none),
``aux_task`` and ``task`` (the same key), the request's sizes, then the usage and timing. They
are observers: returns are ignored and a failing callback never changes the call (the bus logs
it). hermesd retries inside one call, so a call fires one pair, ``retry_count`` saying how many
retries it took. The turn's ``*_api_request`` hooks never see auxiliary calls.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hermesd.model.client import Completion
from hermesd.model.stream import canonical_usage
from hermesd.runtime.hooks import HookBus

PRE = "pre_auxiliary_call"
POST = "post_auxiliary_call"


@dataclass(frozen=True)
class AuxiliaryCall:
    """What one auxiliary call is for, where it goes, and the turn it runs under."""

    aux_task: str
    model: str
    provider: str = "custom"
    base_url: str = ""
    session_id: str = ""
    turn_id: str = ""
    platform: str = ""


def wanted(hooks: HookBus | None) -> bool:
    """Whether a plugin observes auxiliary calls (else nothing is built for them)."""
    return hooks is not None and (hooks.has(PRE) or hooks.has(POST))


async def run_auxiliary(
    hooks: HookBus | None,
    call: AuxiliaryCall,
    messages: list[dict[str, Any]],
    send: Callable[[], Awaitable[Completion]],
    extra: Mapping[str, Any] | None = None,
) -> Completion:
    """``send()`` between the two hooks; its completion, or its exception re-raised."""
    if hooks is None or not wanted(hooks):
        return await send()
    started = time.time()
    request_id = f"aux-{uuid.uuid4().hex[:12]}"
    if hooks.has(PRE):
        await _pre(hooks, call, messages, extra or {}, started, request_id)
    try:
        completion = await send()
    except Exception as exc:
        if hooks.has(POST):
            await _post(hooks, call, len(messages), started, request_id, None, exc)
        raise
    if hooks.has(POST):
        await _post(hooks, call, len(messages), started, request_id, completion, None)
    return completion


async def _pre(
    hooks: HookBus,
    call: AuxiliaryCall,
    messages: list[dict[str, Any]],
    extra: Mapping[str, Any],
    started: float,
    request_id: str,
) -> None:
    chars = sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, dict))
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    system = first.get("content") if first.get("role") == "system" else ""
    body = {"model": call.model, "messages": list(messages), **extra}
    await hooks.invoke(
        "pre_auxiliary_call",
        session_id=call.session_id,
        task_id=call.session_id,
        turn_id=call.turn_id,
        platform=call.platform,
        aux_task=call.aux_task,
        task=call.aux_task,
        middleware_trace=[],
        api_request_id=request_id,
        retry_count=0,
        api_call_count=1,
        model=call.model,
        provider=call.provider,
        base_url=call.base_url,
        api_mode="chat_completions",
        streaming=False,
        started_at=started,
        message_count=len(messages),
        request_messages=list(messages),
        system_prompt=system if isinstance(system, str) else "",
        tool_count=len(extra.get("tools") or ()),
        approx_input_tokens=chars // 4,
        request_char_count=chars,
        max_tokens=extra.get("max_tokens"),
        request={"method": "POST", "body": body},
    )


async def _post(
    hooks: HookBus,
    call: AuxiliaryCall,
    count: int,
    started: float,
    request_id: str,
    completion: Completion | None,
    error: BaseException | None,
) -> None:
    ended = time.time()
    message = completion.message if completion is not None else {}
    content = message.get("content")
    tool_calls = list(message.get("tool_calls") or [])
    usage = canonical_usage(completion.usage) if completion is not None else None
    finish = completion.finish_reason if completion is not None else None
    model = (completion.model or call.model) if completion is not None else None
    said = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    await hooks.invoke(
        "post_auxiliary_call",
        session_id=call.session_id,
        task_id=call.session_id,
        turn_id=call.turn_id,
        platform=call.platform,
        aux_task=call.aux_task,
        task=call.aux_task,
        middleware_trace=[],
        api_request_id=request_id,
        retry_count=(completion.attempts - 1) if completion is not None else 0,
        api_call_count=completion.attempts if completion is not None else 1,
        model=call.model,
        provider=call.provider,
        base_url=call.base_url,
        api_mode="chat_completions",
        streaming=False,
        started_at=started,
        message_count=count,
        ended_at=ended,
        api_duration=max(0.0, ended - started),
        error=None if error is None else f"{type(error).__name__}: {error}"[:2000],
        error_type=None if error is None else type(error).__name__,
        finish_reason=finish,
        response_model=model,
        usage=usage,
        response=None
        if completion is None
        else {
            "model": model,
            "finish_reason": finish,
            "assistant_message": said,
            "usage": usage,
        },
        assistant_content_chars=len(content) if isinstance(content, str) else 0,
        assistant_tool_call_count=len(tool_calls),
    )
