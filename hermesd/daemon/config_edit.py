"""Writing the two files people also edit by hand: ``config.yaml`` and ``.env``, keeping them as
they were written.

config.yaml is edited with ruamel.yaml's round-trip mode: the file is loaded into ruamel's
commented mapping, one value is changed (`set_value`, `set_plugin_lists`) and the file is
written back with its comments, key order, quoting and blank lines as they were. The result is
checked by the caller against the daemon's schema before it is written (`edited_config_text`
returns the text without writing it).

`set_env_values` rewrites ``.env`` through python-dotenv's own parser: other lines stay as they
were, the named variables are replaced or appended double-quoted with escapes, so values with
newlines, quotes and backslashes round-trip through ``dotenv_values``; `unset_env_values` drops
the lines of the named variables. Names that change how programs are loaded or run (``LD_*``,
``PYTHON*``, ``PATH``, ``HERMES_*``, … — `hermesd.plugins.manifest.refused_env_name`) are
refused: the values reach ``os.environ``. Both files are written atomically, .env with mode
0600. Values are never logged.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hermesd.plugins.manifest import refused_env_name

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


def _round_trip() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a long line the person wrote on one
    return yaml


def _load_document(text: str) -> Any:
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import YAMLError

    try:
        doc = _round_trip().load(text) if text.strip() else None
    except YAMLError as exc:
        raise EditError(f"config.yaml is not valid YAML: {exc}") from None
    if doc is None:
        doc = CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise EditError("config.yaml must be a mapping at the top level")
    return doc


def _dump(doc: Any) -> str:
    out = io.StringIO()
    _round_trip().dump(doc, out)
    return out.getvalue()


def _flow_list(values: list[Any]) -> Any:
    from ruamel.yaml.comments import CommentedSeq

    seq = CommentedSeq(values)
    seq.fa.set_flow_style()
    return seq


def _section(doc: Any, parts: list[str]) -> Any:
    """The mapping at ``parts`` (created where missing or empty)."""
    from ruamel.yaml.comments import CommentedMap

    node = doc
    for part in parts:
        child = node.get(part)
        if child is None:
            child = CommentedMap()
            node[part] = child
        elif not isinstance(child, CommentedMap):
            raise EditError(f"'{part}' in config.yaml is not a mapping")
        node = child
    return node


def edited_config_text(text: str, dotted: str, value: Any) -> str:
    """``text`` with the setting ``dotted`` (``a.b.c``) set to ``value`` (None removes it),
    comments and layout kept."""
    doc = _load_document(text)
    *parents, leaf = dotted.split(".")
    section = _section(doc, parents)
    if value is None:
        section.pop(leaf, None)
    else:
        section[leaf] = _flow_list(value) if isinstance(value, list) else _scalar(value)
    return _dump(doc)


def _scalar(value: Any) -> Any:
    """``value``, quoted when it is text that hermesd's YAML reader would take for something
    else (YAML 1.1 reads a bare ``off``, ``no``, ``on`` as booleans, ``1e3`` as a number)."""
    import yaml
    from ruamel.yaml.scalarstring import SingleQuotedScalarString

    if not isinstance(value, str):
        return value
    try:
        same = yaml.safe_load(value) == value
    except yaml.YAMLError:
        same = False
    return value if same else SingleQuotedScalarString(value)


def set_value(path: Path, dotted: str, value: Any) -> None:
    """Set one setting in config.yaml (None removes it), keeping everything else as written."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    write_config(path, edited_config_text(text, dotted, value))


def write_config(path: Path, text: str) -> None:
    """Replace config.yaml atomically, keeping its mode (0600 for a new file)."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    _atomic_write(path, text, mode)


def set_plugin_lists(path: Path, enabled: list[str] | bool | None, disabled: list[str]) -> bool:
    """Write ``plugins.enabled`` (None: remove the key; False: leave it) and
    ``plugins.disabled`` (empty: remove it). True: comments are always kept."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    doc = _load_document(text)
    section = _section(doc, ["plugins"])
    if enabled is None:
        section.pop("enabled", None)
    elif not isinstance(enabled, bool):
        section["enabled"] = _flow_list(list(enabled))
    if disabled:
        section["disabled"] = _flow_list(list(disabled))
    else:
        section.pop("disabled", None)
    if not section:
        doc.pop("plugins", None)
    write_config(path, _dump(doc))
    return True


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


def unset_env_values(path: Path, names: list[str]) -> list[str]:
    """Remove variables from ``.env`` (every line of each); the names that were there."""
    from dotenv.parser import parse_stream

    text = path.read_text(encoding="utf-8") if path.exists() else ""
    out: list[str] = []
    removed: set[str] = set()
    for binding in parse_stream(io.StringIO(text)):
        if binding.key is not None and binding.key in names:
            removed.add(binding.key)
            continue
        out.append(binding.original.string)
    if removed:
        _atomic_write(path, "".join(out), 0o600)
    return sorted(removed)
