"""Where ``web_search`` sends a query: the built-in SearXNG backend or a plugin's provider.

``web.search.provider`` chooses: ``searxng`` (built in: the JSON API of the instance at
``web.search.searxng_url``, or ``$SEARXNG_URL`` as in the reference), or the name a plugin gave
``ctx.register_web_search_provider``. Unset, SearXNG is used when its URL is configured, else
the first plugin provider that says it is available. `choose` gives the backend or the sentence
saying why there is none (the tool is then unavailable, and a call answers with it).

SearXNG is fetched through the egress proxy like every web tool fetch (`hermesd.tools.web_fetch`);
a plugin's provider is plugin code, trusted like the rest of it, and reaches its service itself.
Both answer in the reference's shape: ``{"success": true, "data": {"web": [{title, url,
description, position}]}}`` or ``{"success": false, "error": ...}``.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hermesd.tools.web_fetch import Fetcher, FetchError

BUILTIN = "searxng"
MAX_FIELD = 2000  # characters of one result's title, URL or description

PluginProviders = Callable[[], list[Any]]  # the registered web_search provider objects


@dataclass(frozen=True)
class Backend:
    """The chosen backend: the built-in SearXNG (``url``) or a plugin's ``provider``."""

    name: str
    url: str = ""
    provider: Any = None


def searxng_url(config: Any, environ: Mapping[str, str]) -> str:
    """The configured SearXNG base URL ("" when none)."""
    url = str(config.get("web.search.searxng_url") or "").strip()
    return url or (environ.get("SEARXNG_URL") or "").strip()


def _available(provider: Any) -> bool:
    try:
        return bool(provider.is_available()) and bool(provider.supports_search())
    except Exception:  # a broken provider is an unavailable one
        return False


def choose(config: Any, plugins: PluginProviders, environ: Mapping[str, str]) -> Backend | str:
    """The backend ``web_search`` uses now, or why there is none."""
    wanted = str(
        config.get("web.search.provider")
        or config.get("web.search_backend")
        or config.get("web.backend")
        or ""
    ).strip()
    url = searxng_url(config, environ)
    if wanted in ("", BUILTIN) and url:
        return Backend(BUILTIN, url=url)
    if wanted == BUILTIN:
        return "web.search.provider is searxng but web.search.searxng_url is not set"
    registered = plugins()
    if wanted:
        for provider in registered:
            if provider.name == wanted:
                if _available(provider):
                    return Backend(wanted, provider=provider)
                return f"the web search provider '{wanted}' says it is not available now"
        return f"web.search.provider names '{wanted}', which no loaded plugin registered"
    for provider in registered:
        if _available(provider):
            return Backend(str(provider.name), provider=provider)
    return (
        "no web search backend: set web.search.searxng_url (a SearXNG instance) or "
        "web.search.provider (a plugin's provider)"
    )


def _text(value: Any) -> str:
    return str(value if value is not None else "")[:MAX_FIELD]


def normalise(answer: Any, limit: int) -> dict[str, Any]:
    """A provider's answer in the reference's shape, each field bounded."""
    if not isinstance(answer, dict):
        return {"success": False, "error": "the web search provider gave no answer"}
    if not answer.get("success", True):
        return {"success": False, "error": _text(answer.get("error") or "search failed")}
    data = answer.get("data")
    rows = data.get("web") if isinstance(data, dict) else None
    results = [
        {
            "title": _text(row.get("title")),
            "url": _text(row.get("url")),
            "description": _text(row.get("description")),
            "position": n,
        }
        for n, row in enumerate((r for r in rows or [] if isinstance(r, dict)), 1)
        if n <= limit
    ]
    return {"success": True, "data": {"web": results}}


async def searxng(
    fetcher: Fetcher, base: str, query: str, limit: int, timeout: float
) -> dict[str, Any]:
    """Ask the SearXNG instance at ``base`` (its ``/search?format=json``)."""
    params = urllib.parse.urlencode({"q": query, "format": "json", "pageno": 1})
    url = f"{base.rstrip('/')}/search?{params}"
    try:
        page = await fetcher.fetch(url, 4 * 1024 * 1024, timeout, "application/json")
        data = json.loads(page.body.decode(page.charset or "utf-8", "replace"))
    except FetchError as exc:
        return {"success": False, "error": f"SearXNG: {exc}"}
    except ValueError:
        return {"success": False, "error": "SearXNG's answer is not JSON (is format=json on?)"}
    raw = data.get("results") if isinstance(data, dict) else None
    rows = [r for r in raw or [] if isinstance(r, dict)]

    def score(row: dict[str, Any]) -> float:
        try:
            return float(row.get("score") or 0)
        except (TypeError, ValueError):
            return 0.0

    rows.sort(key=score, reverse=True)
    web = [
        {"title": r.get("title"), "url": r.get("url"), "description": r.get("content")}
        for r in rows
    ]
    return normalise({"success": True, "data": {"web": web}}, limit)
