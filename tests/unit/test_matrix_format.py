"""How answers look in Matrix: markdown to HTML, raw HTML escaped, threads and replies."""

from __future__ import annotations

from hermesd.gateway.core import _chat_and_thread
from hermesd.gateway.matrix_format import (
    edit_content,
    mentions,
    relate,
    strip_mention,
    text_content,
)


def test_plain_text_is_sent_without_a_formatted_body() -> None:
    assert text_content("just a sentence, it's fine") == {
        "msgtype": "m.text",
        "body": "just a sentence, it's fine",
    }


def test_markdown_becomes_matrix_html_beside_the_markdown_body() -> None:
    content = text_content("**bold** and `code`")
    assert content["body"] == "**bold** and `code`"
    assert content["format"] == "org.matrix.custom.html"
    assert content["formatted_body"] == "<p><strong>bold</strong> and <code>code</code></p>"


def test_a_code_fence_becomes_a_pre_block_with_its_language() -> None:
    html = text_content("```python\nprint(1 < 2)\n```")["formatted_body"]
    assert html == '<pre><code class="language-python">print(1 &lt; 2)\n</code></pre>'


def test_raw_html_from_the_model_is_escaped_not_rendered() -> None:
    html = text_content('<img src="x" onerror="alert(1)"> **hi**')["formatted_body"]
    assert "<img" not in html
    assert "&lt;img" in html and "<strong>hi</strong>" in html


def test_an_answer_in_a_thread_is_posted_in_that_thread() -> None:
    content: dict = {"body": "x"}
    relate(content, None, "$root")
    assert content["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": "$root",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$root"},
    }


def test_a_reply_outside_a_thread_quotes_the_message_it_answers() -> None:
    content: dict = {"body": "x"}
    relate(content, "$msg", None)
    assert content["m.relates_to"] == {"m.in_reply_to": {"event_id": "$msg"}}


def test_an_edit_replaces_the_message_and_keeps_a_fallback_body() -> None:
    edit = edit_content("$question", "Decided elsewhere: **once**")
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$question"}
    assert edit["body"] == "* Decided elsewhere: **once**"
    new = edit["m.new_content"]
    assert new["formatted_body"] == "<p>Decided elsewhere: <strong>once</strong></p>"


BOT = "@hermes:example.org"


def test_a_mention_is_found_in_m_mentions_the_text_or_a_link() -> None:
    assert mentions({"body": "hi", "m.mentions": {"user_ids": [BOT]}}, BOT)
    assert mentions({"body": f"{BOT} what time is it?"}, BOT)
    assert mentions({"body": "Hermes: what time is it?"}, BOT)
    link = f'<a href="https://matrix.to/#/{BOT}">agent</a> hi'
    assert mentions({"body": "agent hi", "formatted_body": link}, BOT)


def test_a_message_to_someone_else_is_no_mention() -> None:
    assert not mentions({"body": "hermesd is a daemon, @alice"}, BOT)
    assert not mentions({"body": "hi", "m.mentions": {"user_ids": ["@alice:example.org"]}}, BOT)


def test_explicit_mentions_are_cut_from_the_text_and_bare_words_stay() -> None:
    assert strip_mention(f"{BOT}: what time is it?", BOT) == "what time is it?"
    assert strip_mention("@hermes, list the files", BOT) == "list the files"
    assert strip_mention("ask Hermes Agent", BOT) == "ask Hermes Agent"


def test_a_delivery_target_may_name_a_matrix_thread_by_its_root_event() -> None:
    assert _chat_and_thread("!room:example.org:8448:$root_ev") == (
        "!room:example.org:8448",
        "$root_ev",
    )
