"""User and plugin skills, the system-prompt index, and the skills_list/skill_view tools."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from hermesd.runtime.hooks import HookBus
from hermesd.runtime.workers import WorkerPool
from hermesd.tools.builtin_skills import register_skill_tools
from hermesd.tools.registry import ToolRegistry
from hermesd.tools.skill_catalog import SkillCatalog


def write_skill(
    folder: Path,
    name: str | None,
    description: str = "",
    body: str = "# Body\n",
    files: dict[str, str] | None = None,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    front = "".join(f"{k}: {v}\n" for k, v in (("name", name), ("description", description)) if v)
    (folder / "SKILL.md").write_text(f"---\n{front}---\n{body}" if front else body)
    for rel, content in (files or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(content)
    return folder / "SKILL.md"


@pytest.fixture
def catalog(tmp_path: Path) -> SkillCatalog:
    return SkillCatalog(tmp_path / "home")


@pytest.fixture
def skills_root(catalog: SkillCatalog) -> Path:
    return catalog.root


@pytest.fixture
def registry(catalog: SkillCatalog) -> ToolRegistry:
    pool = WorkerPool(4)
    registry = ToolRegistry(HookBus(pool), pool=pool, env={})
    register_skill_tools(registry, catalog)
    return registry


def tool(registry: ToolRegistry, tool_name: str, /, **args: Any) -> Any:
    return json.loads(asyncio.run(registry.call(tool_name, args)))


def plugin_skills(catalog: SkillCatalog, tmp_path: Path, plugin: str, *names: str) -> None:
    for name in names:
        path = write_skill(tmp_path / "plugin" / plugin / name, name, f"{name} desc", f"# {name}\n")
        catalog.register_plugin_skill(plugin, name, path)


def test_user_skills_are_read_from_front_matter(catalog: SkillCatalog, skills_root: Path) -> None:
    write_skill(skills_root / "deploy", "deploy-app", "Ship the app")
    write_skill(skills_root / "plain", None, body="no front matter\n")
    write_skill(skills_root / "ops" / "backup", "backup", "Back up the database")
    found = [(s.name, s.description, s.category) for s in catalog.user_skills()]
    assert found == [
        ("deploy-app", "Ship the app", None),
        ("plain", "", None),
        ("backup", "Back up the database", "ops"),
    ]


def test_index_lists_user_skills_but_not_plugin_skills(
    catalog: SkillCatalog, skills_root: Path, tmp_path: Path
) -> None:
    write_skill(skills_root / "deploy", "deploy-app", "Ship the app")
    plugin_skills(catalog, tmp_path, "calc", "math-checks")
    index = catalog.index_text()
    assert "<available_skills>" in index and "  - deploy-app: Ship the app" in index
    assert "math-checks" not in index


def test_index_is_empty_without_user_skills(catalog: SkillCatalog) -> None:
    assert catalog.index_text() == ""


def test_skills_list_tool_lists_user_skills_and_filters_by_category(
    registry: ToolRegistry, skills_root: Path
) -> None:
    write_skill(skills_root / "deploy", "deploy-app", "Ship the app")
    write_skill(skills_root / "ops" / "backup", "backup", "Back up")
    everything = tool(registry, "skills_list")
    assert everything["success"] and everything["count"] == 2
    assert everything["categories"] == ["ops"]
    assert [s["name"] for s in tool(registry, "skills_list", category="ops")["skills"]] == [
        "backup"
    ]


def test_skill_view_returns_the_contract_shape(registry: ToolRegistry, skills_root: Path) -> None:
    write_skill(
        skills_root / "deploy",
        "deploy-app",
        "Ship the app",
        "# Deploy\n",
        files={"references/api.md": "api", "scripts/run.sh": "echo"},
    )
    result = tool(registry, "skill_view", name="deploy-app")
    assert set(result) >= {
        "success",
        "name",
        "content",
        "description",
        "linked_files",
        "readiness_status",
    }
    assert result["success"] is True and result["name"] == "deploy-app"
    assert result["content"].endswith("# Deploy\n")
    assert result["linked_files"] == {
        "references": ["references/api.md"],
        "scripts": ["scripts/run.sh"],
    }
    assert result["readiness_status"] == "available"


def test_skill_view_finds_a_skill_by_folder_name(registry: ToolRegistry, skills_root: Path) -> None:
    write_skill(skills_root / "deploy", "deploy-app", "Ship")
    assert tool(registry, "skill_view", name="deploy")["name"] == "deploy-app"


def test_plugin_skill_gets_the_bundle_banner_with_siblings(
    registry: ToolRegistry, catalog: SkillCatalog, tmp_path: Path
) -> None:
    plugin_skills(catalog, tmp_path, "superpowers", "writing-plans", "code-review", "tdd")
    result = tool(registry, "skill_view", name="superpowers:tdd")
    assert result["success"] is True and result["name"] == "superpowers:tdd"
    assert result["content"] == (
        "[Bundle context: This skill is part of the 'superpowers' plugin.\n"
        "Sibling skills: code-review, writing-plans.\n"
        "Use qualified form to invoke siblings (e.g. superpowers:code-review).]\n\n"
        "---\nname: tdd\ndescription: tdd desc\n---\n# tdd\n"
    )
    assert result["description"] == "tdd desc"


def test_plugin_skill_without_siblings_gets_the_short_banner(
    registry: ToolRegistry, catalog: SkillCatalog, tmp_path: Path
) -> None:
    plugin_skills(catalog, tmp_path, "calc", "math-checks")
    content = tool(registry, "skill_view", name="calc:math-checks")["content"]
    assert content.startswith("[Bundle context: This skill is part of the 'calc' plugin.]\n\n")


def test_missing_skill_in_a_known_plugin_lists_what_it_has(
    registry: ToolRegistry, catalog: SkillCatalog, tmp_path: Path
) -> None:
    plugin_skills(catalog, tmp_path, "calc", "math-checks", "units")
    assert tool(registry, "skill_view", name="calc:nope") == {
        "success": False,
        "error": "Skill 'nope' not found in plugin 'calc'.",
        "available_skills": ["calc:math-checks", "calc:units"],
        "hint": "The 'calc' plugin provides 2 skill(s).",
    }


def test_missing_user_skill_lists_available_ones(registry: ToolRegistry, skills_root: Path) -> None:
    write_skill(skills_root / "deploy", "deploy-app", "Ship")
    result = tool(registry, "skill_view", name="nope")
    assert result["success"] is False and result["error"] == "Skill 'nope' not found."
    assert result["available_skills"] == ["deploy-app"]


def test_file_path_reads_a_file_inside_the_skill_folder(
    registry: ToolRegistry, skills_root: Path
) -> None:
    write_skill(skills_root / "deploy", "deploy-app", "Ship", files={"references/api.md": "API"})
    result = tool(registry, "skill_view", name="deploy-app", file_path="references/api.md")
    assert (result["success"], result["content"], result["file"]) == (
        True,
        "API",
        "references/api.md",
    )


def test_file_path_works_for_plugin_skills(
    registry: ToolRegistry, catalog: SkillCatalog, tmp_path: Path
) -> None:
    plugin_skills(catalog, tmp_path, "calc", "units")
    (tmp_path / "plugin" / "calc" / "units" / "table.md").write_text("m km")
    assert tool(registry, "skill_view", name="calc:units", file_path="table.md")["content"] == (
        "m km"
    )


@pytest.mark.parametrize(
    "path",
    ["../other/SKILL.md", "../../secret.txt", "/etc/passwd", "references/../../other/SKILL.md"],
)
def test_file_path_escaping_the_skill_folder_is_refused(
    registry: ToolRegistry, skills_root: Path, path: str
) -> None:
    write_skill(skills_root / "deploy", "deploy-app", "Ship")
    write_skill(skills_root / "other", "other", "secret")
    result = tool(registry, "skill_view", name="deploy-app", file_path=path)
    assert result["success"] is False and "content" not in result


def test_symlink_escaping_the_skill_folder_is_refused(
    registry: ToolRegistry, skills_root: Path, tmp_path: Path
) -> None:
    write_skill(skills_root / "deploy", "deploy-app", "Ship")
    (tmp_path / "secret.txt").write_text("top secret")
    os.symlink(tmp_path / "secret.txt", skills_root / "deploy" / "link.md")
    result = tool(registry, "skill_view", name="deploy-app", file_path="link.md")
    assert result["success"] is False and "outside the skill folder" in result["error"]
    linked = tool(registry, "skill_view", name="deploy-app")["linked_files"]
    assert linked is None


def test_missing_file_in_a_skill_lists_available_files(
    registry: ToolRegistry, skills_root: Path
) -> None:
    write_skill(skills_root / "deploy", "deploy-app", "Ship", files={"templates/a.yaml": "a"})
    result = tool(registry, "skill_view", name="deploy-app", file_path="templates/b.yaml")
    assert result["success"] is False
    assert result["available_files"] == {"templates": ["templates/a.yaml"]}


def test_unregister_plugin_removes_its_skills(catalog: SkillCatalog, tmp_path: Path) -> None:
    plugin_skills(catalog, tmp_path, "calc", "a", "b")
    assert catalog.unregister_plugin("calc") == ["calc:a", "calc:b"]
    assert catalog.find("calc:a") is None


def test_describe_lists_user_then_plugin_skills(
    catalog: SkillCatalog, skills_root: Path, tmp_path: Path
) -> None:
    write_skill(skills_root / "deploy", "deploy-app", "Ship")
    plugin_skills(catalog, tmp_path, "calc", "units")
    rows = catalog.describe()
    assert [(r["name"], r["plugin"]) for r in rows] == [
        ("deploy-app", None),
        ("calc:units", "calc"),
    ]
