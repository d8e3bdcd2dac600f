"""What a Matrix message looks like: markdown rendered to ``org.matrix.custom.html``.

Pure functions, no I/O: the adapter (``hermesd.gateway.matrix``) builds event content with them.
Raw HTML in the model's text is escaped, never passed through (a model's output is untrusted).
Long answers are split before they get here (``hermesd.gateway.split``).
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["table", "strikethrough"]
)


def markdown_html(text: str) -> str:
    """The HTML a Matrix client shows for ``text`` (markdown, raw HTML escaped)."""
    return str(_MARKDOWN.render(text)).strip()


def text_content(text: str, msgtype: str = "m.text") -> dict[str, Any]:
    """Event content for ``text``: the markdown as ``body`` and, when it has any markup, the
    rendered HTML as ``formatted_body``."""
    content: dict[str, Any] = {"msgtype": msgtype, "body": text}
    rendered = markdown_html(text)
    # a plain sentence renders as <p>sentence</p>: no formatted body needed for that
    if rendered != f"<p>{_escape(text)}</p>":
        content["format"] = "org.matrix.custom.html"
        content["formatted_body"] = rendered
    return content


def _escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )
