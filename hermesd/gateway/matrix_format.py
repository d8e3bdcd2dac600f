"""What a Matrix message looks like: markdown rendered to ``org.matrix.custom.html``, the
relation that puts an answer in its thread or under the message it answers, edits, and whether
a message mentions the agent.

Pure functions, no I/O: the adapter (``hermesd.gateway.matrix``) builds event content with them.
Raw HTML in the model's text is escaped, never passed through (a model's output is untrusted).
Long answers are split before they get here (``hermesd.gateway.split``).
"""

from __future__ import annotations

import re
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


def relate(content: dict[str, Any], reply_to: str | None, thread_id: str | None) -> None:
    """Put the answer in its thread (and under the message it answers)."""
    if thread_id:
        content["m.relates_to"] = {
            "rel_type": "m.thread",
            "event_id": thread_id,
            "is_falling_back": reply_to is None,
            "m.in_reply_to": {"event_id": reply_to or thread_id},
        }
    elif reply_to:
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}


def edit_content(message_id: str, text: str) -> dict[str, Any]:
    """An ``m.replace`` edit of ``message_id`` to ``text`` (clients show the new text)."""
    new = text_content(text)
    edit = {**new, "body": f"* {new['body']}", "m.new_content": new}
    if "formatted_body" in new:
        edit["formatted_body"] = f"* {new['formatted_body']}"
    edit["m.relates_to"] = {"rel_type": "m.replace", "event_id": message_id}
    return edit


def mentions(content: dict[str, Any], user_id: str) -> bool:
    """Whether a message's content mentions ``user_id``: its ``m.mentions`` (the spec's
    signal), the id or the localpart as a word in the text (as the reference matches it), or a
    link to the user in the HTML."""
    listed = (content.get("m.mentions") or {}).get("user_ids") or []
    if user_id in listed:
        return True
    body = str(content.get("body") or "")
    localpart = user_id.split(":", 1)[0].lstrip("@")
    if user_id in body or (localpart and re.search(rf"\b{re.escape(localpart)}\b", body, re.I)):
        return True
    return f"matrix.to/#/{user_id}" in str(content.get("formatted_body") or "")


def strip_mention(body: str, user_id: str) -> str:
    """``body`` without explicit mentions of ``user_id`` (the id, ``@localpart``; a bare word
    stays: "Hermes Agent" is not a mention to cut) and the colon or comma they leave."""
    localpart = user_id.split(":", 1)[0].lstrip("@")
    body = body.replace(user_id, "")
    body = re.sub(rf"(?<!\w)@{re.escape(localpart)}\b", "", body, flags=re.IGNORECASE)
    body = re.sub(r"^\s*[:,]\s*", "", body)
    return re.sub(r"[ \t]{2,}", " ", body).strip()
