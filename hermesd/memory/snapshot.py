"""The memory blocks of the system prompt, rendered as hermes-agent 0.19 renders them.

A session's blocks are taken once, from the files as they are when its first turn starts, and
kept in state.db (``BuiltinMemory.prompt_block``): writes during the session reach the files
but not its prompt, so the prompt prefix stays the same for every request of the session.
"""

from __future__ import annotations

import json

from hermesd.memory.edits import percent
from hermesd.memory.files import ENTRY_DELIMITER, MemoryFiles

RULE = "═" * 46
HEADERS = {"memory": "MEMORY (your personal notes)", "user": "USER PROFILE (who the user is)"}


def render_block(target: str, entries: list[str], limit: int) -> str:
    """One block: rule, header with usage, rule, the entries; "" when there are none."""
    if not entries:
        return ""
    content = ENTRY_DELIMITER.join(entries)
    current = len(content)
    header = f"{HEADERS[target]} [{percent(current, limit)}% — {current:,}/{limit:,} chars]"
    return f"{RULE}\n{header}\n{RULE}\n{content}"


def take(files: MemoryFiles) -> str:
    """Both blocks as they are on disk now, as the JSON text stored for a session."""
    blocks = {t: render_block(t, files.entries(t), files.limits.of(t)) for t in ("memory", "user")}
    return json.dumps(blocks, ensure_ascii=False)


def compose(stored: str, *, memory_enabled: bool, user_enabled: bool) -> str:
    """The prompt text from a stored snapshot: the enabled blocks, a blank line apart."""
    try:
        blocks = json.loads(stored)
    except ValueError:
        return ""
    if not isinstance(blocks, dict):
        return ""
    wanted = [("memory", memory_enabled), ("user", user_enabled)]
    parts = [str(blocks.get(t) or "").strip() for t, on in wanted if on]
    return "\n\n".join(p for p in parts if p)
