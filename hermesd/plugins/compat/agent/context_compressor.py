"""hermesd's ``agent.context_compressor``: the reference's ``ContextCompressor`` over hermesd's
built-in compressor, and the summary prefixes plugins and front ends look for.

A plugin may build a ``ContextCompressor`` with the reference's constructor (model, threshold,
protected head and tail, target ratio, ...) or subclass it — to change one step and call
``super()`` for the rest — and hand it to ``ctx.register_context_engine``. The work is done by
`hermesd.context.compressor.BuiltinCompressor`, held inside and configured from those
arguments; the engine state the host reads is the built-in's, read and written through. The
summary is written by the daemon's model (``summary_model_override`` names another model of the
same endpoint), through its hooks and middleware as ``call_llm`` is; hermesd has one endpoint,
so ``base_url``, ``api_key``, ``provider`` and ``api_mode`` are kept as attributes only.

The prefixes are the reference's exact strings (a compaction summary starts with one of them).
"""

from __future__ import annotations

from typing import Any

from hermesd.context.compressor import BuiltinCompressor, CompressionSettings
from hermesd.context.engine import ContextEngine
from hermesd.context.summary import LEGACY_SUMMARY_PREFIX, SUMMARY_PREFIX, is_summary_message
from hermesd.model.context_length import from_table
from hermesd.plugins import hostapi

__all__ = ["LEGACY_SUMMARY_PREFIX", "SUMMARY_PREFIX", "ContextCompressor", "is_summary_message"]

SUMMARY_TIMEOUT = 120.0  # seconds one summary may take (the host bounds compress() as well)


class _Inner:
    """An engine attribute that lives on the built-in compressor inside."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj._builtin, self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(obj._builtin, self.name, value)


class ContextCompressor(ContextEngine):
    """The reference's default engine, as plugins construct and subclass it."""

    last_prompt_tokens = _Inner()
    last_completion_tokens = _Inner()
    last_total_tokens = _Inner()
    threshold_tokens = _Inner()
    context_length = _Inner()
    compression_count = _Inner()
    threshold_percent = _Inner()
    protect_first_n = _Inner()
    protect_last_n = _Inner()
    last_summary_error = _Inner()

    def __init__(
        self,
        model: str,
        threshold_percent: float = 0.50,
        protect_first_n: int = 3,
        protect_last_n: int = 20,
        summary_target_ratio: float = 0.20,
        quiet_mode: bool = False,
        summary_model_override: str | None = None,
        base_url: str = "",
        api_key: str = "",
        config_context_length: int | None = None,
        provider: str = "",
        api_mode: str = "",
        abort_on_summary_failure: bool = False,
        max_tokens: int | None = None,
    ) -> None:
        self.model, self.base_url, self.api_key = model, base_url, api_key
        self.provider, self.api_mode, self.quiet_mode = provider, api_mode, quiet_mode
        self.summary_model = summary_model_override or ""
        self.summary_target_ratio = max(0.10, min(float(summary_target_ratio), 0.80))
        self.abort_on_summary_failure = bool(abort_on_summary_failure)
        # the reference: only a positive int is an output reservation
        self.max_tokens = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None
        settings = CompressionSettings(
            enabled=True,
            threshold=float(threshold_percent),
            target_ratio=self.summary_target_ratio,
            protect_first_n=max(0, int(protect_first_n)),
            protect_last_n=max(1, int(protect_last_n)),
            abort_on_summary_failure=self.abort_on_summary_failure,
        )
        self._builtin = BuiltinCompressor(settings, self._summarize)
        # the host calls update_model with the session's real window before any use
        window = config_context_length or from_table(model) or 0
        self.update_model(model, window, base_url, api_key, provider, api_mode)

    @property
    def name(self) -> str:
        return "compressor"

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        self.model = model or self.model
        self._builtin.update_model(model, context_length, base_url, api_key, provider, api_mode)

    def update_from_response(self, usage: dict[str, Any]) -> None:
        self._builtin.update_from_response(usage)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        return self._builtin.should_compress(prompt_tokens)

    def has_content_to_compress(self, messages: list[dict[str, Any]]) -> bool:
        return self._builtin.has_content_to_compress(messages)

    def compress(
        self,
        messages: list[dict[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[dict[str, Any]]:
        return self._builtin.compress(messages, current_tokens, focus_topic, force, memory_context)

    def on_session_reset(self) -> None:
        super().on_session_reset()
        self._builtin.ineffective = 0

    def _summarize(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        """The summary, written by the daemon's model (called on the engine's thread)."""
        state = hostapi.state()
        completer = state.manager.services.completer if state and state.manager else None
        if completer is None:
            raise RuntimeError("no summary model: ContextCompressor outside the daemon")
        completion = completer(
            messages,
            timeout=SUMMARY_TIMEOUT,
            model=self.summary_model or None,
            options={"max_tokens": max_tokens},
        )
        return str(completion.content or "")
