"""The memory writes: add, replace, remove, an all-or-nothing batch; the reference's results.

Each write runs under the target's lock (`MemoryFiles.locked`) and re-reads the file first, so
writes from other sessions or processes are never lost. Results are the dicts the ``memory``
tool returns as JSON, key for key and sentence for sentence as hermes-agent 0.19 words them
(docs/memory.md lists them); an `Edit` also says whether the file changed. Blocking: call from a
worker thread.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from hermesd.memory.files import ENTRY_DELIMITER, MemoryFiles, joined_length

NOTE = "Write saved. This update is complete — do not repeat it."


@dataclass
class Edit:
    """The result for the model or the person, and whether the file was rewritten."""

    result: dict[str, Any]
    written: bool = False
    #: a failed attempt to make room or find an entry: the ones the reference counts per turn
    consolidation_failure: bool = False


def usage(files: MemoryFiles, target: str, entries: list[str]) -> str:
    """``"cur/limit"`` with thousands separators."""
    return f"{joined_length(entries):,}/{files.limits.of(target):,}"


def percent(current: int, limit: int) -> int:
    return min(100, int(current / limit * 100)) if limit > 0 else 0


def success(files: MemoryFiles, target: str, entries: list[str], message: str) -> dict[str, Any]:
    """The terminal success result (entries are not echoed, so the model does not redo it)."""
    current, limit = joined_length(entries), files.limits.of(target)
    return {
        "success": True,
        "done": True,
        "target": target,
        "usage": f"{percent(current, limit)}% — {current:,}/{limit:,} chars",
        "entry_count": len(entries),
        "message": message,
        "note": NOTE,
    }


def missing_old_text(files: MemoryFiles, target: str, action: str) -> dict[str, Any]:
    """A replace or remove without ``old_text``: the inventory and how to retry."""
    entries = files.entries(target)
    return {
        "success": False,
        "error": (
            f"'{action}' needs old_text -- a short unique substring of the entry "
            f"to {action}. None was provided. Reissue the {action} with old_text "
            f"set to part of one of the current_entries below."
        ),
        "current_entries": entries,
        "usage": usage(files, target, entries),
    }


def drift_error(files: MemoryFiles, target: str, backup: str) -> dict[str, Any]:
    name = files.path(target).name
    return {
        "success": False,
        "error": (
            f"Refusing to write {name}: file on disk has content that "
            f"wouldn't round-trip through the memory tool (likely added by "
            f"the patch tool, a shell append, a manual edit, or a "
            f"concurrent session). A snapshot was saved to {backup}. "
            f"Resolve the drift first — either rewrite the file as a clean "
            f"§-delimited list of entries, or move the extra content out — "
            f"then retry. This guard exists to prevent silent data loss "
            f"(issue #26045)."
        ),
        "drift_backup": backup,
        "remediation": (
            "Open the .bak file, integrate the missing entries into the "
            "memory tool one at a time via memory(action=add, content=...), "
            "then remove or rewrite the original file to a clean state."
        ),
    }


def _previews(entries: list[str], width: int = 80) -> list[str]:
    return [e[:width] + ("..." if len(e) > width else "") for e in entries]


def add(files: MemoryFiles, target: str, content: str) -> Edit:
    """Append an entry (no drift check: appending keeps whatever the file holds)."""
    content = content.strip()
    if not content:
        return Edit({"success": False, "error": "Content cannot be empty."})
    limit = files.limits.of(target)
    with files.locked(target):
        entries = files.entries(target)
        if content in entries:
            message = "Entry already exists (no duplicate added)."
            return Edit(success(files, target, entries, message))
        new_total = joined_length([*entries, content])
        if new_total > limit:
            current = joined_length(entries)
            return _failed(
                {
                    "success": False,
                    "error": (
                        f"Memory at {current:,}/{limit:,} chars. "
                        f"Adding this entry ({len(content)} chars) would exceed the limit. "
                        f"Consolidate now: use 'replace' to merge overlapping entries into "
                        f"shorter ones or 'remove' stale or less important entries (see "
                        f"current_entries below), then retry this add — all in this turn."
                    ),
                    "current_entries": entries,
                    "usage": f"{current:,}/{limit:,}",
                }
            )
        entries.append(content)
        files.write(target, entries)
    return Edit(success(files, target, entries, "Entry added."), written=True)


def _match(
    entries: list[str], old_text: str, verb: str
) -> tuple[int | None, dict[str, Any] | None]:
    """The index of the one entry containing ``old_text``, or the error result."""
    matches = [(i, e) for i, e in enumerate(entries) if old_text in e]
    if not matches:
        return None, {
            "success": False,
            "error": (
                f"No entry matched '{old_text}'. Check current_entries below and retry "
                f"with the exact text of the entry you want to {verb}."
            ),
            "current_entries": entries,
        }
    if len({e for _, e in matches}) > 1:
        return None, {
            "success": False,
            "error": f"Multiple entries matched '{old_text}'. Be more specific.",
            "matches": _previews([e for _, e in matches]),
        }
    return matches[0][0], None


def replace(files: MemoryFiles, target: str, old_text: str, content: str) -> Edit:
    """Replace the one entry containing ``old_text`` with ``content``."""
    old_text, content = old_text.strip(), content.strip()
    if not old_text:
        return Edit({"success": False, "error": "old_text cannot be empty."})
    if not content:
        return Edit(
            {
                "success": False,
                "error": "new_content cannot be empty. Use 'remove' to delete entries.",
            }
        )
    limit = files.limits.of(target)
    with files.locked(target):
        backup = files.drift_backup(target)
        if backup:
            return Edit(drift_error(files, target, backup))
        entries = files.entries(target)
        index, problem = _match(entries, old_text, "replace")
        if index is None:
            assert problem is not None
            return Edit(problem, consolidation_failure="current_entries" in problem)
        changed = [*entries]
        changed[index] = content
        new_total = joined_length(changed)
        if new_total > limit:
            return _failed(
                {
                    "success": False,
                    "error": (
                        f"Replacement would put memory at {new_total:,}/{limit:,} chars. "
                        f"Shorten the new content, or 'remove' other stale or less important "
                        f"entries to make room (see current_entries below), then retry — all "
                        f"in this turn."
                    ),
                    "current_entries": entries,
                    "usage": usage(files, target, entries),
                }
            )
        files.write(target, changed)
    return Edit(success(files, target, changed, "Entry replaced."), written=True)


def remove(files: MemoryFiles, target: str, old_text: str) -> Edit:
    """Remove the one entry containing ``old_text``."""
    old_text = old_text.strip()
    if not old_text:
        return Edit({"success": False, "error": "old_text cannot be empty."})
    with files.locked(target):
        backup = files.drift_backup(target)
        if backup:
            return Edit(drift_error(files, target, backup))
        entries = files.entries(target)
        index, problem = _match(entries, old_text, "remove")
        if index is None:
            assert problem is not None
            return Edit(problem, consolidation_failure="current_entries" in problem)
        entries.pop(index)
        files.write(target, entries)
    return Edit(success(files, target, entries, "Entry removed."), written=True)


def _failed(result: dict[str, Any]) -> Edit:
    return Edit(result, consolidation_failure=True)


def _batch_error(files: MemoryFiles, target: str, entries: list[str], message: str) -> Edit:
    return _failed(
        {
            "success": False,
            "error": message + " No operations were applied (batch is all-or-nothing).",
            "current_entries": entries,
            "usage": usage(files, target, entries),
        }
    )


def _text(op: dict[str, Any], key: str) -> str | None:
    """``op[key]`` stripped; None when it is there but not a string."""
    value = op.get(key)
    if value is None:
        return ""
    return value.strip() if isinstance(value, str) else None


def apply_batch(files: MemoryFiles, target: str, operations: list[Any]) -> Edit:
    """Apply every operation to a copy and write once, or write nothing.

    The limit is checked on the final result only, so one batch can free room and use it.
    """
    if not operations:
        return Edit({"success": False, "error": "operations list is empty."})
    limit = files.limits.of(target)
    with files.locked(target):
        backup = files.drift_backup(target)
        if backup:
            return Edit(drift_error(files, target, backup))
        entries = files.entries(target)
        working = [*entries]
        for i, op in enumerate(operations):
            act = op.get("action") if isinstance(op, dict) else None
            pos = f"Operation {i + 1} ({act or 'unknown'})"
            if act not in ("add", "replace", "remove"):
                return _batch_error(
                    files, target, entries, f"{pos}: unknown action. Use add, replace, or remove."
                )
            assert isinstance(op, dict)
            content, old_text = _text(op, "content"), _text(op, "old_text")
            if content is None or old_text is None:
                wrong = "content" if content is None else "old_text"
                return _batch_error(files, target, entries, f"{pos}: {wrong} must be a string.")
            if act == "add":
                if not content:
                    return _batch_error(files, target, entries, f"{pos}: content is required.")
                if content not in working:  # a repeat is skipped, not an error
                    working.append(content)
                continue
            if not old_text:
                return _batch_error(files, target, entries, f"{pos}: old_text is required.")
            if act == "replace" and not content:
                return _batch_error(
                    files,
                    target,
                    entries,
                    f"{pos}: content is required (use action='remove' to delete).",
                )
            found = [j for j, e in enumerate(working) if old_text in e]
            if not found:
                return _batch_error(
                    files, target, entries, f"{pos}: no entry matched '{old_text}'."
                )
            if len({working[j] for j in found}) > 1:
                return _batch_error(
                    files,
                    target,
                    entries,
                    f"{pos}: '{old_text}' matched multiple distinct entries -- be more specific.",
                )
            if act == "replace":
                working[found[0]] = content
            else:
                working.pop(found[0])
        new_total = len(ENTRY_DELIMITER.join(working)) if working else 0
        if new_total > limit:
            return _failed(
                {
                    "success": False,
                    "error": (
                        f"After applying all {len(operations)} operations, memory would be at "
                        f"{new_total:,}/{limit:,} chars -- over the limit. Remove or shorten more "
                        f"entries in the same batch (see current_entries below), then retry."
                    ),
                    "current_entries": entries,
                    "usage": usage(files, target, entries),
                }
            )
        files.write(target, working)
    return Edit(
        success(files, target, working, f"Applied {len(operations)} operation(s)."), written=True
    )


def digest(raw: str) -> str:
    """What `replace_all` compares to notice that the file changed under an editor."""
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def replace_all(
    files: MemoryFiles, target: str, entries: list[str], base: str | None = None
) -> Edit:
    """A person's edit of the whole file (``hermesctl memory edit``): the new entry list.

    ``base`` is the `digest` of the file the editor started from; when the file has changed
    since, nothing is written.
    """
    clean = [e for e in (x.strip() for x in entries) if e]
    clean = list(dict.fromkeys(clean))
    limit = files.limits.of(target)
    total = joined_length(clean)
    if total > limit:
        return Edit(
            {
                "success": False,
                "error": f"The edited {files.path(target).name} has {total:,} characters; "
                f"the limit is {limit:,}. Shorten it and save again.",
            }
        )
    with files.locked(target):
        if base is not None and digest(files.read_raw(target)) != base:
            return Edit(
                {
                    "success": False,
                    "error": f"{files.path(target).name} changed while you were editing it; "
                    "nothing was written. Edit it again.",
                }
            )
        files.write(target, clean)
    return Edit(success(files, target, clean, "File rewritten."), written=True)
