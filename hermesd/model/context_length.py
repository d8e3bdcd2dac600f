"""How many tokens a model's window holds: ``model.context_length``, else what the endpoint
says, else a small table of well-known models, else 128K with a warning.

The endpoint is asked once per (base_url, model): its ``/models`` listing (vLLM reports
``max_model_len``, OpenRouter and LM Studio ``context_length`` or ``max_context_length``,
llama.cpp ``n_ctx`` top level or under ``meta``); when that names no served window, the
server's own root (the base URL without ``/v1``): llama.cpp's ``GET /props``
(``default_generation_settings.n_ctx``, the window it allocated), then llama.cpp's
``meta.n_ctx_train`` from the listing, then Ollama's ``POST /api/show`` (``parameters``
``num_ctx`` or ``model_info["<arch>.context_length"]``). Each request is a plain blocking HTTP
call run off the event loop with a short timeout; the answer, or its absence, is remembered for
the process so a dead endpoint is not asked every turn.
It knows nothing of sessions or engines (``hermesd.context.host`` calls it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.error
import urllib.request
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_LENGTH = 128_000
ASK_TIMEOUT = 3.0  # seconds of each request (at most five)

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


def _root(base_url: str) -> str:
    """The server's own root: the base URL without its ``/v1``."""
    url = base_url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


class _Unreachable(Exception):
    """The server did not answer at all (not an HTTP error): asking it more is pointless."""


def _fetch(url: str, api_key: str | None, body: Any = None) -> Any:
    """The JSON answer of a GET (or a POST of ``body``) to ``url``; None when it answers with
    an error or no JSON; `_Unreachable` when it does not answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Accept": "application/json"})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=ASK_TIMEOUT) as response:
            return json.loads(response.read(4 << 20))
    except urllib.error.HTTPError as exc:
        log.debug("no context length from %s: %s", url, exc)
        return None
    except ValueError as exc:
        log.debug("no context length from %s: %s", url, exc)
        return None
    except OSError as exc:
        raise _Unreachable(f"{url}: {exc}") from exc


def from_props(props: Any) -> int | None:
    """The window a llama.cpp server allocated, from its ``/props`` answer
    (``default_generation_settings.n_ctx``)."""
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    return _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None


def from_ollama_show(show: Any) -> int | None:
    """The window of an Ollama model, from its ``/api/show`` answer: the ``num_ctx`` its
    Modelfile sets (what the server loads it with) or else ``model_info["<arch>.context_length"]``;
    the smaller when both are there."""
    if not isinstance(show, dict):
        return None
    found: list[int] = []
    info = show.get("model_info")
    if isinstance(info, dict):
        found += [
            n
            for key, value in info.items()
            if str(key).endswith(".context_length") and (n := _positive(value)) is not None
        ]
    parameters = show.get("parameters")
    if isinstance(parameters, str):
        for line in parameters.splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == "num_ctx" and (n := _positive(words[1])):
                found.append(n)
    return min(found) if found else None


def _ask(base_url: str, model: str, api_key: str | None) -> int | None:
    """What the endpoint reports (None when it does not say, or does not answer)."""
    try:
        return _probe(base_url, model, api_key)
    except _Unreachable as exc:
        log.info("could not read the context length of %s: %s", model, exc)
        return None


def _probe(base_url: str, model: str, api_key: str | None) -> int | None:
    """Its ``/models`` listing, then llama.cpp's ``/props`` (the window it allocated, smaller
    than ``n_ctx_train``), then Ollama's ``/api/show``."""
    listing = _fetch(base_url.rstrip("/") + "/models", api_key)
    listed = from_listing(listing, model)
    trained_only = listed is not None and not _runtime_window(listing)
    if listed is not None and not trained_only:
        return listed
    root = _root(base_url)
    for path in ("/props", "/v1/props"):
        allocated = from_props(_fetch(root + path, api_key))
        if allocated is not None:
            return allocated
    if listed is not None:
        return listed
    shown = from_ollama_show(_fetch(root + "/api/show", api_key, {"model": model, "name": model}))
    if shown is None:
        log.info("the endpoint %s does not report the context length of %s", base_url, model)
    return shown


def _runtime_window(listing: Any) -> bool:
    """Whether a listing names a served window, not only llama.cpp's training one."""
    entries = listing.get("data") if isinstance(listing, dict) else listing
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            continue
        for place in (entry, entry.get("meta"), entry.get("top_provider")):
            if isinstance(place, dict) and any(_positive(place.get(k)) for k in _KEYS):
                return True
    return False


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
