"""How many tokens a model's window holds: ``model.context_length``, else what the endpoint
says, else a small table of well-known models, else 128K with a warning.

The endpoint is asked once per (base_url, model) through its ``/models`` listing: vLLM reports
``max_model_len``, OpenRouter and LM Studio ``context_length`` (or ``max_context_length``),
llama.cpp ``n_ctx`` (top level or under ``meta``; ``n_ctx_train`` when only that is there).
The request is a plain blocking HTTP GET run off the event loop with a short timeout; a failure
is remembered as "unknown" for the process so a dead endpoint is not asked every turn.
It knows nothing of sessions or engines (``hermesd.context.host`` calls it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.request
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_LENGTH = 128_000
ASK_TIMEOUT = 5.0

# Prefixes of well-known model names (lower case, provider prefix removed) and their windows.
KNOWN: tuple[tuple[str, int], ...] = (
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("claude", 200_000),
    ("gemini-1.5-pro", 2_097_152),
    ("gemini", 1_048_576),
    ("deepseek", 128_000),
    ("hermes-4", 131_072),
    ("hermes-3", 131_072),
    ("llama-3", 131_072),
    ("qwen3", 131_072),
    ("qwen2.5", 131_072),
    ("mistral-large", 128_000),
    ("kimi-k2", 262_144),
    ("glm-4", 131_072),
)

_KEYS = ("max_model_len", "context_length", "max_context_length", "context_window", "n_ctx")

_cache: dict[tuple[str, str], int | None] = {}
_lock = threading.Lock()


def from_table(model: str) -> int | None:
    """The window of a well-known model, by name prefix; None when it is not in the table."""
    name = model.lower().rsplit("/", 1)[-1]
    for prefix, length in KNOWN:
        if name.startswith(prefix):
            return length
    return None


def _positive(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def from_listing(listing: Any, model: str) -> int | None:
    """The window ``model`` has in a ``/models`` answer (None when it does not say)."""
    entries = listing.get("data") if isinstance(listing, dict) else listing
    if not isinstance(entries, list):
        return None
    chosen = [e for e in entries if isinstance(e, dict) and e.get("id") == model]
    if not chosen and len(entries) == 1 and isinstance(entries[0], dict):
        chosen = entries  # llama.cpp serves one model whatever it is called
    for entry in chosen:
        places = [entry, entry.get("meta"), entry.get("top_provider")]
        for place in places:
            if not isinstance(place, dict):
                continue
            for key in _KEYS:
                found = _positive(place.get(key))
                if found is not None:
                    return found
        meta = entry.get("meta")
        if isinstance(meta, dict) and _positive(meta.get("n_ctx_train")):
            return _positive(meta.get("n_ctx_train"))
    return None


def _ask(base_url: str, model: str, api_key: str | None) -> int | None:
    url = base_url.rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=ASK_TIMEOUT) as response:
            listing = json.loads(response.read(4 << 20))
    except (OSError, ValueError) as exc:
        log.info("could not read the context length of %s from %s: %s", model, url, exc)
        return None
    return from_listing(listing, model)


async def resolve(
    model: str,
    *,
    configured: Any = None,
    base_url: str | None = None,
    api_key: str | None = None,
) -> tuple[int, str]:
    """``(context length, where it came from)``: ``config``, ``endpoint``, ``table`` or
    ``default`` (logged as a warning)."""
    chosen = _positive(configured)
    if chosen is not None:
        return chosen, "config"
    if base_url:
        key = (base_url, model)
        with _lock:
            known = key in _cache
            cached = _cache.get(key)
        if not known:
            cached = await asyncio.to_thread(_ask, base_url, model, api_key)
            with _lock:
                _cache[key] = cached
        if cached is not None:
            return cached, "endpoint"
    table = from_table(model)
    if table is not None:
        return table, "table"
    with _lock:
        warned = ("warned", model) in _cache
        _cache[("warned", model)] = None
    if not warned:
        log.warning(
            "The context length of model %r is unknown (the endpoint does not report it): "
            "assuming %d tokens; set model.context_length in config.yaml",
            model,
            DEFAULT_CONTEXT_LENGTH,
        )
    return DEFAULT_CONTEXT_LENGTH, "default"


def forget() -> None:
    """Forget what endpoints said (a config reload may point at another server)."""
    with _lock:
        _cache.clear()
