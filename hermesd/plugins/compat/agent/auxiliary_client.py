"""hermesd's ``agent.auxiliary_client``: ``call_llm``, a completion owned by the host."""

from __future__ import annotations

from typing import Any

from hermesd.model.response import as_chat_completion
from hermesd.plugins import hostapi


def call_llm(
    task: str | None = None,
    *,
    provider: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    messages: list[dict[str, Any]],
    temperature: float | None = None,
    max_tokens: int | None = None,
    tools: list[dict[str, Any]] | None = None,
    timeout: float | None = None,
    extra_body: dict[str, Any] | None = None,
    stream: bool = False,
    **_: Any,
) -> Any:
    """One chat completion against the daemon's model, through its hooks and middleware; the
    response as the ``openai`` SDK's ``ChatCompletion``. ``task`` names the call for the
    ``pre``/``post_auxiliary_call`` hooks (``call_llm`` when not given); ``provider`` is
    accepted and ignored: hermesd has one endpoint."""
    state = hostapi.state()
    completer = state.manager.services.completer if state and state.manager else None
    if completer is None:
        raise hostapi.not_in_hermesd("agent.auxiliary_client.call_llm outside the daemon")
    if stream:
        raise hostapi.not_in_hermesd("call_llm(stream=True)", "ask for the whole response")
    if base_url or api_key:
        raise hostapi.not_in_hermesd(
            "call_llm with its own base_url or api_key", "plugins use the daemon's endpoint"
        )
    options: dict[str, Any] = dict(extra_body or {})
    if temperature is not None:
        options["temperature"] = temperature
    if max_tokens is not None:
        options["max_tokens"] = max_tokens
    completion = completer(
        messages,
        timeout=timeout,
        model=model,
        options=options,
        tools=tools,
        aux_task=task or "call_llm",  # pre/post_auxiliary_call observe it, as upstream
    )
    return as_chat_completion(completion, model)
