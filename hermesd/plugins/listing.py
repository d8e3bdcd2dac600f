"""What users see of plugins: the ``/plugins`` text (docs/hermes-compat.md §8) and the
``plugins.list`` dict form. Pure functions of `PluginRecord`s.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hermesd.plugins.manifest import PluginRecord


def plugin_line(record: PluginRecord) -> str:
    """One line: ``  ✓ calculator v1.0.0 (2 tools, 1 hooks)`` or ``  ✗ x v1 — reason``; a
    loaded plugin that registered nothing says so (``  ✓ quiet v1 — registered nothing``).

    A loaded plugin some of whose tools were refused gets `` — rejected tool 'n': why``; one
    that took the key of another gets ``shadows the bundled plugin`` there (or after its
    reason), so the listing shows what the later source replaced.
    """
    if record.state == "memory-provider":
        return provider_line(record)
    mark = "✓" if record.loaded else "✗"
    version = f" v{record.version}" if record.version else ""
    counts = [
        f"{n} {label}"
        for n, label in (
            (len(record.tools), "tools"),
            (len(record.hooks), "hooks"),
            (len(record.middleware), "middleware"),
            (len(record.commands), "commands"),
            (len(record.memory_providers), "memory provider"),
            (len(record.providers), "providers"),
        )
        if n
    ]
    detail = f" ({', '.join(counts)})" if counts else ""
    notes = [f"rejected tool '{r.name}': {r.reason}" for r in record.rejected_tools]
    if record.loaded and not (counts or record.cli_commands or record.skills):
        notes.insert(0, "registered nothing")
    if not record.loaded:
        notes = [record.reason] if record.reason else []
    notes += [f"shadows the {s.source} plugin" for s in record.shadows]
    reason = f" — {'; '.join(notes)}" if notes else ""
    return f"  {mark} {record.key}{version}{detail}{reason}"


def provider_line(record: PluginRecord) -> str:
    """A memory provider plugin: ``  ✓ mem0 (memory provider, active)``, or ``  ✗ … — why``.

    Only the provider ``memory.provider`` names is imported, so only its ``is_available()`` and
    ``unavailable_reason()`` are known; the others say how to select them.
    """
    status = record.provider_status or {}
    where = f"memory provider, {record.source}"
    if not status.get("active"):
        return f"  ○ {record.key} ({where}) — not selected (memory.provider: {record.key})"
    if status.get("available") is None:
        return f"  ○ {record.key} ({where}, active) — not checked yet"
    if status.get("available"):
        return f"  ✓ {record.key} ({where}, active, available)"
    reason = status.get("reason") or "is_available() is false"
    return f"  ✗ {record.key} ({where}, active) — unavailable: {reason}"


def plugins_text(records: Iterable[PluginRecord], home: Path) -> str:
    """The whole ``/plugins`` output (no trailing newline)."""
    records = list(records)
    if not records:
        return (
            f"No plugins installed.\nDrop plugin directories into {home}/plugins/ to get started."
        )
    return "\n".join([f"Plugins ({len(records)}):", *(plugin_line(r) for r in records)])


def plugin_dict(record: PluginRecord) -> dict[str, Any]:
    """One plugin as plain data (str, bool, int, list, dict, None) for ``plugins.list``."""
    return {
        "key": record.key,
        "name": record.name,
        "version": record.version,
        "description": record.description,
        "author": record.author,
        "source": record.source,
        "path": record.path,
        "state": record.state,
        "enabled": record.loaded,
        "reason": record.reason,
        "tools": list(record.tools),
        "hooks": list(record.hooks),
        "commands": list(record.commands),
        "cli_commands": list(record.cli_commands),
        "skills": list(record.skills),
        "middleware": list(record.middleware),
        "rejected_tools": [{"name": r.name, "reason": r.reason} for r in record.rejected_tools],
        "warnings": [w.as_dict() for w in record.warnings],
        "missing_env": list(record.missing_env),
        "shadows": [{"source": s.source, "location": s.location} for s in record.shadows],
        "memory_providers": list(record.memory_providers),
        "memory_provider": dict(record.provider_status) if record.provider_status else None,
        "providers": [dict(p) for p in record.providers],
        "line": plugin_line(record).strip(),
    }


def plugins_payload(records: Iterable[PluginRecord]) -> list[dict[str, Any]]:
    """Every plugin as plain data, in load order."""
    return [plugin_dict(r) for r in records]
