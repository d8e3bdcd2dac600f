"""The ``skill_manage`` tool (toolset ``skills``): the agent writes and edits its own skills.

Actions, parameters and result keys are the reference's (create, patch, edit, delete,
write_file, remove_file). The checks and the disk work are `hermesd.tools.skill_writer`; this
module adds what a person sees. A call that adds or changes a file that may be run (under
``scripts/``, ``templates/`` or ``assets/``) is asked about through the approval broker first
(the ``prepare`` step, `hermesd.tools.consent`), naming the file and showing its start; every
write that succeeds is sent to the session's clients as a ``skill.changed`` event, which
``hermesctl chat`` prints, and recorded in the usage record, which fires ``on_skill_lifecycle``
(`hermesd.tools.skill_usage`). ``skills_list`` and ``skill_view`` read the folder on each call,
so they see a change at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from hermesd.tools.consent import Consent
from hermesd.tools.registry import BUILTIN, ToolRegistry
from hermesd.tools.skill_catalog import SkillCatalog
from hermesd.tools.skill_writer import (
    ACTIONS,
    SkillRequest,
    SkillWriteError,
    SkillWriter,
    check_request,
)

log = logging.getLogger(__name__)

TOOLSET = "skills"
EVENT = "skill.changed"
_PREVIEW_LINES = 20  # of a script, shown in the approval question

Emit = Callable[[dict[str, Any]], None]
RunningTurn = Callable[[str], str | None]

_STR = {"type": "string"}
SCHEMA: dict[str, Any] = {
    "name": "skill_manage",
    "description": (
        "Create and maintain your own skills: reusable procedures kept as SKILL.md files "
        "(YAML front matter with name and description, then markdown instructions) in the "
        "user's skills folder.\n\nActions: create (name, content, optional category); patch "
        "(old_string -> new_string in SKILL.md or in file_path; preferred for small fixes); "
        "edit (content replaces the whole SKILL.md); delete; write_file and remove_file (a "
        "supporting file under references/, templates/, scripts/ or assets/).\n\nWrite a skill "
        "after a task that took many steps, needed a correction or revealed a workflow worth "
        "repeating; fix a skill as soon as it proves wrong. A good skill says when it applies, "
        "gives numbered steps with exact commands, pitfalls and how to verify. Writing a "
        "script (scripts/, templates/, assets/) asks the user first. Plugin skills "
        "('plugin:skill') are read-only."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS), "description": "What to do."},
            "name": {
                **_STR,
                "description": "Skill name: lowercase letters, digits, '-', '_', '.', at most "
                "64 characters. Must name an existing skill except for create.",
            },
            "content": {
                **_STR,
                "description": "The whole SKILL.md (front matter and body); for create and "
                "edit. Read the skill with skill_view before an edit.",
            },
            "old_string": {
                **_STR,
                "description": "For patch: the text to replace; unique unless replace_all.",
            },
            "new_string": {**_STR, "description": "For patch: the replacement ('' deletes)."},
            "replace_all": {
                "type": "boolean",
                "description": "For patch: replace every match (default false).",
            },
            "category": {
                **_STR,
                "description": "For create: a folder grouping skills, e.g. 'devops' (optional).",
            },
            "file_path": {
                **_STR,
                "description": "For write_file/remove_file: a path under references/, "
                "templates/, scripts/ or assets/. For patch: the file to patch (default "
                "SKILL.md).",
            },
            "file_content": {**_STR, "description": "For write_file: the file's content."},
            "absorbed_into": {
                **_STR,
                "description": "For delete: the skill this one was merged into ('' when it is "
                "simply dropped). Informational.",
            },
        },
        "required": ["action", "name"],
    },
}


def _question(request: SkillRequest) -> str:
    """The approval text for a write that adds or changes a script."""
    if request.action == "write_file":
        body = request.file_content or ""
        lines = body.splitlines()
        preview = "\n".join(f"  {line[:200]}" for line in lines[:_PREVIEW_LINES])
        more = (
            f"\n  … {len(lines) - _PREVIEW_LINES} more lines" if len(lines) > _PREVIEW_LINES else ""
        )
        return (
            f"skill_manage wants to write {request.file_path} ({len(body.encode())} bytes) in "
            f"skill '{request.name}'; the agent may run it later:\n{preview}{more}"
        )
    return (
        f"skill_manage wants to patch {request.file_path} in skill '{request.name}' (a file "
        f"the agent may run later): replace\n  {(request.old_string or '')[:300]!r}\nwith\n"
        f"  {(request.new_string or '')[:300]!r}"
    )


class SkillManageTool:
    """``skill_manage`` over a `SkillWriter`, telling the session's clients of each change."""

    def __init__(
        self,
        catalog: SkillCatalog,
        emit: Emit | None = None,
        running_turn: RunningTurn | None = None,
    ) -> None:
        self.writer = SkillWriter(catalog)
        self.emit = emit
        self.running_turn = running_turn

    def prepare(self, args: dict[str, Any], session_id: str = "") -> Consent:
        """Ask about a call that writes a script; a bad call is left for the handler's error."""
        try:
            request = check_request(args)
        except SkillWriteError:
            return Consent()
        if request.script_path is None:
            return Consent(plan=request)
        return Consent(
            plan=request,
            ask=_question(request),
            rule_key=f"skill_manage:{request.name}:{request.script_path}",
        )

    async def call(
        self, args: dict[str, Any], session_id: str = "", plan: SkillRequest | None = None
    ) -> dict[str, Any]:
        """One call: the reference's result dict (``success``, ``message``/``error``, …). The
        disk work runs on a thread; the event goes out from the loop, where clients live."""
        try:
            request = plan if plan is not None else check_request(args)
            result = await asyncio.to_thread(self.writer.apply, request)
        except SkillWriteError as exc:
            return {"success": False, "error": str(exc)}
        except OSError as exc:
            log.exception("skill_manage %s of %r failed", args.get("action"), args.get("name"))
            return {"success": False, "error": f"Could not write the skill: {exc.strerror or exc}"}
        self._tell(request, result, session_id)
        if self.writer.catalog.usage is not None and result.get("success"):
            await self.writer.catalog.usage.after_write(request.action, request.name, session_id)
        return result

    def _tell(self, request: SkillRequest, result: dict[str, Any], session_id: str) -> None:
        if self.emit is None or not session_id:
            return
        turn = self.running_turn(session_id) if self.running_turn is not None else None
        event = {
            "type": EVENT,
            "session_id": session_id,
            "turn_id": turn,
            "action": request.action,
            "name": request.name,
            "file_path": request.file_path,
            "message": result.get("message", ""),
        }
        try:
            self.emit(event)
        except Exception:  # a client that cannot be told never undoes a finished write
            log.exception("Sending %s failed", EVENT)


def register_skill_manage(
    tools: ToolRegistry,
    catalog: SkillCatalog,
    emit: Emit | None = None,
    running_turn: RunningTurn | None = None,
) -> SkillManageTool:
    """Register ``skill_manage`` (owner ``builtin``, toolset ``skills``) over ``catalog``."""
    tool = SkillManageTool(catalog, emit, running_turn)

    async def handler(
        args: dict[str, Any], session_id: str = "", plan: Any = None, **_: Any
    ) -> str:
        request = plan if isinstance(plan, SkillRequest) else None
        return json.dumps(await tool.call(args, session_id, request), ensure_ascii=False)

    tools.register(
        "skill_manage",
        TOOLSET,
        SCHEMA,
        handler,
        emoji="📝",
        owner=BUILTIN,
        is_async=True,
        prepare=tool.prepare,
        check_arguments=False,
    )
    return tool
