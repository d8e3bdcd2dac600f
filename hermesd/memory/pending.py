"""Memory writes staged for a person (``memory.write_approval: true``).

One JSON file per staged write in ``$HERMES_HOME/pending/memory/<id>.json``, the layout and
record the reference uses (``{id, subsystem, action, summary, origin, created_at, payload}``,
plus ``session_id``), so staged writes survive a restart and either program can list them. The
payload is what the write needs to be replayed when approved. Blocking: call from a worker
thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STAGED_MESSAGE = (
    "Staged for approval (memory.write_approval is on). "
    "Not yet saved — review with /memory pending."
)
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def describe(payload: dict[str, Any]) -> str:
    """The one-line summary a person reviews: what the write does and to which file."""
    target = payload.get("target")
    label = "user profile" if target == "user" else "memory"
    action = payload.get("action")
    if action == "batch":
        lines = []
        for op in payload.get("operations") or []:
            op = op if isinstance(op, dict) else {}
            act = op.get("action", "?")
            if act == "remove":
                lines.append(f"- remove: {op.get('old_text', '')}")
            elif act == "replace":
                lines.append(f"- replace: {op.get('old_text', '')} -> {op.get('content', '')}")
            else:
                lines.append(f"- {act}: {op.get('content', '')}")
        count = len(payload.get("operations") or [])
        summary, detail = f"apply {count} op(s) to {label}", "\n".join(lines)
    elif action == "add":
        summary, detail = f"add to {label}", str(payload.get("content") or "")
    elif action == "replace":
        summary = f"replace in {label}"
        detail = f"old: {payload.get('old_text')}\nnew: {payload.get('content')}"
    else:
        summary, detail = f"remove from {label}", str(payload.get("old_text") or "")
    return f"{summary}: {detail[:120]}"


class PendingWrites:
    """The staged memory writes of one HERMES_HOME."""

    def __init__(self, home: Path) -> None:
        self.dir = home / "pending" / "memory"

    def _path(self, pending_id: str) -> Path | None:
        return self.dir / f"{pending_id}.json" if _ID.match(pending_id) else None

    def stage(self, payload: dict[str, Any], session_id: str = "") -> dict[str, Any]:
        """Keep ``payload`` for a person; the record (its ``id`` is what they answer)."""
        record = {
            "id": secrets.token_hex(4),
            "subsystem": "memory",
            "action": payload.get("action", ""),
            "summary": describe(payload).strip(),
            "origin": "foreground",
            "created_at": time.time(),
            "payload": payload,
            "session_id": session_id,
        }
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.dir / f"{record['id']}.json"
        temp = path.with_name(path.name + ".tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False, indent=2))
        os.replace(temp, path)
        return record

    def list(self) -> list[dict[str, Any]]:
        """Every staged write, oldest first (unreadable files are skipped and logged)."""
        if not self.dir.is_dir():
            return []
        records = []
        for path in self.dir.glob("*.json"):
            record = self._load(path)
            if record is not None:
                records.append(record)
        records.sort(key=lambda r: float(r.get("created_at") or 0))
        return records

    def get(self, pending_id: str) -> dict[str, Any] | None:
        path = self._path(pending_id)
        return self._load(path) if path is not None and path.exists() else None

    def discard(self, pending_id: str) -> bool:
        """Forget a staged write; False when there was none."""
        path = self._path(pending_id)
        if path is None:
            return False
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    @staticmethod
    def _load(path: Path) -> dict[str, Any] | None:
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(record, dict) and isinstance(record.get("payload"), dict):
                return record
        log.warning("skipping unreadable staged memory write %s", path)
        return None
