"""Which session each chat talks in: the reference's session keys, kept in a small file.

`session_key` is the reference's ``build_session_key`` (namespace ``agent:main``): a DM is
keyed by its chat (and thread); a group by its chat, thread and, outside a thread, the sender
(``group_sessions_per_user``); a thread is shared by its participants unless
``thread_sessions_per_user``. `ChatSessions` maps keys to hermesd session ids and keeps the
map in ``$HERMES_HOME/gateway/sessions.json`` (written off the event loop), so a chat goes on
in the same session after a restart; ``/new`` and ``/reset`` point the key at a new session.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

from hermesd.gateway.base import SessionSource

log = logging.getLogger(__name__)

NAMESPACE = "agent:main"


def session_key(
    source: SessionSource,
    group_sessions_per_user: bool = True,
    thread_sessions_per_user: bool = False,
) -> str:
    """The reference's key of the conversation ``source`` belongs to."""
    platform = source.platform.value
    if source.chat_type == "dm":
        who = source.chat_id or source.user_id_alt or source.user_id
        parts = [NAMESPACE, platform, "dm", *([who] if who else []), *_thread(source)]
        return ":".join(parts)
    parts = [NAMESPACE, platform, source.chat_type]
    if source.chat_id:
        parts.append(source.chat_id)
    parts += _thread(source)
    participant = source.user_id_alt or source.user_id
    per_user = group_sessions_per_user and not (source.thread_id and not thread_sessions_per_user)
    if per_user and participant:
        parts.append(str(participant))
    return ":".join(parts)


def _thread(source: SessionSource) -> list[str]:
    return [source.thread_id] if source.thread_id else []


class ChatSessions:
    """Session key → session id, kept in a file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ids: dict[str, str] = {}
        self._lock = asyncio.Lock()

    def load(self) -> None:
        """Read the file (at start, before the loop serves chats)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("gateway: cannot read %s (%s); chats start new sessions", self.path, exc)
            return
        if isinstance(data, dict):
            self.ids = {str(k): str(v) for k, v in data.items() if isinstance(v, str)}

    def get(self, key: str) -> str | None:
        """The session of ``key``, if it has one."""
        return self.ids.get(key)

    def key_of(self, session_id: str) -> str | None:
        """The key whose session is ``session_id``."""
        return next((k for k, v in self.ids.items() if v == session_id), None)

    async def set(self, key: str, session_id: str) -> None:
        """Point ``key`` at ``session_id`` and save."""
        self.ids[key] = session_id
        async with self._lock:
            await asyncio.to_thread(write_private_json, self.path, dict(self.ids))


def write_private_json(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` with ``data`` as JSON, readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
