"""How the user's skills are used, and the ``on_skill_lifecycle`` hook (issue 32).

The record is the reference's sidecar, ``$HERMES_HOME/skills/.usage.json``: one entry per skill
name with its counters (``use_count``, ``view_count``, ``patch_count``, their ``last_*_at``
times, ``patch_generation`` and ``last_reused_patch_generation``) and ``created_by: "agent"``
for a skill the model wrote with ``skill_manage``. Plugins written for the reference's curator
read the same keys.

What counts, as in the reference: a ``skill_view`` that found the skill is a view and a use
(action ``loaded``); a ``skill_manage`` create is ``created``, a patch ``patched``, an edit
``edited``; a delete drops the entry and fires nothing. After each change the hook gets
``action``, ``skill_name``, ``provenance`` (``agent_created``, ``installed`` for a plugin's
skill, or ``local``), ``task_id`` and ``session_id``, and for ``loaded`` also
``use_count``, ``reused`` (used before) and ``reuse_after_patch`` (first use since a patch).

The record is best effort: a file that cannot be read or written is logged and counts start
again; it never fails the tool call. Writes go through one lock and an atomic rename.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hermesd.runtime.hooks import HookBus

log = logging.getLogger(__name__)

USAGE_FILE = ".usage.json"
#: skill_manage actions -> the hook's action (create, patch and edit change a skill's history)
WRITE_ACTIONS = {"create": "created", "patch": "patched", "edit": "edited"}


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _fresh() -> dict[str, Any]:
    return {
        "use_count": 0,
        "view_count": 0,
        "patch_count": 0,
        "last_used_at": None,
        "last_viewed_at": None,
        "last_patched_at": None,
        "created_at": _now(),
        "state": "active",
        "pinned": False,
    }


class SkillUsage:
    """The usage record of one skills folder, and the hook told of each change."""

    def __init__(self, root: Path, hooks: HookBus | None = None) -> None:
        self.path = Path(root) / USAGE_FILE
        self.hooks = hooks
        self._lock = threading.Lock()

    # --- the record (sync: called on a worker thread) -------------------------------------

    def read(self) -> dict[str, dict[str, Any]]:
        """The whole record; ``{}`` when missing or unreadable."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("skill usage record %s unreadable (%s); counting anew", self.path, exc)
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): v for k, v in data.items() if isinstance(v, dict)}

    def _write(self, data: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".usage_", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=2, sort_keys=True, ensure_ascii=False)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _change(self, name: str, change: Any, *, drop: bool = False) -> dict[str, Any] | None:
        """Apply ``change(entry)`` to ``name``'s entry (or drop it); the facts it returns, or
        None when the record could not be written."""
        with self._lock:
            try:
                data = self.read()
                if drop:
                    data.pop(name, None)
                    facts: dict[str, Any] = {}
                else:
                    entry = data.setdefault(name, _fresh())
                    facts = change(entry)
                self._write(data)
                return facts
            except OSError as exc:
                log.warning("skill usage record %s not written: %s", self.path, exc)
                return None

    def used(self, name: str) -> dict[str, Any] | None:
        """A view that loads the skill: the counters the ``loaded`` hook reports."""

        def change(entry: dict[str, Any]) -> dict[str, Any]:
            uses = _count(entry.get("use_count"))
            generation = _count(entry.get("patch_generation"))
            last_reused = min(_count(entry.get("last_reused_patch_generation")), generation)
            reused = uses > 0
            after_patch = reused and generation > last_reused
            entry["view_count"] = _count(entry.get("view_count")) + 1
            entry["use_count"] = uses + 1
            entry["last_viewed_at"] = entry["last_used_at"] = _now()
            entry["patch_generation"] = generation
            entry["last_reused_patch_generation"] = generation if after_patch else last_reused
            return {
                "created_by": entry.get("created_by"),
                "use_count": uses + 1,
                "reused": reused,
                "reuse_after_patch": after_patch,
            }

        return self._change(name, change)

    def written(self, name: str, action: str) -> dict[str, Any] | None:
        """A ``skill_manage`` write (``create``, ``patch`` or ``edit``)."""

        def change(entry: dict[str, Any]) -> dict[str, Any]:
            if action == "create":  # a new skill, even where an old entry survived
                entry.clear()
                entry.update(_fresh(), created_by="agent")
            else:
                entry["patch_count"] = _count(entry.get("patch_count")) + 1
                entry["patch_generation"] = _count(entry.get("patch_generation")) + 1
                entry["last_patched_at"] = _now()
            return {"created_by": entry.get("created_by")}

        return self._change(name, change)

    def forget(self, name: str) -> None:
        """A deleted skill: its entry goes."""
        self._change(name, None, drop=True)

    # --- the hook (on the loop) -------------------------------------------------------------

    async def after_view(self, name: str, session_id: str = "") -> None:
        """``skill_view`` found ``name``: count it and fire ``loaded``."""
        facts = await asyncio.to_thread(self.used, name)
        if facts is not None:
            await self._tell("loaded", name, facts, session_id)

    async def after_write(self, action: str, name: str, session_id: str = "") -> None:
        """``skill_manage`` did ``action`` to ``name``: record it and fire what it was."""
        if action == "delete":
            await asyncio.to_thread(self.forget, name)
            return
        told = WRITE_ACTIONS.get(action)
        if told is None:  # write_file / remove_file: a supporting file, not the skill's history
            return
        facts = await asyncio.to_thread(self.written, name, action)
        if facts is not None:
            await self._tell(told, name, facts, session_id)

    async def _tell(self, action: str, name: str, facts: dict[str, Any], session_id: str) -> None:
        if self.hooks is None or not self.hooks.has("on_skill_lifecycle"):
            return
        await self.hooks.invoke(
            "on_skill_lifecycle",
            action=action,
            skill_name=name,
            provenance=provenance(name, facts),
            task_id=session_id,
            session_id=session_id,
            use_count=facts.get("use_count"),
            reused=facts.get("reused"),
            reuse_after_patch=facts.get("reuse_after_patch"),
        )


def provenance(name: str, facts: dict[str, Any]) -> str:
    """The reference's bounded label for where a skill came from."""
    if ":" in name:
        return "installed"  # a plugin's skill
    if facts.get("created_by") == "agent":
        return "agent_created"
    return "local"
