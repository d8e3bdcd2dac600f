"""hermesd's ``agent.context_references``: the class ``@kind:value`` providers subclass.

A plugin subclasses `ContextReferenceProvider`, sets ``prefix`` and hands an instance to
``ctx.register_context_reference``; hermesd calls ``expand(target)`` when a user's message
mentions ``@<prefix>:<target>`` (hermesd.runtime.context_refs). The surface is the newer
reference's, so a provider written for it imports unchanged; ``autocomplete`` is part of the
contract but nothing in hermesd calls it (no interactive composer).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from hermesd.runtime.context_refs import RESERVED_KINDS

BUILTIN_PREFIXES = RESERVED_KINDS


class ContextCompletionItem:
    """One autocomplete suggestion: the text to insert, a label and a note."""

    __slots__ = ("display", "meta", "text")

    def __init__(self, text: str, display: str = "", meta: str = "") -> None:
        self.text = text
        self.display = display or text
        self.meta = meta


class ContextReferenceProvider(ABC):
    """A plugin's ``@<prefix>:`` reference kind."""

    prefix: str = ""
    description: str = ""

    @abstractmethod
    async def autocomplete(self, query: str, *, limit: int = 10) -> list[ContextCompletionItem]:
        """Suggestions for a partly typed target."""

    @abstractmethod
    async def expand(self, target: str) -> str | None:
        """The text ``@<prefix>:<target>`` stands for; None attaches nothing."""
