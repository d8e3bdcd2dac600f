"""The built-in ``skills_list`` and ``skill_view`` tools, registered like any plugin tool.

They register through `ToolRegistry.register` with owner ``builtin`` and toolset ``skills``; the
result shapes are built by `hermesd.tools.skill_catalog.SkillCatalog` (docs/hermes-compat.md §7).
A ``skill_view`` that finds its skill is counted in the usage record and fires
``on_skill_lifecycle`` (`hermesd.tools.skill_usage`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hermesd.tools.registry import BUILTIN, ToolRegistry
from hermesd.tools.skill_catalog import SkillCatalog
from hermesd.tools.skill_usage import SkillUsage

TOOLSET = "skills"

SKILLS_LIST_SCHEMA: dict[str, Any] = {
    "name": "skills_list",
    "description": (
        "List the user's skills and return each one's name, description and category. Call "
        "skill_view(name) to load a skill's full instructions."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "category": {
                "type": "string",
                "description": "Only list skills of this category (optional)",
            },
        },
        "required": [],
    },
}

SKILL_VIEW_SCHEMA: dict[str, Any] = {
    "name": "skill_view",
    "description": (
        "Load a skill by name and return its SKILL.md content and the list of files linked "
        "from it; with file_path, return the content of one of those files instead. Plugin "
        "skills use the qualified form 'plugin:skill'."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "description": "Skill name from skills_list, or 'plugin:skill' for a skill a "
                "plugin provides",
            },
            "file_path": {
                "type": "string",
                "description": "Path of a linked file relative to the skill folder, for example "
                "'references/api.md' (optional; omit to get SKILL.md)",
            },
        },
        "required": ["name"],
    },
}


def register_skill_tools(
    registry: ToolRegistry, catalog: SkillCatalog, usage: SkillUsage | None = None
) -> None:
    """Register ``skills_list`` and ``skill_view`` backed by ``catalog`` (views counted in
    ``usage``)."""

    def skills_list(args: dict[str, Any], **_: Any) -> str:
        category = args.get("category") or None
        return json.dumps(catalog.list_result(category), ensure_ascii=False)

    async def skill_view(args: dict[str, Any], session_id: str = "", **_: Any) -> str:
        name = str(args.get("name") or "")
        result = await asyncio.to_thread(catalog.view_result, name, args.get("file_path") or None)
        if usage is not None and result.get("success"):
            await usage.after_view(str(result.get("name") or name).strip(), session_id)
        return json.dumps(result, ensure_ascii=False)

    registry.register(
        "skills_list", TOOLSET, SKILLS_LIST_SCHEMA, skills_list, emoji="📚", owner=BUILTIN
    )
    registry.register(
        "skill_view",
        TOOLSET,
        SKILL_VIEW_SCHEMA,
        skill_view,
        emoji="📚",
        owner=BUILTIN,
        is_async=True,
    )
