"""Tools the model can call: the registry and call pipeline (registry.py) with its results
(results.py) and visibility checks (checks.py), schema rules and lint (schema.py), and the
built-in tools (builtin_files.py, builtin_skills.py)."""

from hermesd.tools.registry import (
    BUILTIN,
    ToolEntry,
    ToolRegistry,
    ToolRejected,
    current_session,
)
from hermesd.tools.results import error_result

__all__ = ["BUILTIN", "ToolEntry", "ToolRegistry", "ToolRejected", "current_session",
           "error_result"]
