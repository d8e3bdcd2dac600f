"""A session's context engine: which one it is, how it is made, how it is called.

Owns the engine settings (``context.*``, ``compression.*``, ``auxiliary.compression.*``,
``model.context_length``), the choice of an engine for a new session (the built-in compressor,
an engine folder's engine or the plugin slot's, deep-copied per session; the built-in with the
reference's warnings when neither works), and `Engines.call`: the built-in's methods inline, a
plugin engine's on daemon worker threads, each call under a timeout, a failure raised as
`EngineFailed` with its traceback in the log. When to call what, and what is kept of it, is
``hermesd.context.host``'s business.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermesd.context.compressor import BuiltinCompressor, CompressionSettings
from hermesd.model.client import ModelClient, ModelSettings
from hermesd.plugins.context_engines import EngineRegistrations, find_engine
from hermesd.runtime.auxiliary import AuxiliaryCall, run_auxiliary
from hermesd.runtime.hooks import HookBus
from hermesd.runtime.workers import WorkerPool, WorkTimeout

log = logging.getLogger(__name__)

CALL_TIMEOUT = 10.0  # seconds any engine call but compress and tools may take
_ROLES = ("system", "user", "assistant", "tool")


class EngineFailed(Exception):
    """A plugin engine raised, hung or answered nonsense (the session falls back)."""


@dataclass
class ContextSettings:
    """``context.*``, ``compression.*``, ``auxiliary.compression.*``, ``model.context_length``."""

    engine: str = "compressor"
    compression: CompressionSettings = field(default_factory=CompressionSettings)
    context_length: int | None = None
    summary_model: str | None = None
    summary_base_url: str | None = None
    summary_api_key: str | None = None
    timeout: float = 120.0
    background: bool = True

    @classmethod
    def from_config(cls, config: Any) -> ContextSettings:
        """Read the settings from a `Config` (or anything with a dotted ``get``)."""
        return cls(
            engine=str(config.get("context.engine") or "compressor"),
            compression=CompressionSettings.from_config(config),
            context_length=config.get("model.context_length"),
            summary_model=config.get("auxiliary.compression.model") or None,
            summary_base_url=config.get("auxiliary.compression.base_url") or None,
            summary_api_key=config.get("auxiliary.compression.api_key") or None,
            timeout=float(config.get("context.timeout", 120.0)),
            background=bool(config.get("context.background", True)),
        )


@dataclass
class SessionContext:
    """One session's engine and its compaction state."""

    session_id: str
    engine: Any
    name: str
    builtin: bool
    model: str = ""
    context_length: int = 0
    length_source: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    generation: int = 0  # compactions recorded since the daemon started
    status: dict[str, Any] = field(default_factory=dict)
    tool_names: set[str] = field(default_factory=set)
    background: asyncio.Task[Any] | None = None
    window_warned: bool = False  # the "window too small" warning was sent


def supported_kwargs(compress: Any, **candidates: Any) -> dict[str, Any]:
    """The optional arguments of ``compress`` that its signature accepts (all with
    ``**kwargs``); ``memory_context`` only when there is some."""
    if not candidates.get("memory_context"):
        candidates.pop("memory_context", None)
    try:
        parameters = inspect.signature(compress).parameters
    except (TypeError, ValueError):
        return {"current_tokens": candidates.get("current_tokens")}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return candidates
    return {k: v for k, v in candidates.items() if k in parameters}


def valid_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and m.get("role") in _ROLES for m in value)
    )


class Engines:
    """Makes and calls the sessions' engines; one per daemon."""

    def __init__(
        self,
        client: ModelClient,
        settings: ContextSettings,
        *,
        home: Path,
        env: dict[str, str] | None = None,
        registrations: EngineRegistrations | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.home = home
        self.env = dict(env or {})
        self.registrations = registrations or EngineRegistrations()
        # daemon threads, one engine's hung calls bounded: it cannot starve the others
        self.threads = WorkerPool(16, "context-engine", per_key=8)
        self._prototypes: dict[str, Any] = {}  # engine folders, loaded once, copied per session
        self._summary_client: ModelClient | None = None
        #: the daemon's hooks: a summary is an auxiliary call (``pre``/``post_auxiliary_call``)
        self.hooks: HookBus | None = None

    def endpoint(self) -> dict[str, Any]:
        """The endpoint arguments of ``update_model``."""
        s = self.client.settings
        return {
            "base_url": s.base_url or "",
            "api_key": s.api_key or "",
            "provider": s.provider,
            "api_mode": "chat_completions",
        }

    def builtin(self, model: str = "") -> BuiltinCompressor:
        """A new built-in compressor summarising with ``model`` (or the summary model)."""
        own = self.settings.summary_model is None and self.settings.summary_base_url is None
        return BuiltinCompressor(
            self.settings.compression, self._summarizer(model), summary_window=own
        )

    async def select(self, model: str) -> tuple[Any, str, bool]:
        """A new session's engine: ``(engine, name, is the built-in)``."""
        name = self.settings.engine
        if name == "compressor":
            return self.builtin(model), "compressor", True
        original = self._prototypes.get(name)
        if original is None:
            found, source = await asyncio.to_thread(
                find_engine, name, self.home, self.env, self.registrations
            )
            if found is None:
                log.warning(
                    "Context engine '%s' not found — falling back to built-in compressor", name
                )
                return self.builtin(model), "compressor", True
            original = found
            if source == "folder":
                self._prototypes[name] = found
        try:
            engine = await asyncio.to_thread(copy.deepcopy, original)
        except Exception as exc:
            log.warning(
                "Context engine '%s' could not be copied for a session (%s) — falling back to "
                "built-in compressor. Engines holding locks or database connections should "
                "implement __deepcopy__ to copy only their per-session state.",
                name,
                exc,
            )
            return self.builtin(model), "compressor", True
        log.info("Using context engine: %s", name)
        return engine, name, False

    async def call(
        self, ctx: SessionContext, method: str, *args: Any, timeout: float = CALL_TIMEOUT, **kw: Any
    ) -> Any:
        """``ctx.engine.<method>(...)``: the built-in's inline, a plugin's on a thread under
        ``timeout``; its failure raises `EngineFailed`."""
        fn = getattr(ctx.engine, method, None)
        if fn is None:
            return None
        if ctx.builtin:
            return fn(*args, **kw)
        try:
            return await self.threads.run(functools.partial(fn, *args, **kw), timeout, ctx.name)
        except WorkTimeout:
            log.error(
                "context engine '%s': %s() did not return within %.0f s (session %s)",
                ctx.name,
                method,
                timeout,
                ctx.session_id,
            )
            raise EngineFailed(f"{method}() did not return within {timeout:.0f} s") from None
        except Exception as exc:
            log.error(
                "context engine '%s': %s() raised (session %s)",
                ctx.name,
                method,
                ctx.session_id,
                exc_info=True,
            )
            raise EngineFailed(f"{method}() raised {type(exc).__name__}: {exc}") from exc

    async def tools(self, ctx: SessionContext, offered: list[dict[str, Any]]) -> list[Any]:
        """The engine's ``get_tool_schemas()`` not named like one ``offered`` (none when it
        fails); remembered as the session's engine tools."""
        try:
            schemas = await self.call(ctx, "get_tool_schemas")
        except EngineFailed:
            return []
        extra = engine_tools(schemas, offered)
        ctx.tool_names = {t["function"]["name"] for t in extra}
        return extra

    async def select_context(
        self,
        ctx: SessionContext,
        messages: list[dict[str, Any]],
        history: list[dict[str, Any]],
        incoming: str,
    ) -> list[Any] | None:
        """The engine's request-only ``select_context`` choice; None: send the messages (no
        such method, a failure: it falls open, or not a message list)."""
        if getattr(ctx.engine, "select_context", None) is None:
            return None
        try:
            chosen = await self.call(
                ctx,
                "select_context",
                list(messages),
                conversation_messages=list(history),
                incoming_message=incoming,
                budget_tokens=int(getattr(ctx.engine, "threshold_tokens", 0) or 0),
            )
        except EngineFailed:
            return None
        return chosen if valid_messages(chosen) else None

    async def call_tool(
        self,
        ctx: SessionContext,
        name: str,
        arguments: str,
        messages: list[dict[str, Any]],
        timeout: float,
    ) -> str:
        """``handle_tool_call(name, args, messages=…)``; an error result when it fails."""
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            return json.dumps({"error": f"invalid JSON arguments for {name}"})
        try:
            result = await self.call(
                ctx,
                "handle_tool_call",
                name,
                args if isinstance(args, dict) else {},
                messages=copy.deepcopy(messages),
                timeout=timeout,
            )
        except EngineFailed as exc:
            return json.dumps({"error": f"context engine tool {name} failed: {exc}"})
        return result if isinstance(result, str) else json.dumps(result, default=str)

    # --- the summary model -------------------------------------------------------------------

    def _summarizer(self, model: str) -> Callable[[list[dict[str, Any]], int], str]:
        """The built-in's summary call: from its thread, a completion on the daemon's loop."""
        loop = asyncio.get_running_loop()
        client, name = self._summary_endpoint(model)  # on the loop: one client, built once

        def summarize(messages: list[dict[str, Any]], max_tokens: int) -> str:
            extra = {"max_tokens": max_tokens}
            s = client.settings
            call = AuxiliaryCall("compression", name, s.provider, s.base_url or "")
            future = asyncio.run_coroutine_threadsafe(
                run_auxiliary(
                    self.hooks,
                    call,
                    messages,
                    lambda: client.stream_completion(messages, model=name, extra=extra),
                    extra,
                ),
                loop,
            )
            try:
                return future.result(self.settings.timeout).content
            except TimeoutError:
                future.cancel()
                raise

        return summarize

    def _summary_endpoint(self, model: str) -> tuple[ModelClient, str]:
        name = self.settings.summary_model or model or self.client.settings.model or ""
        if not self.settings.summary_base_url:
            return self.client, name
        if self._summary_client is None:
            main = self.client.settings
            self._summary_client = ModelClient(
                ModelSettings(
                    base_url=self.settings.summary_base_url,
                    model=name,
                    api_key=self.settings.summary_api_key or main.api_key,
                    timeout=main.timeout,
                    max_retries=main.max_retries,
                )
            )
        return self._summary_client, name

    async def close(self) -> None:
        """Stop the idle threads (a hung engine's is left to die with the process)."""
        self.threads.shutdown()
        if self._summary_client is not None:
            await self._summary_client.aclose()


def engine_tools(schemas: Any, offered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An engine's ``get_tool_schemas()`` in OpenAI form, minus any named like one ``offered``."""
    taken = {t["function"]["name"] for t in offered}
    extra: list[dict[str, Any]] = []
    for schema in schemas or ():
        if not isinstance(schema, dict):
            continue
        fn = schema.get("function") if schema.get("type") == "function" else schema
        if not isinstance(fn, dict) or not fn.get("name") or fn["name"] in taken:
            continue
        extra.append({"type": "function", "function": fn})
    return extra
