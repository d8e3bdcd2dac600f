"""The built-in file, terminal and session-search tools, registered into a fake registry."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.daemon import config
from hermesd.store.facade import SessionStore
from hermesd.tools.builtin_files import register_builtin_file_tools


class Registrations:
    """Captures ``registry.register(...)`` calls; ``run`` calls a handler like the registry."""

    def __init__(self) -> None:
        self.tools: dict[str, dict[str, Any]] = {}

    def register(
        self,
        name: str,
        toolset: str,
        schema: dict[str, Any],
        handler: Any,
        check_fn: Any = None,
        requires_env: Any = None,
        is_async: bool = False,
        description: str = "",
        emoji: str = "",
        override: bool = False,
        owner: str = "builtin",
        *,
        prepare: Any = None,
    ) -> None:
        self.tools[name] = {
            "toolset": toolset,
            "schema": schema,
            "handler": handler,
            "is_async": is_async,
            "owner": owner,
            "description": description,
            "prepare": prepare,
        }

    def run(self, name: str, **args: Any) -> dict[str, Any]:
        entry = self.tools[name]
        out = entry["handler"](args, task_id="s1", session_id="s1")
        if entry["is_async"]:
            out = asyncio.run(out)
        result: dict[str, Any] = json.loads(out)
        return result


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "hermes"
    home.mkdir()
    (home / "config.yaml").write_text("model: {}\n")
    (home / ".env").write_text("OPENAI_API_KEY=sk-secret\n")
    return home


@pytest.fixture
def work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def store(home: Path) -> Iterator[SessionStore]:
    s = SessionStore.in_home(home)
    yield s
    s.close()


@pytest.fixture
def reg(home: Path, work: Path, store: SessionStore) -> Registrations:
    r = Registrations()
    cfg = config.parse(f"terminal:\n  cwd: {work}\n  timeout: 5\n")
    register_builtin_file_tools(r, home=home, store=store, config=cfg)
    return r


# -- declarations -----------------------------------------------------------------------------


def test_all_six_tools_register_as_builtin(reg: Registrations) -> None:
    assert {n: t["toolset"] for n, t in reg.tools.items()} == {
        "terminal": "terminal",
        "read_file": "file",
        "write_file": "file",
        "patch": "file",
        "search_files": "file",
        "session_search": "session_search",
    }
    assert all(t["owner"] == "builtin" for t in reg.tools.values())
    assert reg.tools["terminal"]["is_async"] is True


def test_schemas_meet_the_tool_checklist(reg: Registrations) -> None:
    for name, entry in reg.tools.items():
        schema = entry["schema"]
        assert schema["name"] == name and "return" in schema["description"], name
        params = schema["parameters"]
        assert params["type"] == "object"
        assert set(params.get("required", [])) <= set(params["properties"])
        for pname, prop in params["properties"].items():
            assert prop.get("description"), f"{name}.{pname} has no description"
            if prop["type"] == "integer":
                assert "minimum" in prop, f"{name}.{pname} has no minimum"


# -- terminal ---------------------------------------------------------------------------------


def test_terminal_runs_a_command_in_the_configured_cwd(reg: Registrations, work: Path) -> None:
    out = reg.run("terminal", command="pwd; echo err >&2; exit 3")
    assert out["exit_code"] == 3
    assert out["output"].splitlines() == [str(work.resolve()), "err"]


def test_terminal_cwd_argument(reg: Registrations, tmp_path: Path) -> None:
    assert reg.run("terminal", command="pwd", cwd=str(tmp_path))["output"].strip() == str(
        tmp_path.resolve()
    )
    assert "not a directory" in reg.run("terminal", command="pwd", cwd="/nope")["error"]


def test_terminal_kills_a_command_at_its_timeout(reg: Registrations) -> None:
    started = time.monotonic()
    out = reg.run("terminal", command="echo begun; sleep 30", timeout=1)
    assert time.monotonic() - started < 5
    assert "timed out after 1s" in out["error"] and out["output"].strip() == "begun"


def test_terminal_output_is_capped(reg: Registrations) -> None:
    out = reg.run("terminal", command="head -c 300000 /dev/zero | tr '\\0' x")
    assert len(out["output"]) < 60_000 and "omitted" in out["output"]


def test_terminal_output_transform_hook(home: Path, work: Path, store: SessionStore) -> None:
    seen: dict[str, Any] = {}

    async def transform(**kwargs: Any) -> str | None:
        seen.update(kwargs)
        return "[redacted]"

    r = Registrations()
    register_builtin_file_tools(
        r, home=home, store=store, config=config.parse(""), transform_output=transform
    )
    out = r.run("terminal", command="echo secret", cwd=str(work))
    assert out == {"output": "[redacted]", "exit_code": 0}
    assert (
        seen["command"],
        seen["output"],
        seen["returncode"],
        seen["task_id"],
        seen["env_type"],
    ) == ("echo secret", "secret\n", 0, "s1", "local")


def test_terminal_refuses_commands_naming_hermesd_files(reg: Registrations, home: Path) -> None:
    for command in (
        f"cat {home}/.env",
        "sqlite3 ~/somewhere/state.db .dump",
        "cat $HERMES_HOME/config.yaml",
    ):
        assert "Access denied" in reg.run("terminal", command=command)["error"], command


def test_terminal_validates_arguments(reg: Registrations) -> None:
    assert reg.run("terminal")["error"] == "'command' is required"
    assert "integer" in reg.run("terminal", command="true", timeout="soon")["error"]
    assert "between 1 and 600" in reg.run("terminal", command="true", timeout=0)["error"]


# -- files ------------------------------------------------------------------------------------


def test_read_file_pages_through_lines(reg: Registrations, work: Path) -> None:
    (work / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = reg.run("read_file", path="f.txt", offset=3, limit=4)
    assert out["content"] == "3|line 3\n4|line 4\n5|line 5\n6|line 6"
    assert (out["start_line"], out["end_line"], out["total_lines"], out["next_offset"]) == (
        3,
        6,
        10,
        7,
    )
    assert reg.run("read_file", path=str(work / "f.txt"), offset=7)["next_offset"] is None


def test_read_file_errors_are_results(reg: Registrations, work: Path) -> None:
    (work / "bin").write_bytes(b"\x00\x01binary")
    assert "binary" in reg.run("read_file", path="bin")["error"]
    assert "cannot read" in reg.run("read_file", path="missing.txt")["error"]
    assert "directory" in reg.run("read_file", path=".")["error"]
    assert reg.run("read_file")["error"] == "'path' is required"
    assert "between 1" in reg.run("read_file", path="bin", offset=0)["error"]


def test_write_file_creates_parents_and_appends(reg: Registrations, work: Path) -> None:
    out = reg.run("write_file", path="a/b/c.txt", content="hello\n")
    assert out == {"path": str((work / "a/b/c.txt").resolve()), "bytes_written": 6, "created": True}
    reg.run("write_file", path="a/b/c.txt", content="more\n", mode="append")
    assert (work / "a/b/c.txt").read_text() == "hello\nmore\n"
    assert "'content' is required" in reg.run("write_file", path="x")["error"]
    assert "'mode'" in reg.run("write_file", path="x", content="", mode="truncate")["error"]


@pytest.mark.parametrize("name", ["config.yaml", ".env", "state.db", "state.db-wal"])
def test_hermesd_files_are_refused(reg: Registrations, home: Path, work: Path, name: str) -> None:
    (work / "link").symlink_to(home / name)
    for path in (str(home / name), "link", f"{home}/../{home.name}/{name}"):
        for tool, args in (("read_file", {}), ("write_file", {"content": "x"})):
            out = reg.run(tool, path=path, **args)
            assert out["error"].startswith("Access denied"), (tool, path)
    assert (home / ".env").read_text() == "OPENAI_API_KEY=sk-secret\n"


def test_the_plugin_directory_can_be_read_but_not_written_without_approval(
    reg: Registrations, home: Path, work: Path
) -> None:
    plugin = home / "plugins" / "notes"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text("def register(ctx):\n    pass\n")
    (work / "elsewhere").symlink_to(home / "plugins")
    for path in (
        str(plugin / "__init__.py"),
        str(home / "plugins" / "new" / "__init__.py"),
        "elsewhere/notes/__init__.py",
        f"{home}/x/../plugins/planted.py",
    ):
        out = reg.run("write_file", path=path, content="import os  # planted\n")
        assert out["error"].startswith("BLOCKED: write_file to "), path
        assert "plugin directory" in out["error"] and "approval" in out["error"]
    folder = reg.run("write_file", path=str(home / "plugins"), content="")
    assert "is a directory" in folder["error"]
    assert (plugin / "__init__.py").read_text() == "def register(ctx):\n    pass\n"
    assert not (home / "plugins" / "new").exists()
    assert not (home / "plugins" / "planted.py").exists()
    assert "register" in reg.run("read_file", path=str(plugin / "__init__.py"))["content"]
    elsewhere = reg.run("write_file", path=str(home / "notes.txt"), content="fine\n")
    assert "state directory" in elsewhere["error"] and not (home / "notes.txt").exists()


def test_a_hard_link_to_a_protected_file_is_refused(
    reg: Registrations, home: Path, work: Path
) -> None:
    os.link(home / ".env", work / "innocent.txt")
    assert reg.run("read_file", path="innocent.txt")["error"].startswith("Access denied")


def test_search_files_by_glob_and_content(reg: Registrations, work: Path) -> None:
    (work / "src").mkdir()
    (work / "src" / "a.py").write_text("import os\nVALUE = 1\n")
    (work / "src" / "b.txt").write_text("value in text\n")
    (work / ".hidden.py").write_text("VALUE\n")
    names = [Path(m["path"]).name for m in reg.run("search_files", pattern="*.py")["matches"]]
    assert names == ["a.py"]
    hits = reg.run("search_files", contains="value")["matches"]
    assert [(Path(m["path"]).name, m["line"], m["text"]) for m in hits] == [
        ("a.py", 2, "VALUE = 1"),
        ("b.txt", 1, "value in text"),
    ]
    assert len(reg.run("search_files", include_hidden=True, pattern="*.py")["matches"]) == 2


def test_search_files_is_bounded(reg: Registrations, work: Path) -> None:
    for i in range(30):
        (work / f"f{i:02}.txt").write_text("x")
    out = reg.run("search_files", max_results=5)
    assert len(out["matches"]) == 5 and out["truncated"] is True
    assert "between 1 and 500" in reg.run("search_files", max_results=0)["error"]


def test_search_files_never_lists_hermesd_files(reg: Registrations, home: Path) -> None:
    out = reg.run("search_files", root=str(home), include_hidden=True, contains="sk-")
    assert out["matches"] == []
    listed = {
        Path(m["path"]).name
        for m in reg.run("search_files", root=str(home), include_hidden=True)["matches"]
    }
    assert not listed & {"config.yaml", ".env", "state.db"}


def test_session_search_finds_past_conversations(reg: Registrations, store: SessionStore) -> None:
    store.sessions.create(session_id="s1")  # the session the tool runs in (Registrations.run)
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "user", "remember the blue heron")
    out = reg.run("session_search", query="heron")
    [hit] = out["results"]
    assert hit["session_id"] == sid and "«heron»" in hit["snippet"] and hit["when"]
    assert reg.run("session_search", query='"AND (')["results"] == []
    assert reg.run("session_search")["error"] == "'query' is required"


def test_session_search_finds_nothing_when_its_sessions_owner_is_unknown(
    reg: Registrations, store: SessionStore
) -> None:
    sid = store.sessions.create()["id"]  # the tool runs in "s1", which does not exist
    store.messages.append(sid, "user", "remember the blue heron")
    assert reg.run("session_search", query="heron")["results"] == []


# -- through the real registry ------------------------------------------------------------------


def test_schemas_pass_the_registry_lint(reg: Registrations) -> None:
    from hermesd.tools.schema import lint_tools

    findings = lint_tools((n, t["toolset"], t["schema"]) for n, t in reg.tools.items())
    # 'terminal' and 'patch' keep the reference's names (plugins and hooks refer to them)
    assert [f"{f.tool}.{f.parameter}: {f.message}" for f in findings] == [
        "terminal.: name 'terminal' is not verb_noun (e.g. get_weather)",
        "patch.: name 'patch' is not verb_noun (e.g. get_weather)",
    ]


def test_tools_run_through_the_real_registry_pipeline(
    home: Path, work: Path, store: SessionStore
) -> None:
    from hermesd.runtime.hooks import HookBus
    from hermesd.tools.registry import ToolRegistry

    registry = ToolRegistry(HookBus())
    cfg = config.parse(f"terminal:\n  cwd: {work}\n")
    register_builtin_file_tools(registry, home=home, store=store, config=cfg)
    names = [t["function"]["name"] for t in registry.openai_tools()]
    assert sorted(names) == [
        "patch",
        "read_file",
        "search_files",
        "session_search",
        "terminal",
        "write_file",
    ]

    async def main() -> list[dict[str, Any]]:
        calls = [
            ("write_file", '{"path": "n.txt", "content": "hi"}'),
            ("read_file", '{"path": "n.txt"}'),
            ("terminal", '{"command": "cat n.txt"}'),
            ("read_file", json.dumps({"path": str(home / ".env")})),
        ]
        return [json.loads(await registry.call(n, a, session_id="s")) for n, a in calls]

    written, read, ran, refused = asyncio.run(main())
    assert written["bytes_written"] == 2 and read["content"] == "1|hi"
    assert ran == {"output": "hi", "exit_code": 0}
    assert refused["error"].startswith("Access denied")


# -- the workspace ------------------------------------------------------------------------------


def test_a_sessions_own_directory_is_its_workspace(
    reg: Registrations, store: SessionStore, work: Path, tmp_path: Path
) -> None:
    own = tmp_path / "own-project"
    own.mkdir()
    sid = store.sessions.create(cwd=str(own))["id"]
    write = reg.tools["write_file"]["handler"]
    out = json.loads(write({"path": "x.txt", "content": "hi"}, session_id=sid))
    assert out["path"] == str(own.resolve() / "x.txt")
    outside = json.loads(write({"path": str(work / "y.txt"), "content": "hi"}, session_id=sid))
    assert "outside the workspace" in outside["error"] and not (work / "y.txt").exists()
    other = json.loads(write({"path": "z.txt", "content": "hi"}, session_id="no-such-session"))
    assert other["path"] == str(work.resolve() / "z.txt")  # no session: terminal.cwd


def test_without_terminal_cwd_the_workspace_is_a_private_folder_in_hermes_home(
    home: Path, store: SessionStore
) -> None:
    r = Registrations()
    register_builtin_file_tools(r, home=home, store=store, config=config.parse(""))
    out = r.run("write_file", path="hello.txt", content="hi\n")
    assert out["path"] == str(home.resolve() / "workspace" / "hello.txt")
    assert (home / "workspace").stat().st_mode & 0o777 == 0o700
    escape = r.run("write_file", path="../config.yaml", content="approvals: {mode: 'off'}\n")
    assert escape["error"].startswith("Access denied")
    assert (home / "config.yaml").read_text() == "model: {}\n"


def test_a_missing_configured_workspace_is_a_clear_error(home: Path, tmp_path: Path) -> None:
    r = Registrations()
    missing = tmp_path / "not-there"
    register_builtin_file_tools(
        r, home=home, store=None, config=config.parse(f"terminal:\n  cwd: {missing}\n")
    )
    out = r.run("write_file", path="a.txt", content="x")
    assert out["error"].startswith(f"cannot write {missing / 'a.txt'}") and not missing.exists()
    assert "cannot read" in r.run("read_file", path="a.txt")["error"]
