"""hermesd's ``agent.web_search_provider``: the class web search backends subclass.

Plugins subclass `WebSearchProvider` and hand an instance to
``ctx.register_web_search_provider``; hermesd's ``web_search`` tool sends queries to it when
``web.search.provider`` names it (docs/tools.md; its ``extract`` is not used: ``web_extract``
reads pages itself, through the egress proxy). The surface — abstract ``name`` and
``is_available``, the capability flags and the result shapes in the method docstrings — is the
reference's, so a provider written for it imports and registers unchanged.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any


def get_provider_env(name: str) -> str:
    """The stripped value of environment variable ``name`` ("" when unset); hermesd has
    already applied ``$HERMES_HOME/.env`` to its environment."""
    return (os.environ.get(name) or "").strip()


class WebSearchProvider(ABC):
    """A web search and/or extract backend."""

    @property
    @abstractmethod
    def name(self) -> str:
        """Short stable id (``web.search_backend`` names it)."""

    @property
    def display_name(self) -> str:
        """A label for people; ``name`` unless overridden."""
        return self.name

    @abstractmethod
    def is_available(self) -> bool:
        """Whether the backend can serve calls now (a cheap check, no network)."""

    def supports_search(self) -> bool:
        """Whether `search` is implemented."""
        return True

    def supports_extract(self) -> bool:
        """Whether `extract` is implemented."""
        return False

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        """``{"success": True, "data": {"web": [{title, url, description, position}]}}`` or
        ``{"success": False, "error": str}``."""
        raise NotImplementedError(f"{self.name} does not implement search")

    def extract(self, urls: list[str], **kwargs: Any) -> Any:
        """A list of ``{url, title, content, raw_content, metadata}`` (may be a coroutine)."""
        raise NotImplementedError(f"{self.name} does not implement extract")

    def get_setup_schema(self) -> dict[str, Any]:
        """What a setup picker shows for this backend."""
        return {"name": self.display_name}
