"""``ctx.llm``: a completion plugins run against the daemon's own model, without keys of their own.

The reference's ``PluginLlm`` surface (``complete`` and its result), over a completer the daemon
hands in (`hermesd.agent.loop.AgentLoop.complete_blocking`): the request goes through the same
hooks and middleware as a turn's. A plugin may not pick another model unless the owner allows it
with ``plugins.entries.<key>.llm.allow_model_override: true`` (as in the reference, fail closed).
The call blocks its thread, so the completer refuses it on the daemon's event loop (an async hook:
``BlockingOnLoop``) and gives up after ``timeout`` (default ``plugins.llm_timeout``, 120 s) with
``TimeoutError``. ``complete(task=<key>)`` runs one of the plugin's auxiliary tasks
(``ctx.register_auxiliary_task``): the model and timeout come from ``auxiliary.<key>`` in
config.yaml, over the task's defaults — the owner's choice, so no override permission is needed;
a task with its own ``base_url`` (and ``api_key``, ``provider``) is sent to that endpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hermesd.model.fallback import EndpointSpec

#: ``(messages, timeout=, model=, options=) -> Completion`` (the daemon's)
Completer = Callable[..., Any]


class PluginLlmTrustError(PermissionError):
    """The plugin asked for something the owner did not allow (another model or provider)."""


@dataclass
class PluginLlmUsage:
    """Token counts of one completion."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None


@dataclass
class PluginLlmCompleteResult:
    """What `PluginLlm.complete` returns."""

    text: str
    provider: str
    model: str
    agent_id: str
    usage: PluginLlmUsage = field(default_factory=PluginLlmUsage)
    audit: dict[str, Any] = field(default_factory=dict)


def _seconds(value: Any) -> float | None:
    """A positive number of seconds from config, else None (the daemon's default applies)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def task_endpoint(task: str, routing: dict[str, Any], model: str | None) -> EndpointSpec | None:
    """Where auxiliary task ``task`` goes: its own ``base_url`` (with its ``api_key``; the
    daemon's key never travels to another endpoint), or None for the daemon's endpoint. Another
    endpoint needs its model named (ValueError)."""
    base_url = routing.get("base_url")
    if not isinstance(base_url, str) or not base_url.strip():
        return None
    if not model:
        raise ValueError(
            f"auxiliary.{task}.base_url is set: name its model (auxiliary.{task}.model)"
        )
    key = routing.get("api_key")
    provider = routing.get("provider")
    return EndpointSpec(
        str(provider) if isinstance(provider, str) and provider not in ("", "auto") else "custom",
        model,
        base_url.strip(),
        key if isinstance(key, str) and key else None,
    )


class PluginLlm:
    """Host-owned completions for one plugin."""

    def __init__(
        self,
        plugin_id: str,
        completer: Completer | None,
        settings: Callable[[], dict[str, Any]],
        provider: str = "custom",
        task_settings: Callable[[str], dict[str, Any] | None] | None = None,
    ) -> None:
        self._plugin_id = plugin_id
        self._completer = completer
        self._settings = settings  # the plugin's llm section, read at each call
        self._provider = provider
        #: an auxiliary task's merged settings, None when this plugin did not register it
        self._task_settings = task_settings or (lambda key: None)

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        provider: str | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        agent_id: str | None = None,
        profile: str | None = None,
        purpose: str | None = None,
        task: str | None = None,
    ) -> PluginLlmCompleteResult:
        """One chat completion against the configured model (or auxiliary task ``task``'s);
        its text and counts. Raises ``TimeoutError`` past ``timeout`` (default
        ``plugins.llm_timeout``)."""
        if self._completer is None:
            raise NotImplementedError("ctx.llm is not available in hermesd outside the daemon")
        allowed = self._settings()
        if model and not allowed.get("allow_model_override"):
            raise PluginLlmTrustError(
                f"Plugin '{self._plugin_id}' may not choose the model; set "
                f"plugins.entries.{self._plugin_id}.llm.allow_model_override: true to allow it"
            )
        if provider and provider != self._provider:
            raise PluginLlmTrustError(
                f"Plugin '{self._plugin_id}' asked for provider '{provider}'; hermesd has one "
                "endpoint"
            )
        if task is not None:
            routing = self._task_settings(task)
            if routing is None:
                raise ValueError(
                    f"Plugin '{self._plugin_id}' has not registered auxiliary task '{task}'"
                )
            model = model or str(routing.get("model") or "") or None
            timeout = timeout if timeout is not None else _seconds(routing.get("timeout"))
            purpose = purpose or task
            endpoint = task_endpoint(task, routing, model)
        options: dict[str, Any] = {}
        if temperature is not None:
            options["temperature"] = temperature
        if max_tokens is not None:
            options["max_tokens"] = max_tokens
        routed: dict[str, Any] = {} if task is None else {"aux_task": task}  # auxiliary hooks
        if task is not None and endpoint is not None:
            routed["endpoint"] = endpoint
        completion = self._completer(
            messages, timeout=timeout, model=model, options=options, **routed
        )
        counts = completion.usage or {}
        usage = PluginLlmUsage(
            input_tokens=int(counts.get("prompt_tokens") or 0),
            output_tokens=int(counts.get("completion_tokens") or 0),
            total_tokens=int(counts.get("total_tokens") or 0),
            cache_read_tokens=int(counts.get("cache_read_tokens") or 0),
            cache_write_tokens=int(counts.get("cache_write_tokens") or 0),
        )
        return PluginLlmCompleteResult(
            text=completion.content,
            provider=self._provider,
            model=completion.model or model or "",
            agent_id=agent_id or "default",
            usage=usage,
            audit={
                "plugin_id": self._plugin_id,
                "purpose": purpose or "",
                "profile": profile or "",
            },
        )

    def complete_structured(self, *args: Any, **kwargs: Any) -> Any:
        """Not available: hermesd has no structured-output completion for plugins."""
        raise NotImplementedError("ctx.llm.complete_structured is not available in hermesd")
