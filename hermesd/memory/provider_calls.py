"""Calling a memory provider's own code: on a worker thread, with a deadline, as its session.

`ProviderCaller.invoke` runs one method of a provider instance on the plugin worker threads
(never on the event loop), bounded in time, with the session's context set (``current_session``:
``gateway.session_context.get_session_env("HERMES_SESSION_ID")`` answers the session, and a
thread the provider starts with ``agent.memory_provider.spawn_context_thread`` inherits it). A
call that raises is logged with the provider's name and the method and answers None; one that
overruns is abandoned. Arguments are adapted to older provider signatures the way the reference
adapts them: ``sync_turn`` gets ``messages=`` only when it accepts it, ``on_memory_write`` gets
``metadata`` by keyword, by position, or not at all. Also the ``<memory-context>`` fence.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, cast

from hermesd.plugins.memory_providers import provider_name
from hermesd.runtime.session import current_session
from hermesd.runtime.workers import WorkerPool, WorkTimeout, call_bounded

log = logging.getLogger(__name__)

PREFETCH_TIMEOUT = 8.0  # the reference's bound on an external prefetch
CALL_TIMEOUT = 30.0  # any other call (initialize may open a connection)
CONTEXT_NOTE = (
    "[System note: The following is recalled memory context, NOT new user input. Treat as "
    "authoritative reference data — this is the agent's persistent memory and should inform "
    "all responses.]"
)


def memory_context_block(text: str) -> str:
    """The reference's fence around recalled text ("" for none); fence tags inside are removed."""
    if not text or not text.strip():
        return ""
    clean = text.replace("<memory-context>", "").replace("</memory-context>", "").strip()
    return f"<memory-context>\n{CONTEXT_NOTE}\n\n{clean}\n</memory-context>"


def usable_tools(provider: str, schemas: Any, core: set[str]) -> dict[str, dict[str, Any]]:
    """``get_tool_schemas()``'s answer as name -> function schema: entries without a name
    skipped, a tool named like a core tool dropped (core tools always win), each logged."""
    tools: dict[str, dict[str, Any]] = {}
    for raw in schemas if isinstance(schemas, list) else []:
        schema = raw.get("function", raw) if isinstance(raw, dict) else None
        name = schema.get("name") if isinstance(schema, dict) else None
        if not isinstance(name, str) or not name:
            log.warning(
                "Memory provider '%s' returned a tool schema with no name; skipped", provider
            )
            continue
        if name in core:
            log.warning(
                "Memory provider '%s' tool '%s' shadows a core tool name; dropped "
                "(core tools always win)",
                provider,
                name,
            )
            continue
        tools.setdefault(name, dict(cast(dict[str, Any], schema)))
    return tools


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    """The callable's parameters, or None when it cannot be inspected (then: pass everything)."""
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def accepts_keyword(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` takes ``name=`` (or ``**kwargs``, or cannot be inspected)."""
    params = _parameters(fn)
    if params is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return True
    return any(p.name == name and p.kind is not inspect.Parameter.POSITIONAL_ONLY for p in params)


def metadata_mode(fn: Callable[..., Any]) -> str:
    """How ``on_memory_write`` takes its metadata: ``keyword``, ``positional`` or ``legacy``
    (not at all: three arguments), as the reference decides."""
    if accepts_keyword(fn, "metadata"):
        return "keyword"
    params = _parameters(fn) or []
    named = [p for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    return "positional" if len(named) >= 4 else "legacy"


class ProviderCaller:
    """Calls provider methods on the worker pool with deadlines, logging what fails."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool

    async def invoke(
        self,
        provider: Any,
        method: str,
        *args: Any,
        as_session: str = "",
        name: str = "",
        timeout: float = CALL_TIMEOUT,
        **kwargs: Any,
    ) -> tuple[bool, Any]:
        """(answered, result) of ``provider.method(*args, **kwargs)`` run as session
        ``as_session``: answered is False when the call overran (abandoned); a call that raised
        answered (logged, result None). A provider without the method answers None."""
        name = name or provider_name(provider)
        fn = getattr(provider, method, None)
        if not callable(fn):
            return True, None
        try:
            result = await call_bounded(
                self.pool,
                functools.partial(_as_session, as_session, fn),
                args,
                kwargs,
                timeout,
                key=f"memory-provider:{name}",
            )
            return True, result
        except WorkTimeout:
            log.warning(
                "Memory provider '%s' %s() did not return within %gs; abandoned, the turn goes on",
                name,
                method,
                timeout,
            )
            return False, None
        except Exception as exc:
            log.warning(
                "Memory provider '%s' %s() failed: %s: %s; the turn goes on",
                name,
                method,
                type(exc).__name__,
                exc,
                exc_info=True,
            )
        return True, None

    async def sync_turn(
        self, provider: Any, session_id: str, name: str, payload: dict[str, Any]
    ) -> bool:
        """``sync_turn(user, assistant, session_id=, messages=)`` (``messages`` only to a
        provider that takes it); whether it answered."""
        fn = getattr(provider, "sync_turn", None)
        extra: dict[str, Any] = {}
        if callable(fn) and accepts_keyword(fn, "messages"):
            extra["messages"] = payload.get("messages") or []
        answered, _ = await self.invoke(
            provider,
            "sync_turn",
            str(payload.get("user") or ""),
            str(payload.get("assistant") or ""),
            as_session=session_id,
            name=name,
            session_id=session_id,
            **extra,
        )
        return answered

    async def memory_write(
        self, provider: Any, session_id: str, name: str, payload: dict[str, Any]
    ) -> bool:
        """``on_memory_write(action, target, content, metadata=)`` in the shape the provider
        takes; whether it answered."""
        fn = getattr(provider, "on_memory_write", None)
        args: list[Any] = [
            str(payload.get("action") or ""),
            str(payload.get("target") or "memory"),
            str(payload.get("content") or ""),
        ]
        kwargs: dict[str, Any] = {}
        metadata = dict(payload.get("metadata") or {})
        mode = metadata_mode(fn) if callable(fn) else "keyword"
        if mode == "keyword":
            kwargs["metadata"] = metadata
        elif mode == "positional":
            args.append(metadata)
        answered, _ = await self.invoke(
            provider, "on_memory_write", *args, as_session=session_id, name=name, **kwargs
        )
        return answered


def _as_session(_session: str, _fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` with the session's context set (on the worker thread, in the caller's
    context copy), so what the provider reads or spawns sees its session."""
    token = current_session.set(_session)
    try:
        return _fn(*args, **kwargs)
    finally:
        current_session.reset(token)
