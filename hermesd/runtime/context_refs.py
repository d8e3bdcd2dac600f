"""Plugin ``@kind:value`` references in a user's message (``ctx.register_context_reference``).

A plugin registers a provider object with a ``prefix`` (the kind) and ``expand(target)``; when a
turn's message mentions ``@<prefix>:<value>``, hermesd calls ``expand(value)`` and attaches the
text it returns to the copy of the message sent to the model, under an "Attached Context"
heading, redacted, size-bounded and inside the untrusted-data marker (a provider reads issue
trackers, chats, documents: content nobody in the conversation wrote). The typed message is
stored unchanged. `ReferenceKinds` is the registry (on the hook bus's `PluginSurfaces`, dropped
when the plugin unloads); `expand_references` does the expansion. Standard library and the
runtime's worker pool only.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

from hermesd import redact, untrusted
from hermesd.runtime.workers import WorkerPool, call_bounded

log = logging.getLogger(__name__)

#: Kinds upstream reserves for its own expanders (files, git, URLs); hermesd refuses them too so
#: a plugin cannot take over what a user of the reference means by ``@file:``.
RESERVED_KINDS = frozenset({"diff", "staged", "file", "folder", "git", "url"})
#: References expanded per message; the rest are named in a warning line.
MAX_REFS_PER_MESSAGE = 8
#: Characters one expansion may bring; a longer one is replaced by a note saying so.
REF_MAX_CHARS = 16000
#: Characters all expansions of one message may bring together.
REFS_TOTAL_CHARS = 32000
_KIND = re.compile(r"[a-z][a-z0-9_-]{0,63}")
# ``@kind:value``: not inside a word or path; the value is quoted (no newline) or runs to a space
_REFERENCE = re.compile(
    r"(?<![\w/])@(?P<kind>[A-Za-z][A-Za-z0-9_-]*):"
    r"(?P<value>`[^`\n]+`|\"[^\"\n]+\"|'[^'\n]+'|\S+)"
)
_TRAILING = ",.;!?"


@dataclass(frozen=True)
class ReferenceKind:
    """One plugin's ``@<kind>:`` provider."""

    plugin: str
    kind: str
    provider: Any  # has ``expand(target) -> str | None``, sync or async


class ReferenceKinds:
    """The registered ``@kind:`` providers, by kind (copy-on-write: turns read without a lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_kind: dict[str, ReferenceKind] = {}

    def add(self, plugin: str, provider: Any) -> str:
        """Register ``provider`` for ``provider.prefix``; the kind, or ValueError saying why not."""
        prefix = getattr(provider, "prefix", None)
        kind = prefix.strip().lower() if isinstance(prefix, str) else ""
        if not _KIND.fullmatch(kind):
            raise ValueError(f"prefix {prefix!r} is not a word such as 'issue' or 'doc'")
        if kind in RESERVED_KINDS:
            raise ValueError(f"prefix {kind!r} is reserved for built-in references")
        if not callable(getattr(provider, "expand", None)):
            raise ValueError("the provider has no expand(target) method")
        with self._lock:
            held = self.by_kind.get(kind)
            if held is not None:
                raise ValueError(f"prefix {kind!r} is already registered by plugin {held.plugin!r}")
            self.by_kind = {**self.by_kind, kind: ReferenceKind(plugin, kind, provider)}
        return kind

    def drop_plugin(self, plugin: str) -> None:
        """Forget every kind ``plugin`` registered."""
        with self._lock:
            self.by_kind = {k: r for k, r in self.by_kind.items() if r.plugin != plugin}


def find_references(message: str, kinds: dict[str, ReferenceKind]) -> list[tuple[str, str, str]]:
    """``(raw, kind, target)`` for each mention of a registered kind, in order, once each."""
    found: list[tuple[str, str, str]] = []
    for match in _REFERENCE.finditer(message):
        kind = match.group("kind").lower()
        if kind not in kinds:
            continue
        written = match.group("value")
        if len(written) > 2 and written[0] in "`\"'" and written[-1] == written[0]:
            value = written[1:-1]
        else:  # a sentence's punctuation is not part of the value
            written = value = written.rstrip(_TRAILING)
        raw = f"@{match.group('kind')}:{written}"
        if value and (raw, kind, value) not in found:
            found.append((raw, kind, value))
    return found


async def expand_references(
    message: str, kinds: dict[str, ReferenceKind], pool: WorkerPool, timeout: float
) -> str:
    """The "Attached Context" block for ``message``'s references ("" when there is none); a
    provider that raises, times out or returns no text adds nothing (logged)."""
    refs = find_references(message, kinds)
    if not refs:
        return ""
    notes: list[str] = []
    if len(refs) > MAX_REFS_PER_MESSAGE:
        dropped = [raw for raw, _, _ in refs[MAX_REFS_PER_MESSAGE:]]
        notes.append(f"not expanded (over {MAX_REFS_PER_MESSAGE} per message): {' '.join(dropped)}")
        refs = refs[:MAX_REFS_PER_MESSAGE]
    # concurrently, so a message's time is that of its slowest reference, not their sum
    texts = await asyncio.gather(
        *(_expand_one(kinds[kind], raw, target, pool, timeout) for raw, kind, target in refs)
    )
    blocks: list[str] = []
    total = 0
    for (raw, kind, _), text in zip(refs, texts, strict=True):
        entry = kinds[kind]
        if text is None:
            continue
        if len(text) > REF_MAX_CHARS or total + len(text) > REFS_TOTAL_CHARS:
            notes.append(f"{raw}: {len(text)} characters, too large to attach")
            continue
        total += len(text)
        source = f"plugin:{entry.plugin}/@{kind}"
        blocks.append(f"{raw}\n{untrusted.mark(redact.redact(text), source)}")
    parts = [*blocks, *(f"- {note}" for note in notes)]
    return "--- Attached Context ---\n\n" + "\n\n".join(parts) if parts else ""


async def _expand_one(
    entry: ReferenceKind, raw: str, target: str, pool: WorkerPool, timeout: float
) -> str | None:
    """``entry``'s text for ``target``, or None (the failure logged with its traceback)."""
    try:
        value = await call_bounded(
            pool, entry.provider.expand, (target,), {}, timeout, f"ref:{entry.plugin}"
        )
    except Exception:
        log.exception("context reference %s (plugin %s) failed; left out", raw, entry.plugin)
        return None
    if value is None:
        return None
    if not isinstance(value, str):
        log.warning(
            "context reference %s (plugin %s) returned %s, not text; left out",
            raw,
            entry.plugin,
            type(value).__name__,
        )
        return None
    return value if value.strip() else None
