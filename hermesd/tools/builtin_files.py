"""Built-in tools: read_file, write_file, patch (`hermesd.tools.patch`), search_files,
session_search, and the terminal (`hermesd.tools.terminal`), registered together.

They register through the same ``registry.register(...)`` call plugins use (owner
``"builtin"``). Each validates its arguments and returns a JSON string; a bad argument is an
``{"error": ...}`` result the model can read, never an exception. The file tools work in the
session's workspace (`hermesd.tools.workspace`): relative paths start there and writes stay
there unless a person approves. What they refuse or ask about is `hermesd.tools.file_policy`;
how they open files so that no symlink or swapped directory redirects them is
`hermesd.tools.file_access`. ``write_file`` registers a ``prepare`` step, so the registry asks
for approval before the file is touched and the handler writes exactly the target that was
approved. The terminal's check of hermesd's own files is only best effort (a shell can name a
file in many ways); dangerous-command approval and the sandbox are separate layers.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from hermesd.caller import NO_ONE, current_caller
from hermesd.sandbox.confine import Sandbox
from hermesd.tools import file_access
from hermesd.tools.arguments import (
    BadArgs,
    TransformOutput,
    error,
    int_arg,
    str_arg,
)
from hermesd.tools.consent import Consent
from hermesd.tools.file_access import PathGuard
from hermesd.tools.patch import PATCH_SCHEMA, PatchTool
from hermesd.tools.terminal import TERMINAL_SCHEMA, Terminal
from hermesd.tools.workspace import resolve_workspace

log = logging.getLogger(__name__)

__all__ = ["BuiltinFileTools", "PathGuard", "register_builtin_file_tools"]

READ_MAX_BYTES = 20 * 1024 * 1024
READ_MAX_CHARS = 100_000  # one read_file page; the rest is reached with next_offset
READ_LINE_CHARS = 2000
WRITE_MAX_CHARS = 5 * 1024 * 1024
SEARCH_MAX_FILES = 20_000
SEARCH_MAX_FILE_BYTES = 2 * 1024 * 1024
_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".tox"}


class RegistryLike(Protocol):
    def register(
        self,
        name: str,
        toolset: str,
        schema: dict[str, Any],
        handler: Callable[..., Any],
        check_fn: Callable[[], Any] | None = None,
        requires_env: list[Any] | None = None,
        is_async: bool = False,
        description: str = "",
        emoji: str = "",
        override: bool = False,
        owner: str = "builtin",
        *,
        prepare: Callable[..., Consent] | None = None,
    ) -> Any: ...


class ConfigLike(Protocol):
    def get(self, dotted: str, default: Any = None) -> Any: ...


class MessageSearch(Protocol):
    def find(
        self,
        query: str,
        limit: int = 20,
        *,
        session_id: str | None = None,
        owner_uid: int | None = None,
    ) -> list[Any]: ...


class SessionLookup(Protocol):
    def get(self, session_id: str) -> Mapping[str, object]: ...


class SearchableStore(Protocol):
    """What these tools read of the session store (``store.search``, ``store.sessions``)."""

    @property
    def search(self) -> MessageSearch: ...

    @property
    def sessions(self) -> SessionLookup: ...


# -- schemas (the tools.json self-check: input → output, every parameter described) -----------

READ_FILE_SCHEMA: dict[str, Any] = {
    "name": "read_file",
    "description": (
        "Read a text file and return a range of its lines as 'content', each as "
        "'LINE_NUM|CONTENT', with 'start_line', 'end_line', 'total_lines' and 'next_offset' "
        "(null at the end) to page through it; a page stops at about 100,000 characters."
    ),
    "parameters": {
        "type": "object",
        "required": ["path"],
        "properties": {
            "path": {
                "type": "string",
                "description": "File path, absolute or relative to the working directory",
            },
            "offset": {
                "type": "integer",
                "minimum": 1,
                "default": 1,
                "description": "First line to return, counting from 1",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 5000,
                "default": 500,
                "description": "Most lines to return",
            },
        },
    },
}

WRITE_FILE_SCHEMA: dict[str, Any] = {
    "name": "write_file",
    "description": (
        "Write text to a file, creating missing parent directories; returns the resolved "
        "'path', 'bytes_written' and whether the file was 'created'."
    ),
    "parameters": {
        "type": "object",
        "required": ["path", "content"],
        "properties": {
            "path": {
                "type": "string",
                "description": "File path, absolute or relative to the working directory",
            },
            "content": {"type": "string", "description": "The complete text to write"},
            "mode": {
                "type": "string",
                "enum": ["overwrite", "append"],
                "default": "overwrite",
                "description": "Replace the file, or add to its end",
            },
        },
    },
}

SEARCH_FILES_SCHEMA: dict[str, Any] = {
    "name": "search_files",
    "description": (
        "Find files under a directory by file-name glob and, optionally, by text they "
        "contain; returns 'matches' as {path, line, text} (line and text only for content "
        "matches) and 'truncated' when the limit was reached."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "root": {
                "type": "string",
                "description": "Directory to search (default: the working directory)",
            },
            "pattern": {
                "type": "string",
                "default": "*",
                "description": "Glob matched against file names, e.g. '*.py'",
            },
            "contains": {
                "type": "string",
                "description": "Case-insensitive text a matching line must contain",
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": 500,
                "default": 50,
                "description": "Most matches to return",
            },
            "include_hidden": {
                "type": "boolean",
                "default": False,
                "description": "Also search dot-files and dot-directories",
            },
        },
    },
}

SESSION_SEARCH_SCHEMA: dict[str, Any] = {
    "name": "session_search",
    "description": (
        "Full-text search over past conversations; returns 'results' with session id, "
        "session title, role, a snippet with the matching words in «» and when it was said. "
        "Use to recall what was discussed or decided before."
    ),
    "parameters": {
        "type": "object",
        "required": ["query"],
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "description": "Words to find; all must appear (a trailing * matches a prefix)",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 10,
                "description": "Most results to return",
            },
        },
    },
}


class BuiltinFileTools:
    """The handlers, bound to one HERMES_HOME, store and configuration."""

    def __init__(
        self,
        *,
        home: Path,
        store: SearchableStore | None,
        config: ConfigLike,
        transform_output: TransformOutput | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.home = home
        self.configured_cwd: str | None = config.get("terminal.cwd")
        cwd = self.configured_cwd
        self.base = Path(cwd).expanduser() if cwd else Path.home()
        sandbox = sandbox or Sandbox.for_home(home, config)
        # one read policy: the file tools refuse what the sandbox hides (its settings reload)
        self.guard = PathGuard(home, self.base, settings=lambda: sandbox.settings)
        self.store = store
        self.sessions: SessionLookup | None = store.sessions if store is not None else None
        self.terminal = Terminal(
            self.guard,
            self.base,
            timeout=float(config.get("terminal.timeout", 60.0)),
            transform_output=transform_output,
            sandbox=sandbox,
            workspace=self.workspace,
        )
        self.patch = PatchTool(self.guard, self.workspace)

    def workspace(self, session_id: str | None) -> Path:
        """The session's workspace (`hermesd.tools.workspace`)."""
        session_cwd = None
        if session_id and self.sessions is not None:
            try:
                cwd = self.sessions.get(session_id).get("cwd")
                session_cwd = cwd if isinstance(cwd, str) else None
            except Exception:  # no such session (a bare tools.call), or the store is closing
                session_cwd = None
        return resolve_workspace(self.home, self.configured_cwd, session_cwd)

    def read_file(self, args: dict[str, Any], session_id: str | None = None, **_: Any) -> str:
        """A range of lines of a text file."""
        try:
            raw = str_arg(args, "path", required=True) or ""
            offset = int_arg(args, "offset", 1, 1, 10**9)
            limit = int_arg(args, "limit", 500, 1, 5000)
            path, data = file_access.read_bytes(
                self.guard, raw, self.workspace(session_id), READ_MAX_BYTES
            )
        except BadArgs as exc:
            return error(str(exc))
        if b"\x00" in data[:8192]:
            return error(f"{path} looks like a binary file")
        lines = data.decode("utf-8", errors="replace").splitlines()
        content, end, truncated = _numbered(lines, offset, limit)
        return json.dumps(
            {
                "path": str(path),
                "content": content,
                "start_line": offset,
                "end_line": end,
                "total_lines": len(lines),
                "truncated": truncated,
                "next_offset": end + 1 if end < len(lines) else None,
            }
        )

    def prepare_write(self, args: dict[str, Any], session_id: str | None = None) -> Consent:
        """The registry's ``prepare`` step for write_file: refuse, ask, or a plan to carry out."""
        try:
            raw = str_arg(args, "path", required=True) or ""
            _write_content(args)
        except BadArgs as exc:
            return Consent(refuse=str(exc))
        return file_access.plan_write(self.guard, raw, self.workspace(session_id))

    def write_file(
        self,
        args: dict[str, Any],
        session_id: str | None = None,
        plan: file_access.WritePlan | None = None,
        **_: Any,
    ) -> str:
        """Write (or append) text, creating parents, at the target ``plan`` decided on."""
        try:
            data, append = _write_content(args)
            if plan is None:  # called without the registry's prepare step: decide here
                consent = self.prepare_write(args, session_id)
                if consent.refuse is not None:
                    raise BadArgs(consent.refuse)
                if consent.ask is not None:
                    raise BadArgs(f"BLOCKED: {consent.ask} needs a person's approval")
                plan = consent.plan
            assert isinstance(plan, file_access.WritePlan)
            created = file_access.write(self.guard, plan, data, append)
        except BadArgs as exc:
            return error(str(exc))
        return json.dumps({"path": str(plan.path), "bytes_written": len(data), "created": created})

    def search_files(self, args: dict[str, Any], session_id: str | None = None, **_: Any) -> str:
        """Files under a root by name glob and optional contained text."""
        try:
            root_raw = str_arg(args, "root")
            pattern = str_arg(args, "pattern", default="*") or "*"
            needle = str_arg(args, "contains")
            limit = int_arg(args, "max_results", 50, 1, 500)
            hidden = bool(args.get("include_hidden", False))
            root, root_fd = file_access.open_search_root(
                self.guard, root_raw, self.workspace(session_id)
            )
        except BadArgs as exc:
            return error(str(exc))
        matches: list[dict[str, Any]] = []
        scanned, truncated = 0, False
        try:
            for here, dir_fd, names in file_access.walk(
                self.guard, root, root_fd, _SKIP_DIRS, hidden
            ):
                for name in names:
                    if not fnmatch.fnmatch(name, pattern):
                        continue
                    scanned += 1
                    path = here / name
                    if needle is None:
                        matches.append({"path": str(path)})
                    else:
                        data = file_access.read_beneath(
                            self.guard, dir_fd, name, SEARCH_MAX_FILE_BYTES
                        )
                        matches.extend(_grep(path, data, needle, limit - len(matches)))
                    if len(matches) >= limit or scanned >= SEARCH_MAX_FILES:
                        truncated = True
                        break
                if truncated:
                    break
        finally:
            os.close(root_fd)
        return json.dumps({"root": str(root), "matches": matches[:limit], "truncated": truncated})

    def search_scope(self, session_id: str | None) -> int | None:
        """Whose sessions ``session_search`` reads: the calling peer's own when it is not the
        daemon's owner, else those of the session's owner when that is another user; None: all.
        When the session's owner cannot be looked up, only the sessions of no one (fail closed).
        """
        caller = current_caller.get()  # the turn's or tools.call's (a value, set at the edge)
        if caller is not None and caller.scope_uid is not None:
            return caller.scope_uid
        if session_id and self.sessions is not None:
            try:
                owner = self.sessions.get(session_id).get("owner_uid")
            except Exception:  # no such session, or the store is closing: nobody's
                log.info("session_search: owner of %s unknown; searching nothing", session_id)
                return NO_ONE
            if isinstance(owner, int) and owner not in (os.geteuid(), 0):
                return owner
        return None

    def session_search(self, args: dict[str, Any], session_id: str | None = None, **_: Any) -> str:
        """Past messages matching a query, via the session store's FTS index."""
        try:
            query = str_arg(args, "query", required=True) or ""
            limit = int_arg(args, "limit", 10, 1, 50)
        except BadArgs as exc:
            return error(str(exc))
        if self.store is None:
            return error("session search is not available")
        hits = self.store.search.find(query, limit, owner_uid=self.search_scope(session_id))
        return json.dumps(
            {
                "query": query,
                "results": [
                    {
                        "session_id": h["session_id"],
                        "session_title": h["session_title"],
                        "role": h["role"],
                        "snippet": h["snippet"],
                        "when": time.strftime("%Y-%m-%d %H:%M", time.localtime(h["created_at"])),
                    }
                    for h in hits
                ],
            },
            ensure_ascii=False,
        )


def _numbered(lines: list[str], offset: int, limit: int) -> tuple[str, int, bool]:
    """Lines from ``offset`` as ``N|text`` (the reference's gutter), stopping on a line boundary
    at ``READ_MAX_CHARS``; the text, the last line number given, and whether it stopped early."""
    out: list[str] = []
    size, end = 0, offset - 1
    for number in range(offset, min(len(lines), offset - 1 + limit) + 1):
        line = lines[number - 1]
        if len(line) > READ_LINE_CHARS:  # one minified line must not eat the whole page
            line = line[:READ_LINE_CHARS] + "... [truncated]"
        text = f"{number}|{line}"
        if out and size + len(text) + 1 > READ_MAX_CHARS:
            return "\n".join(out), end, True
        out.append(text)
        size += len(text) + 1
        end = number
    return "\n".join(out), end, False


def _write_content(args: dict[str, Any]) -> tuple[bytes, bool]:
    """The bytes to write and whether to append, from write_file's arguments."""
    content = args.get("content")
    if not isinstance(content, str):
        raise BadArgs("'content' is required and must be a string")
    if len(content) > WRITE_MAX_CHARS:
        raise BadArgs(f"'content' is longer than {WRITE_MAX_CHARS} characters")
    mode = str_arg(args, "mode", default="overwrite")
    if mode not in ("overwrite", "append"):
        raise BadArgs("'mode' must be 'overwrite' or 'append'")
    return content.encode(), mode == "append"


def _grep(path: Path, data: bytes | None, needle: str, room: int) -> list[dict[str, Any]]:
    if data is None or b"\x00" in data[:8192]:
        return []
    lowered = needle.lower()
    out = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if lowered in line.lower():
            out.append({"path": str(path), "line": number, "text": line.strip()[:300]})
            if len(out) >= room:
                break
    return out


def register_builtin_file_tools(
    registry: RegistryLike,
    *,
    home: Path,
    store: SearchableStore | None,
    config: ConfigLike,
    transform_output: TransformOutput | None = None,
    sandbox: Sandbox | None = None,
) -> BuiltinFileTools:
    """Register the six built-in tools; ``transform_output`` is the
    ``transform_terminal_output`` hook point (kwargs command, output, returncode, task_id,
    env_type; a str result replaces the output)."""
    tools = BuiltinFileTools(
        home=home, store=store, config=config, transform_output=transform_output, sandbox=sandbox
    )
    Prepare = Callable[..., Consent] | None
    entries: list[tuple[dict[str, Any], str, Callable[..., Any], bool, str, Prepare]] = [
        (TERMINAL_SCHEMA, "terminal", tools.terminal.run, True, "💻", None),
        (READ_FILE_SCHEMA, "file", tools.read_file, False, "📖", None),
        (WRITE_FILE_SCHEMA, "file", tools.write_file, False, "✍️", tools.prepare_write),
        (PATCH_SCHEMA, "file", tools.patch.run, False, "🩹", tools.patch.prepare),
        (SEARCH_FILES_SCHEMA, "file", tools.search_files, False, "🔎", None),
        (SESSION_SEARCH_SCHEMA, "session_search", tools.session_search, False, "🗂️", None),
    ]
    for schema, toolset, handler, is_async, emoji, prepare in entries:
        registry.register(
            name=schema["name"],
            toolset=toolset,
            schema=schema,
            handler=handler,
            is_async=is_async,
            description=schema["description"],
            emoji=emoji,
            owner="builtin",
            prepare=prepare,
        )
    return tools
