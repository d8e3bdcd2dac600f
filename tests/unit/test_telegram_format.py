"""How answers look in Telegram: markdown in the HTML parse mode, everything else escaped; and
how long the adapter waits before polling again after a failure."""

from __future__ import annotations

import random

import pytest

from hermesd.gateway.telegram import retry_delay
from hermesd.gateway.telegram_format import telegram_html


def test_bold_italic_strike_and_inline_code_become_telegram_tags() -> None:
    assert telegram_html("**b** *i* ~~s~~ `x`") == "<b>b</b> <i>i</i> <s>s</s> <code>x</code>"


def test_a_code_block_keeps_its_language_and_escapes_its_text() -> None:
    assert telegram_html("```python\nif a < b:\n    pass\n```") == (
        '<pre><code class="language-python">if a &lt; b:\n    pass</code></pre>'
    )


def test_links_keep_their_address_escaped_and_other_schemes_stay_text() -> None:
    assert telegram_html("[docs](https://x.org/?a=1&b=2)") == (
        '<a href="https://x.org/?a=1&amp;b=2">docs</a>'
    )
    assert "<a" not in telegram_html("[run](file:///etc/passwd)")


def test_lists_become_lines_with_bullets_and_numbers() -> None:
    assert telegram_html("- one\n- two\n  1. first\n  2. second") == (
        "• one\n• two\n  1. first\n  2. second"
    )


def test_headings_become_bold_lines_and_tables_rows_of_cells() -> None:
    assert telegram_html("# Plan\n\n| a | b |\n|---|---|\n| 1 | 2 |") == (
        "<b>Plan</b>\n\na | b\n1 | 2"
    )


def test_raw_html_and_entities_in_an_answer_are_shown_as_written() -> None:
    assert telegram_html('<b onclick="x">hi</b> & <script>') == (
        '&lt;b onclick="x"&gt;hi&lt;/b&gt; &amp; &lt;script&gt;'
    )


def test_a_quote_is_a_blockquote() -> None:
    assert telegram_html("> said\n> twice") == "<blockquote>said\ntwice</blockquote>"


def test_retries_wait_twice_as_long_each_time_up_to_the_cap_with_jitter() -> None:
    random.seed(7)
    delays = [retry_delay(n, 1.0, 60.0) for n in range(10)]
    for n, delay in enumerate(delays):
        ceiling = min(60.0, 2.0**n)
        assert ceiling / 2 <= delay <= ceiling
    assert max(delays) <= 60.0 and delays[-1] >= 30.0


@pytest.mark.parametrize("failures", [0, 5, 1000])
def test_a_retry_never_waits_more_than_the_cap(failures: int) -> None:
    assert retry_delay(failures, 0.5, 4.0) <= 4.0
