"""hermesctl's commands, one module per area, imported only when needed.

``INDEX`` maps each command word to the area modules that define it, so ``hermesctl status``
imports one small module instead of all of them; ``--help``, completion and unknown words load
every area (``ORDER`` is their order in --help). ``tests/e2e/test_hermesctl.py`` checks that
``INDEX`` matches what the modules really register.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

ORDER = ["core", "chat", "sessions", "plugins", "plugin_mgmt", "cmd", "approvals", "memory"]
ORDER += ["ops", "cron", "mcp", "usage"]  # day-two operations, jobs, MCP servers, usage
ORDER += ["processes"]  # background processes (issue 33)
ORDER += ["acp"]  # the Agent Client Protocol on stdio (issue 35)
ORDER += ["gateway"]  # chat platforms (issue 36)

INDEX: dict[str, tuple[str, ...]] = {
    "status": ("core",),
    "ping": ("core",),
    "chat": ("chat",),
    "sessions": ("sessions",),
    "plugins": ("plugins", "plugin_mgmt"),
    "tools": ("plugins",),
    "skills": ("plugins",),
    "cmd": ("cmd",),
    "completion": ("cmd",),
    "approvals": ("approvals",),
    "memory": ("memory",),
    "cron": ("cron",),
    "mcp": ("mcp",),
    "usage": ("usage",),
    "processes": ("processes",),
    "acp": ("acp",),
    "gateway": ("gateway",),
}
INDEX.update(dict.fromkeys(["config", "reload", "logs", "doctor", "stop"], ("ops",)))


def areas(word: str | None = None) -> list[ModuleType]:
    """The area modules for a command word (all of them when ``word`` is None or unknown)."""
    names = INDEX.get(word, ORDER) if word else ORDER
    return [importlib.import_module(f"{__name__}.{name}") for name in ORDER if name in names]
