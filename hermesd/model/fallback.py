"""Other model endpoints than the configured one: the reference's ``fallback_providers``,
tried in order when the configured model keeps failing, and ``delegation.base_url``, where
delegated children's turns go.

A turn whose request still fails after the client's own retries (a rate limit or an outage, an
endpoint that cannot be reached, a refused key or exhausted credit, a model the endpoint does not
know) goes on with the next entry of ``fallback_providers`` for the rest of that turn; the next
turn starts on the configured model again. A plugin's ``transform_api_error_classification``
may decide instead (``should_fallback``). Each entry is ``{provider, model, base_url,
api_key | key_env}``; an entry without ``base_url`` is another model on the configured endpoint
(and its key). Errors about the request itself (400, 413, a window overflow) never switch: the
next endpoint would refuse the same request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hermesd.model.errors import ModelError, ModelNotConfigured, ModelRequestFailed

if TYPE_CHECKING:
    from hermesd.model.client import ModelClient, ModelSettings

log = logging.getLogger(__name__)

URL_SCHEMES = ("http://", "https://")

#: statuses after which another endpoint may answer: a key or credit problem, a model the
#: endpoint does not serve, a timeout, a rate limit, an outage
_SWITCH_STATUSES = frozenset({401, 402, 403, 404, 408, 409, 425, 429})
#: plugin classifications (``FailoverReason`` names) that mean the same
_SWITCH_REASONS = frozenset(
    {
        "auth",
        "auth_permanent",
        "billing",
        "rate_limit",
        "overloaded",
        "server_error",
        "timeout",
        "model_not_found",
        "provider_policy_blocked",
    }
)


@dataclass(frozen=True)
class EndpointSpec:
    """One entry of ``fallback_providers``."""

    provider: str
    model: str
    base_url: str | None = None
    api_key: str | None = None

    def settings(self, primary: ModelSettings) -> ModelSettings:
        """The client settings of this entry: the primary's timeouts and retries, its own
        endpoint, model and key (the primary's key only on the primary's endpoint)."""
        same_endpoint = self.base_url in (None, primary.base_url)
        return replace(
            primary,
            base_url=self.base_url or primary.base_url,
            model=self.model,
            api_key=self.api_key or (primary.api_key if same_endpoint else None),
            provider=self.provider,
            fallbacks=(),
        )

    def label(self) -> str:
        """How logs and events name it."""
        return f"{self.model} ({self.base_url or 'the configured endpoint'})"


def specs_from_config(value: Any, env: Mapping[str, str]) -> tuple[EndpointSpec, ...]:
    """The usable entries of ``fallback_providers`` (the config check reports the others)."""
    if isinstance(value, Mapping):  # the reference's older single ``fallback_model`` shape
        value = [value]
    if not isinstance(value, list):
        return ()
    specs = []
    for entry in value:
        if not isinstance(entry, Mapping) or not str(entry.get("model") or "").strip():
            continue
        key = entry.get("api_key")
        if not key and entry.get("key_env"):
            key = env.get(str(entry["key_env"]))
        specs.append(
            EndpointSpec(
                provider=str(entry.get("provider") or "custom"),
                model=str(entry["model"]).strip(),
                base_url=str(entry["base_url"]) if entry.get("base_url") else None,
                api_key=str(key) if key else None,
            )
        )
    return tuple(specs)


def config_problem(value: Any) -> str | None:
    """What is wrong with a ``fallback_providers`` value (None: nothing)."""
    if value is None:
        return None
    entries = [value] if isinstance(value, Mapping) else value
    if not isinstance(entries, list):
        return "expected a list of {provider, model, base_url, key_env}"
    problems = []
    for n, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            problems.append(f"entry {n}: expected a mapping with at least `model`")
        elif not str(entry.get("model") or "").strip():
            problems.append(f"entry {n}: `model` is missing")
        elif entry.get("base_url") and not str(entry["base_url"]).startswith(URL_SCHEMES):
            problems.append(f"entry {n}: base_url {entry['base_url']!r} is not an http(s) URL")
    return "; ".join(problems) or None


def worth_switching(error: ModelError) -> bool:
    """Whether another endpoint could answer where this error came from. A plugin's
    ``should_fallback`` decides when it gave one."""
    hinted = (error.hints or {}).get("should_fallback")
    if hinted is not None:
        return bool(hinted)
    if isinstance(error, ModelNotConfigured):
        return False
    if error.reason is not None:
        return error.reason in _SWITCH_REASONS
    if isinstance(error, ModelRequestFailed):
        return error.status is None or error.status in _SWITCH_STATUSES or error.status >= 500
    return False


class OtherEndpoints:
    """A `ModelClient` per other endpoint (a fallback entry, ``delegation.base_url``), built
    on first use, closed with the daemon's client."""

    def __init__(self) -> None:
        self._clients: dict[ModelSettings, ModelClient] = {}

    def client(self, primary: ModelSettings, spec: EndpointSpec) -> ModelClient:
        """The client of ``spec``, with the primary's timeouts and retries."""
        from hermesd.model.client import ModelClient

        settings = spec.settings(primary)
        client = self._clients.get(settings)
        if client is None:
            client = self._clients[settings] = ModelClient(settings)
        return client

    def fallback(
        self, primary: ModelSettings, index: int
    ) -> tuple[ModelClient, EndpointSpec] | None:
        """The client of entry ``index`` of the primary's fallbacks (None: no such entry)."""
        if index >= len(primary.fallbacks):
            return None
        spec = primary.fallbacks[index]
        return self.client(primary, spec), spec

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
