"""`ProviderSource`: which memory provider ``memory.provider`` selects, and making instances of it.

Finds the selected provider (`hermesd.plugins.memory_providers.discover_providers`, or the one a
general plugin handed to ``ctx.register_memory_provider``), makes fresh instances of it (of any
provider, for ``hermesctl memory setup``), asks an instance ``is_available()`` and
``unavailable_reason()`` and keeps the answer for the plugin listing. A name that matches
nothing, a provider that fails to load or is not available is a warning in the log, once.
What an instance is then told, per session, is `hermesd.memory.providers`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hermesd.memory.provider_calls import CALL_TIMEOUT, ProviderCaller
from hermesd.plugins.memory_providers import (
    ProviderFactory,
    ProviderRegistrations,
    discover_providers,
    provider_name,
)
from hermesd.runtime.workers import WorkerPool

log = logging.getLogger(__name__)


class ProviderSource:
    """The selected provider's factory, its availability, and warnings about it."""

    def __init__(
        self,
        home: Path,
        env: Mapping[str, str],
        pool: WorkerPool,
        calls: ProviderCaller,
        registrations: ProviderRegistrations,
    ) -> None:
        self.home, self.env, self.pool, self.calls = home, env, pool, calls
        self.registrations = registrations
        self.selected = ""
        self.factory: ProviderFactory | None = None
        #: what the listing shows of the selected provider: {available, reason}
        self.checked: dict[str, Any] = {}
        self._warned: set[str] = set()

    def select(self, name: str) -> bool:
        """Take ``memory.provider``; whether it changed."""
        if name == self.selected:
            return False
        self.selected, self.factory, self.checked = name, None, {}
        return True

    def status(self, name: str) -> dict[str, Any]:
        """``{active, available, reason}`` of provider ``name`` for the plugin listing
        (available is None until the selected one was checked)."""
        if name != self.selected or not name:
            return {"active": False, "available": None, "reason": ""}
        return {"active": True, "available": None, "reason": "", **self.checked}

    async def available(self, provider: Any) -> bool:
        """``is_available()`` of an instance (with ``unavailable_reason()``), kept for the
        listing; warned once when not."""
        available = (await self.calls.invoke(provider, "is_available"))[1] is True
        reason: Any = ""
        if not available:
            reason = (await self.calls.invoke(provider, "unavailable_reason"))[1]
            reason = str(reason or "") or "is_available() returned False"
        self.checked = {"available": available, "reason": reason}
        if not available:
            self.warn_once(
                f"Memory provider '{provider_name(provider)}' is not available: {reason}; "
                "using the built-in memory only"
            )
        return available

    async def selected_factory(self) -> ProviderFactory | None:
        """The selected provider's factory (discovered once), or None (warned once)."""
        if self.factory is None:
            found = await asyncio.to_thread(discover_providers, self.home, self.env)
            match = next((c for c in found if c.name == self.selected), None)
            if match is None:
                self.warn_once(
                    f"memory.provider is '{self.selected}', but no memory provider of that "
                    f"name was found (bundled, {self.home}/plugins/<name>/, entry points "
                    "hermes_agent.memory_providers, or a plugin's register_memory_provider); "
                    "using the built-in memory only. Known providers: "
                    + (", ".join(c.name for c in found) or "none")
                )
                return None
            self.factory = ProviderFactory(match)
        return self.factory

    async def instance(self) -> Any:
        """A fresh instance of the selected provider, or None (logged once per name)."""
        shared = self.registrations.provider
        if shared is not None and provider_name(shared) == self.selected:
            return shared  # handed to ctx.register_memory_provider: one instance for all
        factory = await self.selected_factory()
        if factory is None:
            return None
        try:
            instance = await self.pool.run(factory.create, CALL_TIMEOUT, key="memory-provider")
        except Exception as exc:
            self.warn_once(
                f"Memory provider '{self.selected}' could not be loaded from "
                f"{factory.candidate.location}: {type(exc).__name__}: {exc}; using the built-in "
                "memory only"
            )
            log.debug("loading memory provider failed", exc_info=True)
            return None
        if instance is None:
            self.warn_once(
                f"Memory provider '{self.selected}' loaded but no provider instance found "
                "(no register_memory_provider call, no MemoryProvider subclass)"
            )
        return instance

    async def instance_of(self, name: str) -> Any:
        """A fresh, uninitialized instance of provider ``name`` (selected or not) for its
        setup, or None when there is none of that name."""
        shared = self.registrations.provider
        if shared is not None and provider_name(shared) == name:
            return shared
        if name == self.selected:
            factory = await self.selected_factory()
        else:
            found = await asyncio.to_thread(discover_providers, self.home, self.env)
            match = next((c for c in found if c.name == name), None)
            factory = ProviderFactory(match) if match is not None else None
        if factory is None:
            return None
        return await self.pool.run(factory.create, CALL_TIMEOUT, key="memory-provider")

    async def known_names(self) -> list[str]:
        """Every provider's name (discovered, and one a plugin registered)."""
        found = await asyncio.to_thread(discover_providers, self.home, self.env)
        names = [c.name for c in found]
        shared = self.registrations.provider
        return names + ([provider_name(shared)] if shared is not None else [])

    def warn_once(self, text: str) -> None:
        """A warning in the log, the first time it is this text."""
        if text not in self._warned:
            self._warned.add(text)
            log.warning("%s", text)
