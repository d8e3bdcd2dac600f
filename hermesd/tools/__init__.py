"""Tools the model can call: the registry and call pipeline (registry.py), schema rules and
lint (schema.py), and the built-in skill tools (builtin_skills.py)."""

from hermesd.tools.registry import (
    BUILTIN,
    ToolEntry,
    ToolRegistry,
    ToolRejected,
    current_session,
    error_result,
)

__all__ = ["BUILTIN", "ToolEntry", "ToolRegistry", "ToolRejected", "current_session",
           "error_result"]
