"""Markdown answers in Telegram's HTML parse mode.

Telegram understands a handful of tags (``b``, ``i``, ``s``, ``code``, ``pre``, ``a``,
``blockquote``, …) and nothing else: no lists, headings or tables. `telegram_html` parses the
model's markdown with markdown-it-py (as the Matrix formatter does) and writes those tags for
bold, italic, strikethrough, inline code, code blocks (with their language) and links (http,
https, mailto and tg only); headings become bold lines, list items lines with ``•`` or their
number, tables rows of cells separated by ``|``, quotes ``<blockquote>``. Everything else is
text, escaped, so raw HTML in the model's answer shows as written and never reaches Telegram as
markup. Pure functions, no I/O; the adapter falls back to plain text when Telegram refuses the
result anyway.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.token import Token

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["table", "strikethrough"]
)
_LINK_SCHEMES = ("http://", "https://", "mailto:", "tg://")
_INLINE_TAGS = {
    "strong_open": "<b>",
    "strong_close": "</b>",
    "em_open": "<i>",
    "em_close": "</i>",
    "s_open": "<s>",
    "s_close": "</s>",
}


def _text(value: str) -> str:
    return html.escape(value, quote=False)


def telegram_html(markdown: str) -> str:
    """``markdown`` as a text for ``parse_mode=HTML``."""
    out: list[str] = []
    lists: list[int | None] = []  # per open list: the next number, or None for bullets
    for token in _MARKDOWN.parse(markdown):
        kind = token.type
        if kind == "inline":
            out.append(_inline(token.children or []))
        elif kind == "paragraph_close":
            out.append("\n" if token.hidden else "\n\n")
        elif kind == "heading_open":
            out.append("<b>")
        elif kind == "heading_close":
            out.append("</b>\n\n")
        elif kind in ("fence", "code_block"):
            out.append(_code_block(token))
        elif kind == "bullet_list_open":
            lists.append(None)
        elif kind == "ordered_list_open":
            lists.append(int(str(token.attrGet("start") or 1)))
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
            out.append("" if lists else "\n")
        elif kind == "list_item_open":
            out.append(_item_marker(lists))
        elif kind == "blockquote_open":
            out.append("<blockquote>")
        elif kind == "blockquote_close":
            out[-1] = out[-1].rstrip("\n") if out else ""
            out.append("</blockquote>\n\n")
        elif kind == "hr":
            out.append("——————\n\n")
        elif kind in ("th_close", "td_close"):
            out.append(" | ")
        elif kind == "tr_close":
            out[-1] = out[-1].removesuffix(" | ")
            out.append("\n")
        elif kind == "table_close":
            out.append("\n")
        elif kind == "html_block":
            out.append(_text(token.content))
    return re.sub(r"\n{3,}", "\n\n", "".join(out)).strip()


def _item_marker(lists: list[int | None]) -> str:
    indent = "  " * (len(lists) - 1)
    number = lists[-1] if lists else None
    if number is None:
        return f"{indent}• "
    lists[-1] = number + 1
    return f"{indent}{number}. "


def _code_block(token: Token) -> str:
    language = (token.info or "").strip().split(" ")[0]
    body = _text(token.content.rstrip("\n"))
    if language:
        quoted = html.escape(language, quote=True)
        return f'<pre><code class="language-{quoted}">{body}</code></pre>\n\n'
    return f"<pre>{body}</pre>\n\n"


def _inline(children: Sequence[Token]) -> str:
    out: list[str] = []
    links: list[bool] = []  # per open link: whether it became an <a>
    for child in children:
        kind = child.type
        if kind == "text":
            out.append(_text(child.content))
        elif kind in _INLINE_TAGS:
            out.append(_INLINE_TAGS[kind])
        elif kind == "code_inline":
            out.append(f"<code>{_text(child.content)}</code>")
        elif kind in ("softbreak", "hardbreak"):
            out.append("\n")
        elif kind == "link_open":
            href = str(child.attrGet("href") or "")
            usable = href.lower().startswith(_LINK_SCHEMES)
            links.append(usable)
            if usable:
                out.append(f'<a href="{html.escape(href, quote=True)}">')
        elif kind == "link_close":
            if links.pop():
                out.append("</a>")
        elif kind == "image":
            out.append(_text(child.content or str(child.attrGet("alt") or "")))
        elif kind == "html_inline":
            out.append(_text(child.content))
    return "".join(out)
