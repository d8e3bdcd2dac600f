"""What the memory provider is told of a built-in memory write (``on_memory_write``).

A write the built-in memory made (a model's ``memory`` tool call, a person's ``hermesctl
memory``; `hermesd.memory.builtin.MemoryWrite`) becomes one payload per add, replace or remove
it made, with the reference's metadata (empty values left out, as its metadata builder does).
`hermesd.memory.providers.MemoryProviders.memory_written` journals and delivers them. Pure:
no I/O, no provider calls.
"""

from __future__ import annotations

from typing import Any

from hermesd.memory.builtin import MemoryWrite

MIRRORED_ACTIONS = ("add", "replace", "remove")


def mirrored_writes(
    write: MemoryWrite, *, parent_session_id: str, platform: str
) -> list[dict[str, Any]]:
    """The ``on_memory_write`` payloads of ``write`` (none when it changed nothing mirrored);
    ``parent_session_id`` and ``platform`` are those of the session's provider instance."""
    payload = write.payload
    # a batch, or hermesctl memory edit (``set``: the removes and adds the rewrite made)
    batch = payload.get("action") in ("batch", "set")
    ops = payload.get("operations") if batch else [payload]
    target = str(payload.get("target") or "memory")
    writes = []
    for op in ops if isinstance(ops, list) else []:
        if not isinstance(op, dict) or op.get("action") not in MIRRORED_ACTIONS:
            continue
        metadata = {
            "write_origin": "user" if write.origin == "client" else "assistant_tool",
            "execution_context": "foreground",
            "session_id": write.session_id,
            "parent_session_id": parent_session_id,
            "platform": platform,
            "tool_name": "memory",
            "task_id": write.task_id,
            "tool_call_id": write.tool_call_id,
            "old_text": str(op.get("old_text") or ""),
        }
        writes.append(
            {
                "action": str(op["action"]),
                "target": target,
                "content": str(op.get("content") or ""),
                "metadata": {k: v for k, v in metadata.items() if v},
            }
        )
    return writes
