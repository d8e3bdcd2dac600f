"""An MCP result as the JSON string a tool call returns (the reference's shapes).

A tool result: ``{"result": text}`` with the text blocks joined by newlines; with structured
content as well, ``{"result": text, "structuredContent": {...}}``, or ``{"result": structured}``
when there is no text. Image, audio and resource blocks are described in a line of text (the
model cannot see bytes). A server-side error is ``{"error": text}`` with credentials removed.
Invisible Unicode tag characters (U+E0000–U+E007F, a known way to hide instructions from a
person reading the result) are removed from everything. Pure functions over the SDK's types.

What a server wrote reaches the model as untrusted data: a result (a tool's, a resource's, a
prompt's, a listing) is the JSON above inside `hermesd.untrusted.mark`'s provenance marker
naming ``mcp:<server>/<tool>``; a server's error stays ``{"error": …}`` (so it still counts as
a tool error) with the marked text as its value. Errors hermesd writes itself are not marked.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hermesd import redact, untrusted

_TAGS = re.compile("[\U000e0000-\U000e007f]")
# Keys a server may not set in `_meta`: the protocol's own namespaces.
_RESERVED_META = re.compile(r"^(?:[^/]*\.)?(?:mcp|modelcontextprotocol)(?:\.[^/]*)?/")


def strip_tags(value: Any) -> Any:
    """``value`` with invisible tag characters removed from every string in it."""
    if isinstance(value, str):
        return _TAGS.sub("", value)
    if isinstance(value, list):
        return [strip_tags(v) for v in value]
    if isinstance(value, dict):
        return {strip_tags(k): strip_tags(v) for k, v in value.items()}
    return value


def error_text(text: str) -> str:
    """Error text for the model: tags and credentials removed."""
    return redact.redact(strip_tags(text))


def error_json(text: str) -> str:
    """``{"error": text}`` with the text cleaned (`error_text`)."""
    return json.dumps({"error": error_text(text)}, ensure_ascii=False)


def describe_block(block: Any) -> str:
    """One content block as text."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(getattr(block, "text", "") or "")
    if kind in ("image", "audio"):
        data = str(getattr(block, "data", "") or "")
        mime = getattr(block, "mime_type", None) or kind
        return f"[{kind} content: {mime}, {len(data) * 3 // 4} bytes, not shown]"
    if kind == "resource_link":
        name = getattr(block, "name", "") or ""
        return f"[resource link: {name} {getattr(block, 'uri', '')}]".replace("  ", " ")
    if kind == "resource":
        resource = getattr(block, "resource", None)
        text = getattr(resource, "text", None)
        if text:
            return str(text)
        blob = str(getattr(resource, "blob", "") or "")
        mime = getattr(resource, "mime_type", None) or "application/octet-stream"
        return f"[resource {getattr(resource, 'uri', '')}: {mime}, {len(blob) * 3 // 4} bytes]"
    return f"[{kind or type(block).__name__} content not shown]"


def marked(payload: Any, source: str) -> str:
    """``payload`` as JSON (tags removed) inside the untrusted-data marker of ``source``."""
    text = json.dumps(strip_tags(payload), ensure_ascii=False, default=str)
    return untrusted.mark(text, source)


def tool_result(result: Any, source: str) -> str:
    """A ``CallToolResult`` of ``source`` (``mcp:server/tool``) as the tool's result string."""
    blocks = list(getattr(result, "content", None) or [])
    if getattr(result, "is_error", False):
        text = "".join(describe_block(b) for b in blocks if getattr(b, "type", "") != "image")
        cleaned = error_text(text or "MCP tool returned an error")
        return json.dumps({"error": untrusted.mark(cleaned, source)}, ensure_ascii=False)
    text = "\n".join(part for part in (describe_block(b) for b in blocks) if part)
    structured = getattr(result, "structured_content", None)
    payload: dict[str, Any]
    if structured is not None and text:
        payload = {"result": text, "structuredContent": structured}
    elif structured is not None:
        payload = {"result": structured}
    else:
        payload = {"result": text}
    meta = _vendor_meta(getattr(result, "meta", None))
    if meta:
        payload["_meta"] = meta
    return marked(payload, source)


def _vendor_meta(meta: Any) -> dict[str, Any]:
    if not isinstance(meta, dict):
        return {}
    return {k: v for k, v in meta.items() if not _RESERVED_META.match(str(k))}


def resources_result(listing: Any, source: str) -> str:
    """``resources/list`` as ``{"resources": [...]}``."""
    items = [
        {
            k: v
            for k, v in {
                "uri": str(r.uri),
                "name": r.name,
                "description": r.description,
                "mimeType": r.mime_type,
            }.items()
            if v is not None
        }
        for r in getattr(listing, "resources", None) or []
    ]
    return marked({"resources": items}, source)


def read_result(result: Any, source: str) -> str:
    """``resources/read`` as ``{"result": text}``."""
    parts = []
    for item in getattr(result, "contents", None) or []:
        text = getattr(item, "text", None)
        if text is not None:
            parts.append(str(text))
        else:
            blob = str(getattr(item, "blob", "") or "")
            mime = getattr(item, "mime_type", None) or "application/octet-stream"
            parts.append(f"[binary resource {item.uri}: {mime}, {len(blob) * 3 // 4} bytes]")
    return marked({"result": "\n".join(parts)}, source)


def prompts_result(listing: Any, source: str) -> str:
    """``prompts/list`` as ``{"prompts": [...]}``."""
    items = []
    for p in getattr(listing, "prompts", None) or []:
        entry: dict[str, Any] = {"name": p.name}
        if p.description:
            entry["description"] = p.description
        if p.arguments:
            entry["arguments"] = [
                {"name": a.name, "description": a.description, "required": bool(a.required)}
                for a in p.arguments
            ]
        items.append(entry)
    return marked({"prompts": items}, source)


def prompt_result(result: Any, source: str) -> str:
    """``prompts/get`` as ``{"messages": [{role, content}], "description"?}``."""
    messages = [
        {"role": m.role, "content": describe_block(m.content)}
        for m in getattr(result, "messages", None) or []
    ]
    payload: dict[str, Any] = {"messages": messages}
    if getattr(result, "description", None):
        payload["description"] = result.description
    return marked(payload, source)
