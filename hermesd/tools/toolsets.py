"""The reference's toolsets, and which tools the config lets the model see.

`REFERENCE_TOOLSETS` is the one table of hermes-agent 0.19.0's toolset names and the tools each
holds (facts of the reference's interface, in our words): the basic toolsets every built-in
registers into, and the composite names a Hermes config may use (``hermes-cli``, ``debugging``,
``safe``, ``coding``). ``hermesctl tools list`` reads it to list tools hermesd does not have
(yet) beside the registered ones.

`ToolSelection` is the config's choice: ``toolsets`` (the reference's key; ours,
``tools.enabled_toolsets``, is an alias) names what is offered, ``agent.disabled_toolsets``
(ours: ``tools.disabled_toolsets``) what never is; disabled wins. A name is a basic toolset, a
composite (its tools), or ``all``/``*``; a platform composite (``hermes-cli``, ``hermes-*``)
means every toolset, plugin and MCP ones included, as the reference's default does. Disabling
a composite ``hermes-*`` removes nothing, as in the reference (its tools are the core ones).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_BROWSER = (
    "browser_navigate",
    "browser_snapshot",
    "browser_click",
    "browser_type",
    "browser_scroll",
    "browser_back",
    "browser_press",
    "browser_get_images",
    "browser_vision",
    "browser_console",
    "browser_cdp",
    "browser_dialog",
)

#: basic toolset -> the reference's tools in it (the order ``hermesctl tools list`` shows)
REFERENCE_TOOLSETS: dict[str, tuple[str, ...]] = {
    "file": ("read_file", "write_file", "patch", "search_files"),
    "terminal": ("terminal", "process"),
    "web": ("web_search", "web_extract"),
    "browser": _BROWSER,
    "code_execution": ("execute_code",),
    "delegation": ("delegate_task",),
    "vision": ("vision_analyze",),
    "image_gen": ("image_generate",),
    "tts": ("text_to_speech",),
    "todo": ("todo",),
    "clarify": ("clarify",),
    "memory": ("memory",),
    "session_search": ("session_search",),
    "skills": ("skills_list", "skill_view", "skill_manage"),
    "cronjob": ("cronjob",),
}

#: toolsets whose tools are another toolset's too (``browser`` also offers ``web_search``)
_ALSO: dict[str, tuple[str, ...]] = {"browser": ("web_search",), "search": ("web_search",)}

#: composite name -> the basic toolsets it stands for
COMPOSITES: dict[str, tuple[str, ...]] = {
    "debugging": ("terminal", "web", "file"),
    "safe": ("web", "vision", "image_gen"),
    "coding": (
        "web",
        "terminal",
        "file",
        "vision",
        "skills",
        "browser",
        "todo",
        "memory",
        "session_search",
        "clarify",
        "code_execution",
        "delegation",
    ),
}

_EVERYTHING = frozenset({"all", "*"})


def reference_toolset(tool: str) -> str | None:
    """The reference's toolset of a tool name, if it is one of the reference's tools."""
    for toolset, tools in REFERENCE_TOOLSETS.items():
        if tool in tools:
            return toolset
    return None


def _setting(config: Any, dotted: str) -> Any:
    """``dotted`` of a `hermesd.daemon.config.Config` (``get``) or of a plain nested mapping."""
    if not isinstance(config, Mapping):
        return config.get(dotted)
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _is_platform(name: str) -> bool:
    return name.startswith("hermes-")


def expand(names: Iterable[str]) -> frozenset[str] | None:
    """Toolset and tool names a list of toolset names stands for; None for everything."""
    out: set[str] = set()
    for raw in names:
        name = str(raw)
        if name in _EVERYTHING or _is_platform(name):
            return None
        out.add(name)
        for basic in COMPOSITES.get(name, ()):
            out.add(basic)
            out.update(REFERENCE_TOOLSETS[basic])
        out.update(REFERENCE_TOOLSETS.get(name, ()))
        out.update(_ALSO.get(name, ()))
    return frozenset(out)


@dataclass(frozen=True)
class ToolSelection:
    """Which tools the config offers: ``enabled`` (None: all) minus ``disabled``; both hold
    toolset names and the tool names they stand for."""

    enabled: frozenset[str] | None = None
    disabled: frozenset[str] = frozenset()
    #: the configured names, as written (for messages)
    enabled_names: tuple[str, ...] | None = None
    disabled_names: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Any) -> ToolSelection:
        """Read ``toolsets``/``tools.enabled_toolsets`` and ``agent.disabled_toolsets``/
        ``tools.disabled_toolsets`` (each pair: the reference's spelling, then ours)."""
        enabled = _setting(config, "toolsets")
        if enabled is None:
            enabled = _setting(config, "tools.enabled_toolsets")
        disabled = [
            *(_setting(config, "agent.disabled_toolsets") or []),
            *(_setting(config, "tools.disabled_toolsets") or []),
        ]
        return cls.of(enabled, disabled)

    @classmethod
    def of(cls, enabled: Iterable[str] | None, disabled: Iterable[str] = ()) -> ToolSelection:
        """A selection from lists of toolset names."""
        disabled_names = tuple(str(n) for n in disabled)
        # a platform composite in the disabled list removes nothing (its tools are the core)
        removed = expand(n for n in disabled_names if not _is_platform(n))
        return cls(
            enabled=None if enabled is None else expand(enabled),
            disabled=frozenset() if removed is None else removed,
            enabled_names=None if enabled is None else tuple(str(n) for n in enabled),
            disabled_names=disabled_names,
        )

    @property
    def everything(self) -> bool:
        """Whether this selection offers every tool (nothing enabled-only, nothing disabled)."""
        return self.enabled is None and not self.disabled

    def why_not(self, toolsets: Iterable[str], tool: str) -> str | None:
        """Why config hides ``tool`` (a sentence), or None when it is offered; ``toolsets``
        are its toolset's names (an MCP server's toolset has two)."""
        names = {*toolsets, tool}
        if names & self.disabled:
            return f"disabled by config (disabled_toolsets: {', '.join(self.disabled_names)})"
        if self.enabled is not None and not names & self.enabled:
            named = ", ".join(self.enabled_names or ()) or "none"
            return f"toolset not enabled by config (toolsets: {named})"
        return None

    def toolset_names(self) -> list[str] | None:
        """The enabled names as a list (None: all), for code that filters by toolset name."""
        return None if self.enabled is None else sorted(self.enabled)
