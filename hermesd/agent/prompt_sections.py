"""The plugins' system-prompt sections of each session, rendered once and kept.

The reference builds a session's system prompt once and reuses it turn after turn, so the
prefix a provider caches stays byte-identical (prompt caching); it builds it again only when
something the prompt depends on changed. `FrozenSections` keeps the rendered text of the
plugin sections (``ctx.register_system_prompt_section``) per session, under a key of what they
depend on: the set of sections (a plugin load or unload changes it), the session's model and
platform (a model switch), and how many compactions the session had (the reference rebuilds
after each). A session's first turn, a rewind (``/undo``), a branch or a new session (``/new``)
render afresh. A render that timed out is not kept: the next turn tries again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

#: sessions whose text is kept at once (the least recently used beyond it are dropped)
KEPT_SESSIONS = 1024


class FrozenSections:
    """session id -> (key, rendered sections), the most recently used last."""

    def __init__(self, cap: int = KEPT_SESSIONS) -> None:
        self._kept: OrderedDict[str, tuple[Hashable, str]] = OrderedDict()
        self._cap = cap

    def get(self, session_id: str, key: Hashable) -> str | None:
        """The text kept for ``session_id`` when it was rendered under ``key``, else None."""
        kept = self._kept.get(session_id)
        if kept is None or kept[0] != key:
            return None
        self._kept.move_to_end(session_id)
        return kept[1]

    def keep(self, session_id: str, key: Hashable, text: str) -> None:
        """Keep ``text`` as ``session_id``'s sections, rendered under ``key``."""
        self._kept[session_id] = (key, text)
        self._kept.move_to_end(session_id)
        while len(self._kept) > self._cap:
            self._kept.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """Render ``session_id``'s sections afresh at its next turn."""
        self._kept.pop(session_id, None)
