"""Lifecycle hooks: the one table of hook names and the bus that calls plugin callbacks.

`HOOKS` declares every hook name plugins may register (docs/hermes-compat.md §5): the keyword
arguments the daemon passes, how a callback's return value is used, and a one-line description.
The invoker, the docs (docs/plugins.md and docs/hermes-compat.md, each checked by a test) and the
plugin loader all read it.

`HookBus` stores callbacks in registration order (= plugin load order) and calls them with
keyword arguments only, each callback getting just the parameters it declares unless it takes
``**kwargs``. Sync callbacks run on a worker thread, async ones are awaited; each is bounded by a
timeout. A callback that raises or times out is logged and skipped — except that a timed-out
``pre_tool_call`` callback blocks the tool (fail closed). This module knows nothing about
plugins beyond their key, and nothing about tools or sessions.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from hermesd.model.fastjson import valid_text
from hermesd.runtime.hooks_surfaces import PluginSurfaces
from hermesd.runtime.middleware import MiddlewareBus
from hermesd.runtime.workers import (
    CallShape,
    WorkerPool,
    WorkTimeout,
    bounded,
    call_bounded,
    callable_name,
    is_async_callable,
    shared_pool,
)

log = logging.getLogger(__name__)

Returns = Literal[
    "ignored", "block", "context", "replace", "continue", "classify", "override", "script"
]

DEFAULT_HOOK_TIMEOUT = 10.0

_TOOL_IDS = ("task_id", "session_id", "tool_call_id", "turn_id", "api_request_id")
_API = (
    "session_id",
    "task_id",
    "turn_id",
    "api_request_id",
    "model",
    "provider",
    "base_url",
    "platform",
    "api_call_count",
)
_APPROVAL = ("command", "description", "pattern_key", "pattern_keys", "session_key", "surface")
_ANSWER = ("choice", "decided_by")
#: what every kanban_task_* hook gets (the reference's board of delegated tasks)
_KANBAN = ("task_id", "board", "assignee", "run_id", "profile_name")
#: what post_tool_call and transform_tool_result both get: the call, its result, how it went
_TOOL_RESULT = (
    "tool_name",
    "args",
    "result",
    *_TOOL_IDS,
    "duration_ms",
    "status",
    "error_type",
    "error_message",
)


@dataclass(frozen=True)
class HookSpec:
    """One hook: its name, the kwargs passed to callbacks, how returns are used, and when.

    ``fired`` is False for a hook of a feature hermesd does not have (a messaging gateway,
    sub-agents, the kanban board): registering it works, and nothing ever calls it.
    """

    name: str
    kwargs: tuple[str, ...]
    returns: Returns
    doc: str
    fired: bool = True


def _newer(name: str, kwargs: tuple[str, ...], doc: str, fired: bool = False) -> HookSpec:
    """A hook of the reference after 0.19 (its upstream source): observers, returns ignored."""
    return HookSpec(name, kwargs, "ignored", doc, fired=fired)


#: what every streaming observer gets (upstream ``agent.plugin_stream_hooks``)
_STREAM = ("session_id", "turn_id", "iteration", "surface", "model", "provider")
_KANBAN_WORKER = ("task_id", "profile_name", "board", "assignee", "run_id")
_HUMAN_INPUT = ("kind", "request_id", "session_id", "session_key", "platform", "prompt")
#: what both auxiliary-call observers get (upstream ``agent.auxiliary_hooks``)
_AUX = (
    "session_id",
    "task_id",
    "turn_id",
    "platform",
    "aux_task",
    "task",
    "middleware_trace",
    "api_request_id",
    "retry_count",
    "api_call_count",
    "model",
    "provider",
    "base_url",
    "api_mode",
    "streaming",
    "started_at",
    "message_count",
)
_NEWER_HOOKS = (
    _newer("on_stream_start", _STREAM, "A model response starts streaming."),
    _newer("on_stream_delta", (*_STREAM, "delta", "kind"), "A piece of streamed text."),
    _newer("on_stream_end", _STREAM, "A streamed model response ended."),
    _newer(
        "on_interim_message",
        ("session_id", "turn_id", "iteration", "surface", "text", "already_streamed"),
        "Text the model said before calling tools (a turn's interim message).",
    ),
    HookSpec(
        "transform_api_error_classification",
        (
            "provider",
            "model",
            "status_code",
            "error_type",
            "error_code",
            "error_message",
            "error_body",
            "error",
            "approx_tokens",
            "context_length",
            "num_messages",
        ),
        "classify",
        "A failed model request (each attempt), before hermesd decides whether to retry.",
    ),
    _newer(
        "on_skill_lifecycle",
        (
            "action",
            "skill_name",
            "provenance",
            "task_id",
            "session_id",
            "use_count",
            "reused",
            "reuse_after_patch",
        ),
        "A skill was loaded by skill_view, or created, patched or edited by skill_manage.",
        fired=True,
    ),
    _newer(
        "agent_loop_stopped",
        ("session_key", "platform", "reason", "invalidation_reason"),
        "A running turn was interrupted.",
        fired=True,
    ),
    _newer(
        "on_room_member_activity",
        (
            "room_id",
            "thread_id",
            "member_id",
            "turn_id",
            "task_id",
            "execution_generation",
            "kind",
            "seq",
            "payload",
        ),
        "A group-chat member's live runtime event.",
    ),
    HookSpec(
        "pre_transcription",
        ("file_path", "provider", "model", "language", "prompt", "source"),
        "override",
        "Before a voice message is transcribed (the provider is chosen).",
    ),
    _newer(
        "on_kanban_worker_spawned",
        (*_KANBAN_WORKER, "worker_pid", "workspace_path"),
        "A kanban worker process started.",
    ),
    _newer(
        "on_kanban_worker_exited",
        (*_KANBAN_WORKER, "worker_pid", "exit_kind", "exit_code", "outcome", "retry_status"),
        "A kanban worker process ended.",
    ),
    _newer(
        "on_kanban_worker_stale_claim",
        (*_KANBAN_WORKER, "worker_pid", "heartbeat_stale", "retry_status"),
        "A kanban claim expired.",
    ),
    _newer(
        "on_kanban_task_updated", (*_KANBAN_WORKER, "changed_fields"), "A kanban task row changed."
    ),
    _newer(
        "on_kanban_dispatch_tick",
        ("board", "profile_name", "dry_run", "outcome", "result"),
        "One kanban dispatcher tick.",
    ),
    _newer(
        "gateway_platform_event",
        ("platform", "event_type", "payload"),
        "A messaging platform event (reaction, edit, thread).",
        fired=True,
    ),
    _newer(
        "post_gateway_admission",
        ("session_key", "platform", "source", "message_id", "text"),
        "A chat message was admitted; {action: handled, reply} consumes it.",
        fired=True,
    ),
    _newer(
        "pre_command",
        ("surface", "command", "alias_used", "args_raw", "session_key", "platform"),
        "Before a slash command's handler runs.",
        fired=True,
    ),
    # upstream agent/auxiliary_hooks.py: hermesd.runtime.auxiliary fires them
    _newer(
        "pre_auxiliary_call",
        (
            *_AUX,
            "request_messages",
            "system_prompt",
            "tool_count",
            "approx_input_tokens",
            "request_char_count",
            "max_tokens",
            "request",
        ),
        "Before an auxiliary model call (compression, vision, call_llm, ctx.llm task).",
        fired=True,
    ),
    _newer(
        "post_auxiliary_call",
        (
            *_AUX,
            "ended_at",
            "api_duration",
            "error",
            "error_type",
            "finish_reason",
            "response_model",
            "usage",
            "response",
            "assistant_content_chars",
            "assistant_tool_call_count",
        ),
        "After an auxiliary model call, with its answer or its error.",
        fired=True,
    ),
    _newer(
        "on_human_input_request",
        _HUMAN_INPUT,
        "A person is asked for something (an approval, a clarify question).",
        fired=True,
    ),
    _newer(
        "on_human_input_resolved",
        (*_HUMAN_INPUT, "outcome"),
        "The person answered (or the request timed out).",
        fired=True,
    ),
    HookSpec(
        "pre_tts_synthesis",
        ("text", "provider"),
        "script",
        "Before text_to_speech hands its text to the provider (a rewrite is checked again).",
    ),
)


HOOKS: dict[str, HookSpec] = {
    spec.name: spec
    for spec in (
        HookSpec(
            "pre_tool_call",
            ("tool_name", "args", *_TOOL_IDS, "middleware_trace"),
            "block",
            "Before each tool runs, including calls made through `ctx.dispatch_tool`.",
        ),
        HookSpec(
            "post_tool_call",
            (*_TOOL_RESULT, "middleware_trace"),
            "ignored",
            "After every tool call, including errors, blocks and timeouts.",
        ),
        HookSpec(
            "transform_tool_result",
            _TOOL_RESULT,
            "replace",
            "After post_tool_call; the first str returned replaces the result.",
        ),
        HookSpec(
            "transform_terminal_output",
            ("command", "output", "returncode", "task_id", "env_type"),
            "replace",
            "Terminal tool output before its result is built; first str replaces it.",
        ),
        HookSpec(
            "transform_llm_output",
            ("response_text", "session_id", "task_id", "turn_id", "model", "platform"),
            "replace",
            "Final assistant text of a turn; the first str returned replaces it.",
        ),
        HookSpec(
            "pre_llm_call",
            (
                "session_id",
                "task_id",
                "turn_id",
                "user_message",
                "conversation_history",
                "is_first_turn",
                "model",
                "platform",
                "sender_id",
                "user_id",
                "user_name",
            ),
            "context",
            "Once per turn before the tool loop; returned context joins the user message.",
        ),
        HookSpec(
            "post_llm_call",
            (
                "session_id",
                "task_id",
                "turn_id",
                "user_message",
                "assistant_response",
                "conversation_history",
                "model",
                "platform",
            ),
            "ignored",
            "After a successful turn.",
        ),
        HookSpec(
            "pre_verify",
            (
                "session_id",
                "platform",
                "model",
                "coding",
                "attempt",
                "final_response",
                "changed_paths",
            ),
            "continue",
            "A turn that wrote files is about to end; a continue directive keeps it going.",
        ),
        HookSpec(
            "pre_api_request",
            (
                *_API,
                "api_mode",
                "request",
                "request_messages",
                "message_count",
                "tool_count",
                "approx_input_tokens",
                "request_char_count",
                "max_tokens",
                "user_message",
                "conversation_history",
                "started_at",
                "retry_count",
                "middleware_trace",
            ),
            "ignored",
            "Before each request to the model.",
        ),
        HookSpec(
            "post_api_request",
            (
                *_API,
                "api_mode",
                "api_duration",
                "started_at",
                "ended_at",
                "usage",
                "finish_reason",
                "response_model",
                "response",
                "message_count",
                "assistant_message",
                "assistant_content_chars",
                "assistant_tool_call_count",
                "middleware_trace",
            ),
            "ignored",
            "After each successful request to the model.",
        ),
        HookSpec(
            "api_request_error",
            (
                *_API,
                "api_mode",
                "error_type",
                "error_message",
                "error",
                "reason",
                "status_code",
                "retry_count",
                "max_retries",
                "retryable",
                "api_duration",
                "started_at",
                "ended_at",
                "request",
            ),
            "ignored",
            "When a request to the model fails.",
        ),
        HookSpec(
            "on_session_start",
            (
                "session_id",
                "task_id",
                "turn_id",
                "model",
                "platform",
                "sender_id",
                "user_id",
                "user_name",
            ),
            "ignored",
            "First turn of a new session.",
        ),
        HookSpec(
            "on_session_end",
            (
                "session_id",
                "task_id",
                "turn_id",
                "api_request_id",
                "completed",
                "interrupted",
                "failed",
                "model",
                "platform",
                "reason",
                "turn_exit_reason",
            ),
            "ignored",
            "End of every turn, and when a client exits.",
        ),
        HookSpec(
            "on_session_finalize",
            ("session_id", "platform", "reason", "old_session_id", "new_session_id"),
            "ignored",
            "A session is torn down (deleted, or the daemon stops).",
        ),
        HookSpec(
            "on_session_reset",
            ("session_id", "platform", "reason", "old_session_id", "new_session_id"),
            "ignored",
            "`/new` or `/reset` starts a fresh session.",
        ),
        HookSpec(
            "subagent_start",
            (
                "parent_session_id",
                "parent_turn_id",
                "parent_subagent_id",
                "child_session_id",
                "child_subagent_id",
                "child_role",
                "child_goal",
            ),
            "ignored",
            "A delegated sub-agent starts.",
        ),
        HookSpec(
            "subagent_stop",
            (
                "parent_session_id",
                "parent_turn_id",
                "child_session_id",
                "child_role",
                "child_summary",
                "child_status",
                "duration_ms",
            ),
            "ignored",
            "A delegated sub-agent finishes.",
        ),
        HookSpec(
            "pre_gateway_dispatch",
            ("event", "gateway", "session_store"),
            "ignored",
            "A chat message arrived (before admission); {action: skip|rewrite|allow}.",
        ),
        HookSpec(
            "pre_approval_request",
            _APPROVAL,
            "ignored",
            "Before the user is asked to approve a dangerous command.",
        ),
        HookSpec(
            "post_approval_response",
            (*_APPROVAL, *_ANSWER),
            "ignored",
            "After the user answered (or the approval timed out).",
        ),
        HookSpec(
            "kanban_task_claimed",
            _KANBAN,
            "ignored",
            "A kanban worker claimed a task.",
            fired=False,
        ),
        HookSpec(
            "kanban_task_completed",
            (*_KANBAN, "summary"),
            "ignored",
            "A kanban task was completed.",
            fired=False,
        ),
        HookSpec(
            "kanban_task_blocked",
            (*_KANBAN, "reason"),
            "ignored",
            "A kanban task was blocked.",
            fired=False,
        ),
        *_NEWER_HOOKS,
    )
}

#: consecutive ``pre_verify`` continue directives one turn follows (the reference's default)
MAX_VERIFY_NUDGES = 3


def hook_table_markdown() -> str:
    """The hook reference table for docs/plugins.md, generated from `HOOKS`."""
    lines = ["| hook | kwargs | return value | when |", "|---|---|---|---|"]
    meaning = {
        "ignored": "ignored",
        "block": '`{"action": "block", "message": m}` blocks the tool',
        "context": '`{"context": x}` or a str, joined by a blank line',
        "replace": "first str replaces the value",
        "continue": '`{"action": "continue", "message": m}` sends m and keeps the turn going',
        "classify": '`{"reason": r, "retryable": b, "message": m}`: the first valid one decides',
        "override": "a dict's `model`/`language`/`prompt` are used; the last one wins",
        "script": '`{"text": t}` rewrites the text, `{"action": "block", "message": m}` refuses',
    }
    for spec in HOOKS.values():
        kwargs = ", ".join(spec.kwargs)
        when = spec.doc if spec.fired else f"{spec.doc} Accepted; never fired by hermesd."
        lines.append(f"| `{spec.name}` | {kwargs} | {meaning[spec.returns]} | {when} |")
    return "\n".join(lines) + "\n"


def join_contexts(values: list[Any]) -> str:
    """Join ``pre_llm_call`` returns — ``{"context": x}`` or non-blank strings — by a blank line."""
    parts: list[str] = []
    for value in values:
        if isinstance(value, dict):
            value = value.get("context")
            value = str(value) if value else None
        if isinstance(value, str) and value.strip():
            parts.append(value)
    return "\n\n".join(parts)


#: the reference's ``agent.error_classifier.FailoverReason`` values
FAILOVER_REASONS = frozenset(
    {
        "auth",
        "auth_permanent",
        "billing",
        "rate_limit",
        "upstream_rate_limit",
        "overloaded",
        "server_error",
        "timeout",
        "ssl_cert_verification",
        "context_overflow",
        "payload_too_large",
        "image_too_large",
        "model_not_found",
        "provider_policy_blocked",
        "content_policy_blocked",
        "format_error",
        "invalid_encrypted_content",
        "multimodal_tool_content_unsupported",
        "thinking_signature",
        "long_context_tier",
        "oauth_long_context_beta_forbidden",
        "llama_cpp_grammar_pattern",
        "unknown",
    }
)
_HINTS = ("retryable", "should_compress", "should_rotate_credential", "should_fallback")


def first_classification(values: list[Any]) -> dict[str, Any] | None:
    """The first ``transform_api_error_classification`` return with a known ``reason`` (a
    FailoverReason name, or an enum whose ``value`` is one), cleaned: hint flags as bools,
    ``message`` stripped and cut to 500 characters, ``error_context`` when it is a dict. Later
    valid returns are skipped with a warning, as upstream does."""
    valid: list[tuple[dict[str, Any], str]] = []
    for value in values:
        if not isinstance(value, dict):
            continue
        reason = value.get("reason")
        reason = getattr(reason, "value", reason)
        if isinstance(reason, str) and reason.strip().lower() in FAILOVER_REASONS:
            valid.append((value, reason.strip().lower()))
    if not valid:
        return None
    if len(valid) > 1:
        log.warning(
            "transform_api_error_classification: %d later valid classification(s) skipped; "
            "the first, in registration order, decides",
            len(valid) - 1,
        )
    value, reason = valid[0]
    out: dict[str, Any] = {"reason": reason}
    out.update({key: bool(value[key]) for key in _HINTS if key in value})
    message = value.get("message")
    if isinstance(message, str) and message.strip():
        out["message"] = message.strip()[:500]
    if isinstance(value.get("error_context"), dict):
        out["error_context"] = value["error_context"]
    return out


def continue_message(values: list[Any]) -> str | None:
    """The first ``pre_verify`` directive to keep going — ``{"action": "continue", "message":
    m}``, or the ``{"decision": "block", "reason": m}`` stop-hook shape — as its message."""
    for value in values:
        if not isinstance(value, dict):
            continue
        action = str(value.get("action") or value.get("decision") or "").strip().lower()
        message = value.get("message") or value.get("reason")
        if action in ("continue", "block") and isinstance(message, str) and message.strip():
            return valid_text(message.strip())
    return None


@dataclass(frozen=True)
class _Callback:
    plugin_key: str
    fn: Callable[..., Any]
    shape: CallShape
    name: str
    sync: bool = False  # runs on a worker thread (batched with its sync neighbours)


class _SyncBatch:
    """Consecutive sync callbacks of one invocation, run one after another on ONE worker thread.

    One thread hop per invocation instead of one per callback (20 plugins hooking
    ``pre_llm_call`` cost ~1.8 ms a turn in hops alone). Each callback keeps its own deadline:
    the loop watches which one is running and since when (`HookBus._run_batch`).
    """

    def __init__(self, calls: list[tuple[_Callback, dict[str, Any]]], started: float) -> None:
        self.calls = calls
        self.results: list[tuple[bool, Any]] = []  # (returned, value or exception), in order
        self.lock = threading.Lock()
        self.current = 0
        self.started = started  # when the running callback started (queued: when submitted)
        self.stopped = False

    def __call__(self) -> None:
        for index, (entry, chosen) in enumerate(self.calls):
            with self.lock:
                if self.stopped:
                    return
                self.current, self.started = index, time.monotonic()
            try:
                self.results.append((True, entry.fn(**chosen)))
            except Exception as exc:
                self.results.append((False, exc))

    def stop(self) -> int:
        """Run nothing more; the index of the callback running now (the timed-out one)."""
        with self.lock:
            self.stopped = True
            return self.current


@dataclass(frozen=True)
class ToolVerdict:
    """What ``pre_tool_call`` callbacks decided: block, ask a person, or nothing."""

    block: str | None = None
    approve: str | None = None
    rule_key: str | None = None


@dataclass(frozen=True)
class HookOutcome:
    """What one callback did: its return value, or that it raised or timed out."""

    plugin_key: str
    name: str
    value: Any = None
    failed: bool = False
    timed_out: bool = False


class HookBus:
    """Registered hook callbacks, called in registration order with bounded time."""

    def __init__(self, pool: WorkerPool | None = None, timeout: float = DEFAULT_HOOK_TIMEOUT):
        self._pool = pool or shared_pool()
        self.timeout = timeout
        self._lock = threading.Lock()
        self._callbacks: dict[str, list[_Callback]] = {}
        #: Plugins whose callback timed out inside a batch: theirs run one by one from now on,
        #: under the pool's per-plugin limits, so a hung plugin cannot hold batches hostage.
        self._unbatched: set[str] = set()
        #: Middleware (`hermesd.runtime.middleware`): plugin code that changes what a tool call
        #: or model request does; registered, bounded and rolled back along with the hooks.
        self.middleware = MiddlewareBus(self._pool, timeout)
        #: System-prompt sections, plugin events, background tasks, approval transports.
        self.surfaces = PluginSurfaces()

    @property
    def pool(self) -> WorkerPool:
        """The worker pool plugin code of this bus runs on."""
        return self._pool

    def register(self, plugin_key: str, hook_name: str, callback: Callable[..., Any]) -> None:
        """Add ``callback`` for ``hook_name``; unknown names are warned about and kept."""
        if not callable(callback):
            raise TypeError(f"hook callback for '{hook_name}' is not callable")
        if hook_name not in HOOKS:
            log.warning(
                "Plugin '%s' registered unknown hook '%s' (valid: %s)",
                plugin_key,
                hook_name,
                ", ".join(sorted(HOOKS)),
            )
        entry = _Callback(
            plugin_key,
            callback,
            CallShape.of(callback),
            callable_name(callback),
            not is_async_callable(callback),
        )
        with self._lock:
            # Copy-on-write so invoke() iterates a stable list without holding the lock.
            self._callbacks[hook_name] = [*self._callbacks.get(hook_name, []), entry]

    def unregister_plugin(self, plugin_key: str) -> int:
        """Remove every callback ``plugin_key`` registered; returns how many."""
        removed = self.middleware.unregister_plugin(plugin_key)
        self.surfaces.unregister_plugin(plugin_key)
        self._unbatched.discard(plugin_key)  # a reloaded plugin starts with a clean slate
        with self._lock:
            for hook_name, entries in list(self._callbacks.items()):
                kept = [e for e in entries if e.plugin_key != plugin_key]
                removed += len(entries) - len(kept)
                if kept:
                    self._callbacks[hook_name] = kept
                else:
                    del self._callbacks[hook_name]
        return removed

    def has(self, hook_name: str) -> bool:
        """True when at least one callback is registered for ``hook_name``."""
        return bool(self._callbacks.get(hook_name))

    def hooks_of(self, plugin_key: str) -> list[str]:
        """Distinct hook names ``plugin_key`` has callbacks for."""
        with self._lock:
            items = list(self._callbacks.items())
        return [name for name, entries in items if any(e.plugin_key == plugin_key for e in entries)]

    async def outcomes(self, hook_name: str, kwargs: dict[str, Any]) -> list[HookOutcome]:
        """Call every callback for ``hook_name`` in order; report what each one did."""
        entries = self._callbacks.get(hook_name)
        if not entries:
            return []
        spec = HOOKS.get(hook_name)
        fill = spec.kwargs if spec else ()
        results: list[HookOutcome] = []
        batch: list[tuple[_Callback, dict[str, Any]]] = []
        for entry in entries:
            chosen = entry.shape.select(kwargs, fill)
            if entry.sync and entry.plugin_key not in self._unbatched:
                batch.append((entry, chosen))
                continue
            if batch:
                results += await self._run_batch(hook_name, batch)
                batch = []
            results += await self._one_by_one(hook_name, [(entry, chosen)])
        if batch:
            results += await self._run_batch(hook_name, batch)
        return results

    async def _run_batch(
        self, hook_name: str, calls: list[tuple[_Callback, dict[str, Any]]]
    ) -> list[HookOutcome]:
        """Run sync callbacks on one worker; a callback past its deadline is abandoned and
        the ones after it run one by one, as if unbatched."""
        if len(calls) == 1:  # nothing to share: the plain path (per-plugin pool limits)
            return await self._one_by_one(hook_name, calls)
        batch = _SyncBatch(calls, time.monotonic())
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future = self._pool.submit(batch, waiter=waiter)
        timed_out = -1
        try:
            while not waiter.done():
                left = batch.started + self.timeout - time.monotonic()
                if left <= 0:
                    timed_out = batch.stop()
                    if not waiter.done():
                        self._pool.abandon(future)
                        break
                    timed_out = -1  # it finished as we gave up: keep everything it did
                await asyncio.wait({waiter}, timeout=max(left, 0.0))
        except asyncio.CancelledError:
            batch.stop()
            self._pool.abandon(future)
            raise
        if waiter.done() and not waiter.cancelled() and waiter.exception() is not None:
            log.warning("Hook '%s' batch stopped: %s", hook_name, waiter.exception())
        outcomes: list[HookOutcome] = []
        done = batch.results if timed_out < 0 else batch.results[:timed_out]
        for (entry, _), (returned, value) in zip(calls, list(done), strict=False):
            if returned and inspect.isawaitable(value):
                outcomes += await self._one_by_one(hook_name, [(entry, {})], value)
            elif returned:
                outcomes.append(HookOutcome(entry.plugin_key, entry.name, value))
            else:
                log.warning("Hook '%s' callback %s raised: %s", hook_name, entry.name, value)
                outcomes.append(HookOutcome(entry.plugin_key, entry.name, failed=True))
        if timed_out >= 0:
            entry = calls[timed_out][0]
            self._unbatched.add(entry.plugin_key)
            log.warning(
                "Hook '%s' callback %s timed out after %gs", hook_name, entry.name, self.timeout
            )
            outcomes.append(HookOutcome(entry.plugin_key, entry.name, timed_out=True))
            outcomes += await self._one_by_one(hook_name, calls[timed_out + 1 :])
        return outcomes

    async def _one_by_one(
        self, hook_name: str, calls: list[tuple[_Callback, dict[str, Any]]], awaitable: Any = None
    ) -> list[HookOutcome]:
        """Each callback on its own (or, with ``awaitable``, await what a sync one returned)."""
        results: list[HookOutcome] = []
        for entry, chosen in calls:
            try:
                if awaitable is not None:
                    value = await bounded(awaitable, self.timeout)
                else:
                    value = await call_bounded(
                        self._pool, entry.fn, (), chosen, self.timeout, f"hook:{entry.plugin_key}"
                    )
            except WorkTimeout:
                log.warning(
                    "Hook '%s' callback %s timed out after %gs",
                    hook_name,
                    entry.name,
                    self.timeout,
                )
                results.append(HookOutcome(entry.plugin_key, entry.name, timed_out=True))
            except Exception as exc:
                log.warning("Hook '%s' callback %s raised: %s", hook_name, entry.name, exc)
                log.debug(
                    "Traceback of hook '%s' callback %s", hook_name, entry.name, exc_info=True
                )
                results.append(HookOutcome(entry.plugin_key, entry.name, failed=True))
            else:
                results.append(HookOutcome(entry.plugin_key, entry.name, value))
        return results

    async def invoke(self, hook_name: str, **kwargs: Any) -> list[Any]:
        """Call every callback; return the non-None values they returned, in order."""
        outcomes = await self.outcomes(hook_name, kwargs)
        return [o.value for o in outcomes if o.value is not None]

    async def pre_tool_call(self, **kwargs: Any) -> str | None:
        """Run ``pre_tool_call``; the block message of the first blocking callback, or None.

        A callback that times out blocks (fail closed); one that raises does not.
        """
        return (await self.pre_tool_verdict(**kwargs)).block

    async def pre_tool_verdict(self, **kwargs: Any) -> ToolVerdict:
        """Run ``pre_tool_call``: the first block wins; else the first ``approve`` request.

        ``{"action": "approve", "message": m, "rule_key": k}`` sends the call to a person
        (``rule_key``, default the tool name, is what session/always answers remember).
        """
        asked: ToolVerdict | None = None
        for outcome in await self.outcomes("pre_tool_call", kwargs):
            if outcome.timed_out:
                return ToolVerdict(
                    block=(
                        f"Blocked: pre_tool_call hook {outcome.name} of plugin "
                        f"'{outcome.plugin_key}' did not answer within {self.timeout:g}s"
                    )
                )
            value = outcome.value
            if not isinstance(value, dict):
                continue
            message = value.get("message")
            if value.get("action") == "block" and isinstance(message, str) and message:
                return ToolVerdict(block=message)
            if value.get("action") == "approve" and asked is None:
                rule = value.get("rule_key")
                asked = ToolVerdict(
                    approve=str(message) if message else f"plugin {outcome.plugin_key} asks",
                    rule_key=rule.strip() if isinstance(rule, str) and rule.strip() else None,
                )
        return asked or ToolVerdict()

    async def pre_llm_context(self, **kwargs: Any) -> str:
        """Run ``pre_llm_call``; the contexts returned, joined by a blank line ("" if none)."""
        return join_contexts(await self.invoke("pre_llm_call", **kwargs))

    async def transform(self, hook_name: str, **kwargs: Any) -> str | None:
        """Run a ``transform_*`` hook; the first str returned, or None to keep the value.
        Half a surrogate pair in it (no UTF-8 encoder takes one: neither SQLite nor msgpack
        could carry the text) becomes U+FFFD."""
        for value in await self.invoke(hook_name, **kwargs):
            if isinstance(value, str):
                return valid_text(value)
        return None
