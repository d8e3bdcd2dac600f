"""The ``process`` tool (toolset ``terminal``): the model's hand on its session's background
processes (`hermesd.tools.processes`), with the reference's actions and result fields.

``list`` the session's processes; ``poll`` one (status and the end of its output); ``log`` its
output by lines (default the last 200); ``wait`` until it exits or ``timeout`` seconds pass
(default 180, at most `MAX_WAIT`); ``kill`` it; ``write`` to its stdin, ``submit`` a line, or
``close`` its stdin (on a terminal: type end-of-file). The tool argument ``session_id`` is the
reference's name for the process id (``proc_…``). A process of another session is
``not_found``, as is an unknown id. Output is shown without terminal escape sequences. A
``wait`` or ``kill`` that returns a finished process's output, or a ``log`` that reaches its
end, counts as reading it: its ``notify_on_complete`` notice is then not sent.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from hermesd.tools.process_notices import plain
from hermesd.tools.processes import PREVIEW, TAIL, Background, ProcessTable

ACTIONS = ("list", "poll", "log", "wait", "kill", "write", "submit", "close")
DEFAULT_WAIT = 180
MAX_WAIT = 600
MAX_STDIN = 65_536  # characters of one write
DEFAULT_LINES = 200

SCHEMA: dict[str, Any] = {
    "name": "process",
    "description": (
        "Manage the background processes started with terminal(background=true) in this "
        "session. Actions: 'list' (all of them), 'poll' (status and the latest output), 'log' "
        "(output by lines, the last 200 by default), 'wait' (until it exits or the timeout), "
        "'kill', 'write' (raw text to stdin, no newline), 'submit' (text and Enter), 'close' "
        "(close stdin: end of input)."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS), "description": "What to do"},
            "session_id": {
                "type": "string",
                "description": "The process id (proc_…) terminal returned; every action but "
                "'list' needs it.",
            },
            "data": {"type": "string", "description": "Text for 'write' and 'submit'"},
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "description": f"Seconds 'wait' blocks at most (default {DEFAULT_WAIT}, "
                f"at most {MAX_WAIT}); it returns the output so far on timeout.",
            },
            "offset": {"type": "integer", "description": "First line for 'log' (0-based)"},
            "limit": {"type": "integer", "minimum": 1, "description": "Lines for 'log'"},
        },
        "required": ["action"],
    },
}


def not_found(process_id: str) -> dict[str, Any]:
    """The reference's answer for an id the session does not have."""
    return {"status": "not_found", "error": f"No process with ID {process_id}"}


def summary(item: Background) -> dict[str, Any]:
    """One process as ``list`` shows it."""
    out: dict[str, Any] = {
        "session_id": item.id,
        "command": item.command[:200],
        "cwd": item.cwd,
        "pid": item.pid,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(item.started_at)),
        "uptime_seconds": int(time.time() - item.started_at),
        "status": item.status,
        "output_preview": plain(item.output[-200:]),
    }
    if item.watch is not None and not item.watch.disabled:
        out.update(watch_patterns=list(item.watch.patterns), watch_hit=item.watch.hits > 0)
    if item.notify_on_complete:
        out["notify_on_complete"] = True
    if item.pty:
        out["pty"] = True
    if item.exited:
        out["exit_code"] = item.exit_code
    if item.gone:
        out["detached"] = True
    return out


class ProcessTool:
    """The handler: one action on the calling session's processes."""

    def __init__(self, table: ProcessTable) -> None:
        self.table = table

    async def run(self, args: dict[str, Any], session_id: str = "", **_: Any) -> str:
        """One ``process`` call for ``session_id`` (the daemon's session)."""
        return json.dumps(await self.act(args, session_id), ensure_ascii=False)

    async def act(self, args: dict[str, Any], sid: str) -> dict[str, Any]:
        action = args.get("action")
        if action not in ACTIONS:
            return {"error": f"Unknown process action: {action!r}. Use one of {', '.join(ACTIONS)}"}
        if action == "list":
            return {"processes": [summary(p) for p in self.table.of_session(sid)]}
        raw_id = args.get("session_id")
        if raw_id is None or raw_id == "":
            return {"error": f"session_id (the process id) is required for {action}"}
        process_id = str(raw_id)
        item = self.table.get(sid, process_id)
        if item is None:
            return not_found(process_id)
        try:
            if action in ("write", "submit", "close"):
                return await self.stdin(item, action, args)
            if action == "log":
                return log_lines(item, _int(args, "offset", 0), _int(args, "limit", DEFAULT_LINES))
            if action == "wait":
                return await self.wait(item, args.get("timeout"))
        except ValueError as exc:
            return {"error": str(exc)}
        if action == "kill":
            return await self.kill(item)
        return self.poll(item)

    def poll(self, item: Background) -> dict[str, Any]:
        out: dict[str, Any] = {
            "session_id": item.id,
            "command": item.command,
            "status": item.status,
            "pid": item.pid,
            "uptime_seconds": int(time.time() - item.started_at),
            "output_preview": plain(item.output[-PREVIEW:]),
        }
        if item.exited:
            out.update(item.ending())
        return out

    async def wait(self, item: Background, raw: Any) -> dict[str, Any]:
        timeout = DEFAULT_WAIT if raw is None else _positive(raw, "timeout")
        note = None
        if timeout > MAX_WAIT:
            note = f"Requested wait of {timeout}s was clamped to {MAX_WAIT}s"
            timeout = MAX_WAIT
        try:
            await asyncio.wait_for(item.done.wait(), timeout)
        except TimeoutError:
            out = {"status": "timeout", "command": item.command}
            out["output"] = plain(item.output[-PREVIEW:])
            out["timeout_note"] = note or f"Waited {timeout}s, process still running"
            return out
        item.consumed = True
        done: dict[str, Any] = {"status": item.status, "command": item.command}  # or gone
        done.update(item.ending(), output=plain(item.output[-TAIL:]))
        if note:
            done["timeout_note"] = note
        return done

    async def kill(self, item: Background) -> dict[str, Any]:
        item.consumed = True  # the result carries the output
        if item.exited:
            out: dict[str, Any] = {"status": "already_exited", "command": item.command}
            out.update(item.ending(), output=plain(item.output[-TAIL:]))
            return out
        await self.table.kill(item, "process.kill")
        return {
            "status": "killed",
            "session_id": item.id,
            "completion_reason": item.completion_reason,
            "termination_source": item.termination_source,
            "output": plain(item.output[-TAIL:]),
        }

    async def stdin(self, item: Background, action: str, args: dict[str, Any]) -> dict[str, Any]:
        if item.exited:
            return {"status": "already_exited", "error": "Process has already finished"}
        if action == "close":
            try:
                done = await self.table.close_stdin(item)
            except TimeoutError:
                return {"status": "error", "error": "the process is not reading its input"}
            except OSError as exc:
                return {"status": "error", "error": str(exc)}
            return {"status": "ok", "message": done}
        data = args.get("data", "")
        if not isinstance(data, str):
            raise ValueError("data must be a string")
        if len(data) > MAX_STDIN:
            raise ValueError(f"data is {len(data)} characters; one write takes {MAX_STDIN}")
        try:
            written = await self.table.write(item, data + ("\n" if action == "submit" else ""))
        except TimeoutError:
            return {"status": "error", "error": "the process is not reading its input"}
        except OSError as exc:
            return {"status": "error", "error": f"stdin: {exc}"}
        return {"status": "ok", "bytes_written": written}


def log_lines(item: Background, offset: int, limit: int) -> dict[str, Any]:
    """Output lines: the last ``limit`` when ``offset`` is 0, else ``limit`` from ``offset``."""
    lines = plain(item.output).splitlines()
    chosen = lines[-limit:] if offset == 0 else lines[offset : offset + limit]
    if item.exited and (offset == 0 or offset + limit >= len(lines)):
        item.consumed = True  # the end of a finished process's output was read
    return {
        "session_id": item.id,
        "command": item.command,
        "status": item.status,
        "output": "\n".join(chosen),
        "total_lines": len(lines),
        "showing": f"{len(chosen)} lines",
    }


def _int(args: dict[str, Any], key: str, default: int) -> int:
    value = args.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be a whole number, 0 or more")
    if key == "limit" and value == 0:
        raise ValueError("limit must be 1 or more")
    return value


def _positive(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
        raise ValueError(f"{key} must be a number of seconds, 1 or more")
    return int(value)
