"""hermesd's ``agent.context_engine``: the class context engine plugins subclass.

It is hermesd's own interface (``hermesd.context.engine``), under the reference's module name.
"""

from __future__ import annotations

from hermesd.context.engine import MEMORY_CONTEXT_MAX_CHARS, ContextEngine, sanitize_memory_context

__all__ = ["MEMORY_CONTEXT_MAX_CHARS", "ContextEngine", "sanitize_memory_context"]
