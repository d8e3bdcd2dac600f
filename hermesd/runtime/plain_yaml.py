"""YAML a plugin wrote: plain data only, bounded before it is parsed.

A plugin's manifest and its skills' front matter are read by the daemon before any plugin code
runs, so they are the first thing a hostile plugin controls. `load_plain` parses such text with
PyYAML's safe loader minus the features that let a few hundred bytes grow into gigabytes
(the "billion laughs" alias bomb) or make a reader see data that is not written where it
appears: anchors, aliases and merge keys (``<<``) are refused, nesting is limited, and the
text is capped in size before parsing starts (`read_capped` checks a file's size before reading
it). Every failure is a `PlainYamlError` whose message is one line saying where and why.
The owner's own files (config.yaml) are not read through here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node

MAX_BYTES = 64 * 1024
MAX_DEPTH = 32
_MERGE_TAG = "tag:yaml.org,2002:merge"


class PlainYamlError(ValueError):
    """Plugin YAML that is too big, uses a refused feature, or does not parse."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"


class _PlainLoader(yaml.SafeLoader):
    """The safe loader, refusing anchors, aliases, merge keys and deep nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            raise PlainYamlError(
                f"{_where(event.start_mark)}: YAML aliases (*{event.anchor}) are not allowed"
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise PlainYamlError(
                f"{_where(event.start_mark)}: YAML anchors (&{anchor}) are not allowed"
            )
        if self._depth >= MAX_DEPTH:
            raise PlainYamlError(
                f"{_where(event.start_mark)}: nested deeper than {MAX_DEPTH} levels"
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def flatten_mapping(self, node: MappingNode) -> None:
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                raise PlainYamlError(
                    f"{_where(key_node.start_mark)}: YAML merge keys (<<) are not allowed"
                )
        super().flatten_mapping(node)


def load_plain(text: str, *, limit: int = MAX_BYTES) -> Any:
    """Parse ``text`` as plain YAML data; `PlainYamlError` when it cannot or may not."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > limit:
        raise PlainYamlError(f"the YAML is {size} bytes; the limit is {limit}")
    loader = None
    try:
        loader = _PlainLoader(text)  # the reader checks for unprintable characters at once
        return loader.get_single_data()
    except PlainYamlError:
        raise
    except yaml.YAMLError as exc:
        raise PlainYamlError(" ".join(str(exc).split())) from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer of 5,000 digits
        raise PlainYamlError(f"unreadable value: {' '.join(str(exc).split())}") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_capped(path: Path, *, limit: int = MAX_BYTES) -> str:
    """The UTF-8 text of ``path``, refused before reading when it is over ``limit`` bytes."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise PlainYamlError(f"{path.name} is {size} bytes; the limit is {limit}")
        data = f.read(limit + 1)  # the file may grow between the check and the read
    if len(data) > limit:
        raise PlainYamlError(f"{path.name} is over {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlainYamlError(f"{path.name} is not UTF-8 text: {exc.reason}") from None
