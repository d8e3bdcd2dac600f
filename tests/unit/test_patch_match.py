"""The patch tool's matcher and patch-format parser, on strings (no daemon: pure functions)."""

from __future__ import annotations

import pytest

from hermesd.tools.patch_format import PatchFormatError, parse_patch
from hermesd.tools.patch_match import MatchError, find_spans, replace

SOURCE = "def f():\n    if x:\n        return 1\n    return 2\n"


def test_an_exact_match_wins_and_replaces_only_that_text() -> None:
    out, match = replace(SOURCE, "return 1", "return 10")
    assert match.strategy == "exact"
    assert out == SOURCE.replace("return 1", "return 10")


def test_a_snippet_with_other_indentation_matches_and_is_reindented() -> None:
    old = "if x:\n    return 1"
    new = "if x:\n    return 3\nelse:\n    return 4"
    out, match = replace(SOURCE, old, new)
    assert match.strategy == "line_trimmed"
    assert out == (
        "def f():\n    if x:\n        return 3\n    else:\n        return 4\n    return 2\n"
    )


def test_collapsed_whitespace_matches() -> None:
    content = "x  =   compute( a,  b )\ny = 2\n"
    out, match = replace(content, "x = compute( a, b )", "x = 0")
    assert match.strategy == "whitespace_normalized"
    assert out == "x = 0\ny = 2\n"


def test_tabs_for_spaces_match() -> None:
    content = "def g():\n\treturn 1\n"
    out, _ = replace(content, "def g():\n    return 1", "def g():\n    return 2")
    assert out == "def g():\n\treturn 2\n"


def test_blank_lines_around_the_snippet_are_ignored() -> None:
    out, _ = replace(SOURCE, "\n\n    return 2   \n\n", "    return 5")
    assert out.endswith("    return 5\n")


def test_no_match_is_an_error() -> None:
    with pytest.raises(MatchError, match="not found"):
        replace(SOURCE, "return 99", "x")


def test_an_ambiguous_match_is_refused_unless_replace_all() -> None:
    content = "a = 1\nb = 1\na = 1\n"
    with pytest.raises(MatchError, match="matches 2 places"):
        replace(content, "a = 1", "a = 2")
    out, _ = replace(content, "a = 1", "a = 2", replace_all=True)
    assert out == "a = 2\nb = 1\na = 2\n"


def test_an_empty_old_string_is_refused() -> None:
    with pytest.raises(MatchError, match="empty"):
        find_spans(SOURCE, "")


def test_the_strictest_strategy_that_matches_is_used() -> None:
    """An exact match inside a line beats a whole-line loose match (the indentation stays)."""
    out, match = replace("  v = 1\n", "v = 1", "v = 2")
    assert match.strategy == "exact" and out == "  v = 2\n"


def test_the_patch_format_is_parsed_into_operations() -> None:
    ops = parse_patch(
        "*** Begin Patch\n"
        "*** Update File: a.py\n"
        "@@ def f\n"
        " keep\n"
        "-old\n"
        "+new\n"
        "*** Add File: b.py\n"
        "+one\n"
        "+two\n"
        "*** Delete File: c.py\n"
        "*** Move File: d.py -> e.py\n"
        "*** End Patch\n"
    )
    assert [(op.kind, op.path, op.move_to) for op in ops] == [
        ("update", "a.py", None),
        ("add", "b.py", None),
        ("delete", "c.py", None),
        ("move", "d.py", "e.py"),
    ]
    [hunk] = ops[0].hunks
    assert (hunk.hint, hunk.old, hunk.new) == ("def f", ["keep", "old"], ["keep", "new"])
    assert ops[1].added == ["one", "two"]


def test_a_patch_without_files_or_with_stray_lines_is_refused() -> None:
    with pytest.raises(PatchFormatError):
        parse_patch("*** Begin Patch\n*** End Patch\n")
    with pytest.raises(PatchFormatError, match="outside any file"):
        parse_patch("*** Begin Patch\nhello\n*** End Patch\n")
    with pytest.raises(PatchFormatError, match="no changes"):
        parse_patch("*** Begin Patch\n*** Update File: a.py\n*** End Patch\n")


def test_whole_lines_skips_an_exact_match_inside_a_longer_line() -> None:
    content = "x = 100\nx = 10\n"
    assert find_spans(content, "x = 10").spans == [(0, 6), (8, 14)]
    assert find_spans(content, "x = 10", whole_lines=True).spans == [(8, 14)]
