"""What a ``delegate_task`` call asks for: the tool's schema, ``delegation.*``, the tasks of a
call checked (the model is untrusted), each child's first message, and the model a routing
plugin chooses for each task through ``tools.delegate_tool`` (hermesd's module of that name).
Running the children is ``hermesd.agent.delegate``'s job.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from hermesd.model.fallback import EndpointSpec
from hermesd.plugins import hostapi

log = logging.getLogger(__name__)

ROLES = ("leaf", "orchestrator")
MAX_GOAL = 20_000  # characters of one goal or context: a task, not a document

_TASK = {
    "type": "object",
    "properties": {
        "goal": {"type": "string", "description": "What this sub-agent should achieve"},
        "context": {"type": "string", "description": "What it needs to know for this task"},
        "role": {"type": "string", "enum": list(ROLES), "description": "Overrides 'role'"},
    },
    "required": ["goal"],
}

SCHEMA: dict[str, Any] = {
    "name": "delegate_task",
    "description": (
        "Hand work to sub-agents, each a fresh session that sees only what you pass it (not "
        "this conversation) and works with its own tools in the same workspace. Give 'goal' "
        "(and 'context') for one task, or 'tasks' for several that run in parallel. Each "
        "answers with a summary of what it did. With background=true the call returns at once "
        "and the results arrive later as a message; otherwise it waits for them."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "goal": {"type": "string", "description": "A self-contained task for one sub-agent"},
            "context": {
                "type": "string",
                "description": "Background it needs: paths, errors, constraints",
            },
            "tasks": {"type": "array", "items": _TASK, "description": "Several tasks at once"},
            "toolsets": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Toolsets the sub-agents may use (default: yours)",
            },
            "role": {
                "type": "string",
                "enum": list(ROLES),
                "description": "leaf (default) cannot delegate further; orchestrator can, "
                "within the depth limit",
            },
            "background": {
                "type": "boolean",
                "description": "Return at once; the results arrive as a message later",
            },
            "max_iterations": {
                "type": "integer",
                "description": "Model calls each sub-agent may make (capped by configuration)",
            },
        },
        "required": [],
    },
}


class DelegationError(ValueError):
    """A delegate_task call that cannot run as asked (its text goes back to the model)."""


@dataclass
class DelegationSettings:
    """``delegation.*``."""

    model: str | None = None
    max_spawn_depth: int = 1
    max_concurrent_children: int = 3
    max_iterations: int = 50
    default_toolsets: list[str] | None = None
    allow_in_children: list[str] = field(default_factory=list)
    # children's own endpoint (``delegation.base_url``; None: the daemon's)
    base_url: str | None = None
    provider: str = "custom"
    api_key: str | None = None

    @classmethod
    def from_config(cls, config: Any) -> DelegationSettings:
        """Read the ``delegation`` block (bounds floored at 1)."""
        base_url = config.get("delegation.base_url") or None
        return cls(
            base_url=base_url,
            provider=str(config.get("delegation.provider") or "custom"),
            # the reference's fallback for a key of delegation.base_url: OPENAI_API_KEY
            api_key=config.get("delegation.api_key") or os.environ.get("OPENAI_API_KEY") or None,
            model=config.get("delegation.model") or None,
            max_spawn_depth=max(1, int(config.get("delegation.max_spawn_depth", 1))),
            max_concurrent_children=max(
                1, int(config.get("delegation.max_concurrent_children", 3))
            ),
            max_iterations=max(1, int(config.get("delegation.max_iterations", 50))),
            default_toolsets=config.get("delegation.default_toolsets"),
            allow_in_children=list(config.get("delegation.allow_in_children") or []),
        )

    def endpoint(self, model: str) -> EndpointSpec | None:
        """Where a child's turn with ``model`` goes (None: the daemon's endpoint)."""
        if self.base_url is None:
            return None
        return EndpointSpec(self.provider, model, self.base_url, self.api_key)


@dataclass
class Task:
    """One child to run: what the model asked for, checked."""

    index: int
    goal: str
    context: str
    role: str
    model: str | None = None  # a routing plugin's choice (tools.delegate_tool)


@dataclass
class _Planner:
    """The ``parent_agent`` a plugin-wrapped ``tools.delegate_tool.delegate_task`` sees."""

    model: str
    provider: str = "custom"
    base_url: str = ""
    api_key: str = ""
    routes: dict[int, dict[str, Any]] = field(default_factory=dict)


def route(tasks: list[Task], args: dict[str, Any], model: str | None) -> None:
    """Each task's model as plugins wrapping ``tools.delegate_tool`` choose it (hermesd's
    module of that name, loaded by such a plugin; the real hermes-agent's is never called)."""
    module = sys.modules.get("tools.delegate_tool")
    where = str(getattr(module, "__file__", "") or "")
    if module is None or not where.startswith(str(hostapi.COMPAT_DIR)):
        return
    planner = _Planner(model=model or "")
    try:
        answer = module.delegate_task(
            goal=args.get("goal"),
            context=args.get("context"),
            tasks=args.get("tasks"),
            max_iterations=args.get("max_iterations"),
            role=args.get("role"),
            background=args.get("background"),
            parent_agent=planner,
        )
    except Exception as exc:
        log.exception("a plugin's delegate_task wrapper failed")
        raise DelegationError(f"delegate_task routing failed: {exc}") from exc
    try:
        parsed = json.loads(answer) if isinstance(answer, str) else {}
    except ValueError:
        parsed = {}
    if isinstance(parsed, dict) and parsed.get("error"):
        raise DelegationError(str(parsed["error"]))
    for task in tasks:
        chosen = planner.routes.get(task.index, {}).get("model")
        if isinstance(chosen, str) and chosen.strip():
            task.model = chosen.strip()


def parse_tasks(args: dict[str, Any]) -> list[Task]:
    """The tasks of a call: ``tasks`` or ``goal``/``context``, each checked."""
    role = args.get("role") or "leaf"
    raw = args.get("tasks")
    if raw is not None and raw != []:
        if not isinstance(raw, list):
            raise DelegationError("'tasks' must be a list of {goal, context, role} objects.")
        items = raw
    elif isinstance(args.get("goal"), str) and args["goal"].strip():
        items = [{"goal": args["goal"], "context": args.get("context"), "role": role}]
    else:
        raise DelegationError("Provide either 'goal' (one task) or 'tasks' (several).")
    tasks = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise DelegationError(f"Task {index} must be an object with a 'goal'.")
        goal, context = item.get("goal"), item.get("context") or ""
        if not isinstance(goal, str) or not goal.strip():
            raise DelegationError(f"Task {index} is missing a 'goal'.")
        if not isinstance(context, str):
            raise DelegationError(f"Task {index}: 'context' must be text.")
        if len(goal) + len(context) > MAX_GOAL:
            raise DelegationError(f"Task {index} is too long (over {MAX_GOAL} characters).")
        task_role = item.get("role") or role
        if task_role not in ROLES:
            raise DelegationError(f"Task {index}: role must be leaf or orchestrator.")
        tasks.append(Task(index, goal.strip(), context.strip(), task_role))
    return tasks


def brief(task: Task) -> str:
    """The child's first message: its task, self-contained."""
    text = f"You are a sub-agent working on one delegated task.\n\nTask:\n{task.goal}"
    if task.context:
        text += f"\n\nContext:\n{task.context}"
    return text + (
        "\n\nWork it through with your tools, then reply with a concise summary of what you "
        "did and found: it is all the delegating agent will see."
    )


def title(goal: str) -> str:
    line = " ".join(goal.split())
    return "↳ " + (line if len(line) <= 60 else line[:59] + "…")
