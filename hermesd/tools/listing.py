"""The rows of ``tools.list`` / ``hermesctl tools list``: every tool and why the model lacks it.

Registered tools come from `ToolRegistry.describe` with their ``source`` (``builtin``,
``plugin`` or ``mcp``, from the owner); the reference's tools that nothing registered
(`hermesd.tools.toolsets.REFERENCE_TOOLSETS`) are added as unavailable, "not built in
hermesd", so a person moving from Hermes sees what is missing. The table drives it: a tool
another part of hermesd registers later simply stops being listed as missing.
"""

from __future__ import annotations

from typing import Any

from hermesd.tools.registry import BUILTIN, ToolRegistry
from hermesd.tools.toolsets import REFERENCE_TOOLSETS

MCP_OWNER_PREFIX = "mcp:"  # hermesd.mcp.pool.OWNER_PREFIX (the MCP layer sits above this one)
NOT_BUILT = "not built in hermesd"


def source_of(owner: str) -> str:
    """``builtin``, ``mcp`` or ``plugin``, from a registry owner."""
    if owner == BUILTIN:
        return "builtin"
    return "mcp" if owner.startswith(MCP_OWNER_PREFIX) else "plugin"


def tool_rows(registry: ToolRegistry, toolset: str | None = None) -> list[dict[str, Any]]:
    """Every tool, grouped by toolset (the reference's first, in its table's order, then the
    others by name); registered tools in registration order, then the missing ones."""
    rows = []
    for row in registry.describe():
        row["source"] = source_of(row["owner"])
        row["status"] = "unavailable" if row["reason"] else "available"
        rows.append(row)
    have = {row["name"] for row in rows}
    for name_of_set, names in REFERENCE_TOOLSETS.items():
        for name in names:
            if name in have:
                continue
            have.add(name)
            why = registry.selection.why_not((name_of_set,), name)
            rows.append(
                {
                    "name": name,
                    "toolset": name_of_set,
                    "description": "",
                    "emoji": "",
                    "owner": None,
                    "source": None,
                    "available": False,
                    "enabled": why is None,
                    "status": "unavailable",
                    "reason": NOT_BUILT if why is None else f"{NOT_BUILT}; {why}",
                    "parameters": None,
                }
            )
    if toolset:
        rows = [r for r in rows if r["toolset"] == toolset]
    order = {name: n for n, name in enumerate(REFERENCE_TOOLSETS)}
    return sorted(rows, key=lambda r: (order.get(r["toolset"], len(order)), r["toolset"]))
