"""hermesd's ``hermes_cli.model_switch``: ``parse_model_flags`` and ``switch_model`` for one
endpoint.

hermesd talks to one OpenAI-compatible endpoint (``model.base_url``), so switching model is
choosing another model name there; a switch to another provider is refused with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ModelSwitchResult:
    """The outcome of a switch, with the reference's fields."""

    success: bool
    new_model: str = ""
    target_provider: str = ""
    provider_changed: bool = False
    api_key: str = ""
    base_url: str = ""
    api_mode: str = ""
    error_message: str = ""
    warning_message: str = ""
    provider_label: str = ""


def parse_model_flags(raw_args: str) -> tuple[str, str, bool, bool, bool]:
    """``MODEL [--provider P] [--global] [--refresh] [--session]`` as the reference's
    5-tuple (model, provider, global, refresh, session)."""
    words = str(raw_args or "").split()
    model, provider = [], ""
    flags = {"--global": False, "--refresh": False, "--session": False}
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--provider" and i + 1 < len(words):
            provider, i = words[i + 1], i + 2
            continue
        if word in flags:
            flags[word] = True
        else:
            model.append(word)
        i += 1
    return " ".join(model), provider, flags["--global"], flags["--refresh"], flags["--session"]


def switch_model(
    raw_input: str,
    current_provider: str,
    current_model: str,
    current_base_url: str = "",
    current_api_key: str = "",
    is_global: bool = False,
    explicit_provider: str = "",
    user_providers: Any = None,
    custom_providers: Any = None,
) -> ModelSwitchResult:
    """Another model on hermesd's endpoint; another provider is refused."""
    if explicit_provider and explicit_provider not in ("custom", current_provider):
        return ModelSwitchResult(
            False,
            error_message=f"hermesd has one model endpoint; provider '{explicit_provider}' "
            "is not available (choose a model name served by model.base_url)",
        )
    return ModelSwitchResult(
        True,
        new_model=raw_input.strip() or current_model,
        target_provider=current_provider,
        base_url=current_base_url,
    )
