"""`ToolSelection`: the reference's toolset names, composites and disabled_toolsets."""

from __future__ import annotations

from hermesd.tools.toolsets import ToolSelection


def test_browser_also_offers_web_search_but_not_web_extract() -> None:
    sel = ToolSelection.of(["browser"])
    assert sel.why_not(["web"], "web_search") is None
    assert sel.why_not(["web"], "web_extract") is not None


def test_search_is_web_search_alone() -> None:
    sel = ToolSelection.of(["search"])
    assert sel.why_not(["web"], "web_search") is None
    assert sel.why_not(["web"], "web_extract") is not None


def test_all_and_platform_composites_mean_everything() -> None:
    for names in (["all"], ["*"], ["hermes-cli"], ["hermes-telegram", "file"]):
        assert ToolSelection.of(names).enabled is None
        assert ToolSelection.of(names).why_not(["some-plugin"], "its_tool") is None


def test_disabled_wins_and_a_disabled_platform_composite_removes_nothing() -> None:
    sel = ToolSelection.of(["file", "terminal"], ["terminal", "hermes-cli"])
    assert sel.why_not(["file"], "read_file") is None
    assert "disabled by config" in (sel.why_not(["terminal"], "terminal") or "")


def test_config_reads_both_spellings_of_each_key() -> None:
    cfg = {
        "tools": {"enabled_toolsets": ["file"], "disabled_toolsets": ["todo"]},
        "agent": {"disabled_toolsets": ["memory"]},
    }
    sel = ToolSelection.from_config(cfg)
    assert sel.why_not(["file"], "read_file") is None
    assert sel.disabled >= {"todo", "memory"}
    cfg["toolsets"] = ["debugging"]  # the reference's key replaces ours
    assert ToolSelection.from_config(cfg).why_not(["terminal"], "terminal") is None


def test_an_mcp_server_named_by_its_alias_is_enabled() -> None:
    sel = ToolSelection.of(["github"])
    assert sel.why_not(["mcp-github", "github"], "mcp__github__search") is None
    assert sel.why_not(["mcp-other", "other"], "mcp__other__search") is not None
