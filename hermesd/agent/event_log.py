"""`EventLog`: numbers every ``session.event`` and keeps the recent ones for clients that
re-attach (``session.attach`` with ``after_seq``).

Each event of a session gets ``seq``, one more than the session's previous event. The numbers
of one daemon run start above every number an earlier run can have used (the start time in
milliseconds, times 1,000), so a client that saw events before a daemon restart asks with an
``after_seq`` below this run's first number, and is told that events between are not in
memory (the stored messages, ``session.history``, have what was kept). The newest
``per_session`` events of the ``sessions`` most recently active sessions are kept; memory
only, nothing here touches the store.
"""

from __future__ import annotations

import collections
import time
from typing import Any

PER_SESSION = 2000
SESSIONS = 64


class EventLog:
    """Sequence numbers and recent events, per session."""

    def __init__(self, per_session: int = PER_SESSION, sessions: int = SESSIONS) -> None:
        self.base = int(time.time() * 1000) * 1000
        self.per_session = per_session
        self.sessions = sessions
        self._last: dict[str, int] = {}
        self._recent: collections.OrderedDict[str, collections.deque[dict[str, Any]]] = (
            collections.OrderedDict()
        )

    def stamp(self, event: dict[str, Any]) -> dict[str, Any]:
        """``event`` with its ``seq``, remembered; the original is not changed."""
        sid = str(event.get("session_id"))
        seq = self._last.get(sid, self.base) + 1
        self._last[sid] = seq
        stamped = {**event, "seq": seq}
        recent = self._recent.get(sid)
        if recent is None:
            recent = self._recent[sid] = collections.deque(maxlen=self.per_session)
            while len(self._recent) > self.sessions:  # numbers stay: never given twice
                self._recent.popitem(last=False)
        else:
            self._recent.move_to_end(sid)
        recent.append(stamped)
        return stamped

    def last_seq(self, session_id: str) -> int | None:
        """The newest number given to an event of this session in this run, if any."""
        return self._last.get(session_id)

    def since(self, session_id: str, after_seq: int) -> tuple[list[dict[str, Any]], bool]:
        """The kept events after ``after_seq``, and whether they are all there were (False
        when ``after_seq`` is from an earlier run or older events were let go)."""
        recent = self._recent.get(session_id) or ()
        events = [e for e in recent if e["seq"] > after_seq]
        first_kept = recent[0]["seq"] if recent else self._last.get(session_id, self.base) + 1
        complete = after_seq >= self.base and after_seq + 1 >= first_kept
        return events, complete

    def forget(self, session_id: str) -> None:
        """Drop a deleted session's events."""
        self._recent.pop(session_id, None)
