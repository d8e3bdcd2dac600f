"""Writing the two files people also edit by hand: ``config.yaml``'s plugin lists and ``.env``.

`set_plugin_lists` changes only ``plugins.enabled`` / ``plugins.disabled``. PyYAML cannot keep
comments when it re-dumps a file (and ruamel.yaml is not a dependency), so the edit is
line-based: it finds the top-level ``plugins:`` block, replaces just the ``enabled:`` /
``disabled:`` entries (with their list items) by one flow-style line each, and leaves every
other line — comments included — byte for byte. The result is parsed again and compared with
the intended data; if the file is written in a shape the line edit cannot handle (a flow
mapping ``plugins: {…}``, anchors, …) the whole file is re-dumped with PyYAML instead, which
loses its comments, and the caller is told so.

`set_env_values` rewrites ``.env`` through python-dotenv's own parser: other lines stay as they
were, the named variables are replaced or appended double-quoted with escapes, so values with
newlines, quotes and backslashes round-trip through ``dotenv_values``. Names that change how
programs are loaded or run (``LD_*``, ``PYTHON*``, ``PATH``, ``HERMES_*``, … —
`hermesd.plugins.manifest.refused_env_name`) are refused: the values reach ``os.environ``. The
file is written atomically with mode 0600. Values are never logged.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from hermesd.plugins.manifest import refused_env_name

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOP_KEY = re.compile(r"^(?P<key>[^\s#][^:]*):(?P<rest>.*)$")


class EditError(ValueError):
    """The file cannot be edited as asked; the message says why."""


def _atomic_write(path: Path, text: str, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- config.yaml -----------------------------------------------------------------------------


def _flow(values: list[str]) -> str:
    text: str = yaml.safe_dump(list(values), default_flow_style=True, width=10_000)
    return text.strip()


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _edit_lines(lines: list[str], lists: Mapping[str, list[str] | None]) -> list[str]:
    """Replace the child keys of the top-level ``plugins:`` block; None removes a key."""
    start = next(
        (i for i, line in enumerate(lines) if re.match(r"^plugins:\s*(#.*)?$", line)), None
    )
    if start is None:
        if any(re.match(r"^plugins\s*:", line) for line in lines):
            raise EditError("plugins: is not a block mapping")
        block = [f"  {k}: {_flow(v)}" for k, v in lists.items() if v is not None]
        tail = [] if not lines or lines[-1].strip() == "" else [""]
        return lines + tail + (["plugins:", *block] if block else [])
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith((" ", "#"))):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1  # trailing blank lines belong to what follows
    body = lines[start + 1 : end]
    child = (
        min(
            (_indent(ln) for ln in body if ln.strip() and not ln.lstrip().startswith("#")),
            default=2,
        )
        or 2
    )
    for key, values in lists.items():
        at = next(
            (
                i
                for i, ln in enumerate(body)
                if _indent(ln) == child and re.match(rf"^{re.escape(key)}\s*:", ln.strip())
            ),
            None,
        )
        new = None if values is None else f"{' ' * child}{key}: {_flow(values)}"
        if at is None:
            if new is not None:
                body.insert(0, new)
            continue
        stop = at + 1
        while stop < len(body) and (
            not body[stop].strip()
            or _indent(body[stop]) > child
            or (_indent(body[stop]) == child and body[stop].strip().startswith("- "))
        ):
            stop += 1  # the key's list items (block style, indented or not)
        while stop > at + 1 and not body[stop - 1].strip():
            stop -= 1  # trailing blank lines stay
        body[at:stop] = [] if new is None else [new]
    return lines[: start + 1] + body + lines[end:]


def set_plugin_lists(path: Path, enabled: list[str] | bool | None, disabled: list[str]) -> bool:
    """Write ``plugins.enabled`` (None: remove the key; False: leave it) and
    ``plugins.disabled``; True when comments were kept, False when the file was re-dumped."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    data = yaml.safe_load(text) if text.strip() else {}
    if not isinstance(data, dict):
        raise EditError(f"{path} must be a mapping at the top level")
    wanted = dict(data)
    section = dict(wanted.get("plugins") or {})
    lists: dict[str, list[str] | None] = {}
    if enabled is None:
        lists["enabled"] = None
        section.pop("enabled", None)
    elif enabled is not False and not isinstance(enabled, bool):
        lists["enabled"] = list(enabled)
        section["enabled"] = list(enabled)
    lists["disabled"] = list(disabled) if disabled else None
    if disabled:
        section["disabled"] = list(disabled)
    else:
        section.pop("disabled", None)
    if section:
        wanted["plugins"] = section
    else:
        wanted.pop("plugins", None)
    kept = True
    try:
        lines = _edit_lines(text.splitlines(), lists)
        new_text = "\n".join(lines) + "\n"
        if (yaml.safe_load(new_text) or {}) != wanted:
            raise EditError("line edit did not produce the intended data")
    except (EditError, yaml.YAMLError):
        new_text, kept = yaml.safe_dump(wanted, sort_keys=False, allow_unicode=True), False
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    _atomic_write(path, new_text, mode)
    return kept


# --- .env ------------------------------------------------------------------------------------


def _quote(value: str) -> str:
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'


def check_env_value(name: str, value: Any) -> str | None:
    """Why ``name=value`` cannot be stored in .env, or None."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        return f"'{name}' is not a valid environment variable name"
    refused = refused_env_name(name)  # .env values reach os.environ and every child process
    if refused:
        return refused
    if not isinstance(value, str):
        return f"the value of {name} must be a string"
    if "\0" in value:
        return f"the value of {name} contains a NUL character"
    if "${" in value:
        return f"the value of {name} contains '${{', which python-dotenv would expand"
    return None


def set_env_values(path: Path, values: Mapping[str, str]) -> None:
    """Set variables in ``.env`` (mode 0600), keeping every other line as it was."""
    from dotenv.parser import parse_stream

    for name, value in values.items():
        problem = check_env_value(name, value)
        if problem:
            raise EditError(problem)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    out: list[str] = []
    done: set[str] = set()
    for binding in parse_stream(io.StringIO(text)):
        original = binding.original.string
        if binding.key is None:  # a comment or blank line: kept as it was
            out.append(original)
            continue
        if binding.key in values and binding.key not in done:
            line = f"{binding.key}={_quote(values[binding.key])}"
            out.append(line + ("\n" if original.endswith("\n") else ""))
            done.add(binding.key)
        elif binding.key in values:
            continue  # a later duplicate of a key we set: drop it, ours wins
        else:
            out.append(original)
    new = "".join(out)
    if new and not new.endswith("\n"):
        new += "\n"
    for name, value in values.items():
        if name not in done:
            new += f"{name}={_quote(value)}\n"
    _atomic_write(path, new, 0o600)
