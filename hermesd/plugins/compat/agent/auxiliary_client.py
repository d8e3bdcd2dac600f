"""hermesd's ``agent.auxiliary_client``: a completion owned by the host."""

from __future__ import annotations

from typing import Any

from hermesd.plugins import hostapi


def call_llm(*args: Any, **kwargs: Any) -> Any:
    """Not available yet: hermesd has no host-owned completion for plugins."""
    raise hostapi.not_in_hermesd(
        "agent.auxiliary_client.call_llm", "a host-owned completion for plugins is not built yet"
    )
