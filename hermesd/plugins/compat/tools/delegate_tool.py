"""hermesd's ``tools.delegate_tool``: the reference's module names over hermesd's delegation.

Plugins that wrap delegation (hermes-delegate-routing) patch three names of this module:
``delegate_task``, ``_build_child_agent`` and ``_build_dynamic_schema_overrides``. hermesd's own
``delegate_task`` tool (``hermesd.agent.delegate``) calls them, by module attribute so a
plugin's wrapper runs, while it plans a call: ``delegate_task`` here is handed a planning
``parent_agent`` and calls ``_build_child_agent`` once per task, whose ``model`` (after any
wrapper) is the model that child runs with. Called with no hermesd parent it answers with the
reference's error, as the reference does outside an agent.
"""

from __future__ import annotations

import json
from typing import Any

from hermesd.plugins import hostapi

#: tools a child never has unless ``delegation.allow_in_children`` names their toolset
DELEGATE_BLOCKED_TOOLS = frozenset(
    ["delegate_task", "clarify", "memory", "send_message", "execute_code", "cronjob"]
)
MAX_DEPTH = 1
DEFAULT_MAX_ITERATIONS = 50
DEFAULT_TOOLSETS = ["terminal", "file", "web"]


def tool_error(message: str) -> str:
    """A tool result saying what went wrong, in the reference's shape."""
    return json.dumps({"error": message}, ensure_ascii=False)


def check_delegate_requirements() -> bool:
    """Delegation needs nothing more than the daemon."""
    return True


def _build_dynamic_schema_overrides() -> dict[str, Any]:
    """The ``delegate_task`` schema hermesd offers (its registered one)."""
    state = hostapi.state()
    if state is None or state.manager is None:
        return {}
    for entry in state.manager.services.tools.entries():
        if entry.name == "delegate_task":
            return dict(entry.schema)
    return {}


def _build_child_agent(
    task_index: int,
    goal: str,
    context: str | None,
    toolsets: list[str] | None,
    model: str | None,
    max_iterations: int | None,
    task_count: int,
    parent_agent: Any,
    override_provider: str | None = None,
    override_base_url: str | None = None,
    override_api_key: str | None = None,
    override_api_mode: str | None = None,
    override_acp_command: str | None = None,
    override_acp_args: list[str] | None = None,
    role: str = "leaf",
) -> Any:
    """Record what child ``task_index`` runs with on the planning parent (its model)."""
    routes = getattr(parent_agent, "routes", None)
    if isinstance(routes, dict):
        routes[task_index] = {"model": model, "provider": override_provider}
    return routes


def delegate_task(
    goal: str | None = None,
    context: str | None = None,
    tasks: list[dict[str, Any]] | None = None,
    max_iterations: int | None = None,
    role: str | None = None,
    background: bool | None = None,
    parent_agent: Any = None,
) -> str:
    """Plan a hermesd delegation: each task's child through ``_build_child_agent``."""
    if parent_agent is None or not isinstance(getattr(parent_agent, "routes", None), dict):
        return tool_error("delegate_task requires a parent agent context.")
    items = tasks if isinstance(tasks, list) and tasks else [{"goal": goal, "context": context}]
    for index, task in enumerate(items):
        task = task if isinstance(task, dict) else {}
        globals()["_build_child_agent"](
            task_index=index,
            goal=str(task.get("goal") or ""),
            context=task.get("context"),
            toolsets=None,
            model=None,
            max_iterations=max_iterations,
            task_count=len(items),
            parent_agent=parent_agent,
            role=str(task.get("role") or role or "leaf"),
        )
    return json.dumps({"planned": len(items)})
