"""Built-in tools: read_file, write_file, search_files, session_search, and the terminal
(`hermesd.tools.terminal`), registered together.

They register through the same ``registry.register(...)`` call plugins use (owner
``"builtin"``). Each validates its arguments and returns a JSON string; a bad argument is an
``{"error": ...}`` result the model can read, never an exception. hermesd's own files under
``$HERMES_HOME`` (``config.yaml``, ``.env``, ``state.db*``) are refused outright, after
resolving symlinks and also when reached through a hard link; ``write_file`` also refuses the
plugin directory ``$HERMES_HOME/plugins`` (code the daemon would run). The terminal's check is only
best effort (a shell can name a file in many ways); dangerous-command approval is a separate
layer.
"""

from __future__ import annotations

import fnmatch
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from hermesd.tools.arguments import (
    BadArgs,
    TransformOutput,
    cap_middle,
    error,
    int_arg,
    str_arg,
)
from hermesd.tools.terminal import TERMINAL_SCHEMA, Terminal

READ_MAX_BYTES = 20 * 1024 * 1024
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
    ) -> Any: ...


class ConfigLike(Protocol):
    def get(self, dotted: str, default: Any = None) -> Any: ...


class SearchableStore(Protocol):
    def search(
        self, query: str, limit: int = 20, *, session_id: str | None = None
    ) -> list[Any]: ...


class PathGuard:
    """Resolves tool paths and refuses hermesd's own files."""

    def __init__(self, home: Path, base: Path) -> None:
        self.home = home.expanduser().resolve()
        self.base = base

    def _protected(self) -> list[Path]:
        names = [
            "config.yaml",
            ".env",
            "state.db",
            "state.db-wal",
            "state.db-shm",
            "state.db-journal",
        ]
        return [self.home / n for n in names]

    def resolve(self, raw: str, *, base: Path | None = None) -> Path:
        """The absolute, symlink-free path; raises ``BadArgs`` for a protected file."""
        if "\x00" in raw:
            raise BadArgs("path contains a NUL byte")
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = (base or self.base) / path
        resolved = path.resolve()
        if self.is_protected(resolved):
            raise BadArgs(
                f"Access denied: {raw} is hermesd's own "
                f"{resolved.name} (config, secrets and session database are "
                "off limits to tools)"
            )
        return resolved

    def resolve_for_write(self, raw: str) -> Path:
        """Like ``resolve``, and also refuses the plugin directory: a file written there is
        code the daemon runs at its next start or reload, with the daemon's secrets."""
        resolved = self.resolve(raw)
        plugins = self.home / "plugins"
        if resolved == plugins or resolved.is_relative_to(plugins):
            raise BadArgs(
                f"Access denied: {raw} is in hermesd's plugin directory "
                f"({plugins}); plugins are code the daemon runs, so tools may read "
                "them but not write them (install plugins with `hermesctl plugins "
                "install`)"
            )
        return resolved

    def is_protected(self, resolved: Path) -> bool:
        if resolved.parent == self.home and (
            resolved.name in ("config.yaml", ".env") or resolved.name.startswith("state.db")
        ):
            return True
        try:
            st = resolved.stat()
        except OSError:
            return False
        for other in self._protected():
            try:
                if os.path.samestat(st, other.stat()):
                    return True
            except OSError:
                continue
        return False

    def mentions_protected(self, command: str) -> str | None:
        """A protected file a shell command names literally, if any (best effort)."""
        for target in self._protected():
            spellings = {
                str(target),
                f"$HERMES_HOME/{target.name}",
                f"${{HERMES_HOME}}/{target.name}",
            }
            if self.home == (Path.home() / ".hermes").resolve():
                spellings.add(f"~/.hermes/{target.name}")
            if any(s in command for s in spellings):
                return target.name
        return "state.db" if "state.db" in command else None


# -- schemas (the tools.json self-check: input → output, every parameter described) -----------

READ_FILE_SCHEMA: dict[str, Any] = {
    "name": "read_file",
    "description": (
        "Read a text file and return a range of its lines as 'content', with 'start_line', "
        "'end_line', 'total_lines' and 'next_offset' (null at the end) to page through it."
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
    ) -> None:
        cwd = config.get("terminal.cwd")
        self.base = Path(cwd).expanduser() if cwd else Path.home()
        self.guard = PathGuard(home, self.base)
        self.store = store
        self.terminal = Terminal(
            self.guard,
            self.base,
            timeout=float(config.get("terminal.timeout", 60.0)),
            transform_output=transform_output,
        )

    def read_file(self, args: dict[str, Any], **_: Any) -> str:
        """A range of lines of a text file."""
        try:
            path = self.guard.resolve(str_arg(args, "path", required=True) or "")
            offset = int_arg(args, "offset", 1, 1, 10**9)
            limit = int_arg(args, "limit", 500, 1, 5000)
        except BadArgs as exc:
            return error(str(exc))
        try:
            if path.is_dir():
                return error(f"{path} is a directory; use search_files to list it")
            if path.stat().st_size > READ_MAX_BYTES:
                return error(f"{path} is larger than {READ_MAX_BYTES // 2**20} MiB")
            with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as fh:
                data = fh.read()  # O_NOFOLLOW: no symlink swapped in after the check
        except OSError as exc:
            return error(f"cannot read {path}: {exc.strerror or exc}")
        if b"\x00" in data[:8192]:
            return error(f"{path} looks like a binary file")
        lines = data.decode("utf-8", errors="replace").splitlines()
        chunk = lines[offset - 1 : offset - 1 + limit]
        content, truncated = cap_middle("\n".join(chunk), 100_000)
        end = offset - 1 + len(chunk)
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

    def write_file(self, args: dict[str, Any], **_: Any) -> str:
        """Write (or append) text, creating parents."""
        try:
            path = self.guard.resolve_for_write(str_arg(args, "path", required=True) or "")
            content = args.get("content")
            if not isinstance(content, str):
                raise BadArgs("'content' is required and must be a string")
            if len(content) > WRITE_MAX_CHARS:
                raise BadArgs(f"'content' is longer than {WRITE_MAX_CHARS} characters")
            mode = str_arg(args, "mode", default="overwrite")
            if mode not in ("overwrite", "append"):
                raise BadArgs("'mode' must be 'overwrite' or 'append'")
        except BadArgs as exc:
            return error(str(exc))
        created = not path.exists()
        data = content.encode()
        try:
            if path.is_dir():
                return error(f"{path} is a directory")
            path.parent.mkdir(parents=True, exist_ok=True)
            flags = (
                os.O_WRONLY
                | os.O_CREAT
                | os.O_NOFOLLOW
                | (os.O_APPEND if mode == "append" else os.O_TRUNC)
            )
            with os.fdopen(
                os.open(path, flags, 0o666), "ab" if mode == "append" else "wb"
            ) as fh:  # O_NOFOLLOW: no symlink swapped in after the check
                fh.write(data)
        except OSError as exc:
            return error(f"cannot write {path}: {exc.strerror or exc}")
        return json.dumps({"path": str(path), "bytes_written": len(data), "created": created})

    def search_files(self, args: dict[str, Any], **_: Any) -> str:
        """Files under a root by name glob and optional contained text."""
        try:
            root_raw = str_arg(args, "root")
            root = self.guard.resolve(root_raw) if root_raw else self.base.resolve()
            pattern = str_arg(args, "pattern", default="*") or "*"
            needle = str_arg(args, "contains")
            limit = int_arg(args, "max_results", 50, 1, 500)
            hidden = bool(args.get("include_hidden", False))
        except BadArgs as exc:
            return error(str(exc))
        if not root.is_dir():
            return error(f"root is not a directory: {root}")
        matches: list[dict[str, Any]] = []
        scanned, truncated = 0, False
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(
                d for d in dirnames if d not in _SKIP_DIRS and (hidden or not d.startswith("."))
            )
            for name in sorted(filenames):
                if (not hidden and name.startswith(".")) or not fnmatch.fnmatch(name, pattern):
                    continue
                scanned += 1
                path = Path(dirpath) / name
                if self.guard.is_protected(path.resolve()):
                    continue
                if needle is None:
                    matches.append({"path": str(path)})
                else:
                    matches.extend(_grep(path, needle, limit - len(matches)))
                if len(matches) >= limit or scanned >= SEARCH_MAX_FILES:
                    truncated = True
                    break
            if truncated:
                break
        return json.dumps({"root": str(root), "matches": matches[:limit], "truncated": truncated})

    def session_search(self, args: dict[str, Any], session_id: str | None = None, **_: Any) -> str:
        """Past messages matching a query, via the session store's FTS index."""
        try:
            query = str_arg(args, "query", required=True) or ""
            limit = int_arg(args, "limit", 10, 1, 50)
        except BadArgs as exc:
            return error(str(exc))
        if self.store is None:
            return error("session search is not available")
        hits = self.store.search(query, limit)
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


def _grep(path: Path, needle: str, room: int) -> list[dict[str, Any]]:
    try:
        if path.stat().st_size > SEARCH_MAX_FILE_BYTES:
            return []
        data = path.read_bytes()
    except OSError:
        return []
    if b"\x00" in data[:8192]:
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
) -> BuiltinFileTools:
    """Register the five built-in tools; ``transform_output`` is the
    ``transform_terminal_output`` hook point (kwargs command, output, returncode, task_id,
    env_type; a str result replaces the output)."""
    tools = BuiltinFileTools(
        home=home, store=store, config=config, transform_output=transform_output
    )
    entries: list[tuple[dict[str, Any], str, Callable[..., Any], bool, str]] = [
        (TERMINAL_SCHEMA, "terminal", tools.terminal.run, True, "💻"),
        (READ_FILE_SCHEMA, "file", tools.read_file, False, "📖"),
        (WRITE_FILE_SCHEMA, "file", tools.write_file, False, "✍️"),
        (SEARCH_FILES_SCHEMA, "file", tools.search_files, False, "🔎"),
        (SESSION_SEARCH_SCHEMA, "session_search", tools.session_search, False, "🗂️"),
    ]
    for schema, toolset, handler, is_async, emoji in entries:
        registry.register(
            name=schema["name"],
            toolset=toolset,
            schema=schema,
            handler=handler,
            is_async=is_async,
            description=schema["description"],
            emoji=emoji,
            owner="builtin",
        )
    return tools
