"""``skill_manage`` end to end: the scripted model writes a skill in one turn and loads it with
``skill_view`` in the next; a script it adds is asked about (denied: nothing written; approved:
written); every write reaches attached clients as ``skill.changed``; bad input is refused with a
clear error and changes nothing; the bundled calculator plugin's skill stays read-only.

One daemon (approvals on, one-second timeout: a question nobody answers is denied)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from tests.support.approvals import Background, client_answering
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call

SKILL = (
    "---\nname: {name}\ndescription: Release the project the way we agreed\n---\n\n"
    "# Release\n\n1. Run the tests.\n2. Tag the commit.\n"
)


@dataclass
class Box:
    daemon: DaemonProcess
    model: ScriptedModelServer
    skills: Path


@pytest.fixture(scope="module")
def box(model: ScriptedModelServer) -> Iterator[Box]:
    hermes = short_tmpdir("sm-")
    config = (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\napprovals:\n  timeout: 1\n"
    )
    daemon = start_daemon(hermes, config=config)
    yield Box(daemon, model, hermes / "skills")
    daemon.stop()


def _results(box: Box, seen: int) -> list[dict[str, Any]]:
    last = box.model.requests[seen:][-1]
    return [json.loads(m["content"]) for m in last["messages"] if m["role"] == "tool"]


def _turn(box: Box, caller: Client, sid: str, *calls: Any) -> list[dict[str, Any]]:
    """One turn of ``sid`` in which the model makes ``calls``; the results it read back."""
    box.model.push(call_tools(*calls), reply("done"))
    seen = len(box.model.requests)
    params = {"session_id": sid, "message": "go", "wait": True}
    result = caller.call("session.send", params, timeout=60)
    assert result["status"] == "completed", result
    return _results(box, seen)


def _manage(box: Box, **args: Any) -> dict[str, Any]:
    caller, _ = client_answering(box.daemon, None)
    with caller:
        sid = caller.call("session.create", {"attach": False})["id"]
        [result] = _turn(box, caller, sid, tool_call("skill_manage", args))
    return result


def _answered_turn(box: Box, choice: str, call: Any) -> tuple[dict[str, Any], list[Any]]:
    """A turn whose approval a second client attached to the session answers ``choice``."""
    caller, _ = client_answering(box.daemon, None)
    owner, asked = client_answering(box.daemon, choice)
    with caller, owner:
        box.model.push(call_tools(call), reply("done"))
        seen = len(box.model.requests)
        sid = caller.call("session.create", {"attach": False})["id"]
        owner.call("session.attach", {"session_id": sid})
        params = {"session_id": sid, "message": "go", "wait": True}
        running = Background(caller.call, "session.send", params, timeout=60)
        while not running.done():
            owner.next_notification(timeout=0.05)
        assert running.result()["status"] == "completed"
    [result] = _results(box, seen)
    return result, asked.requests


def _create(box: Box, name: str) -> None:
    assert _manage(box, action="create", name=name, content=SKILL.format(name=name))["success"]


def test_a_skill_written_in_one_turn_is_used_by_the_next(box: Box) -> None:
    caller = box.daemon.client()
    with caller:
        sid = caller.call("session.create")["id"]  # attached: it gets the session's events
        content = SKILL.format(name="release")
        [made] = _turn(
            box,
            caller,
            sid,
            tool_call("skill_manage", {"action": "create", "name": "release", "content": content}),
        )
        assert made["success"] is True and made["path"] == "release", made
        assert (box.skills / "release" / "SKILL.md").read_text() == content
        changed = []
        while (note := caller.next_notification(timeout=0.2)) is not None:
            if note.method == "session.event" and note.params[0]["type"] == "skill.changed":
                changed.append(note.params[0])
        assert [(e["action"], e["name"]) for e in changed] == [("create", "release")]
        listed, viewed = _turn(
            box,
            caller,
            sid,
            tool_call("skills_list", {}),
            tool_call("skill_view", {"name": "release"}),
        )[-2:]  # the request carries the session's earlier tool results too
    assert "release" in [s["name"] for s in listed["skills"]]
    assert viewed["success"] is True and viewed["content"] == content


def test_patch_edit_and_reference_files_change_the_skill_without_asking(box: Box) -> None:
    _create(box, "patched")
    folder = box.skills / "patched"
    result, asked = _answered_turn(
        box,
        "deny",  # a question would be denied: none may be asked for a reference file
        tool_call(
            "skill_manage",
            {
                "action": "write_file",
                "name": "patched",
                "file_path": "references/notes.md",
                "file_content": "use --signed\n",
            },
        ),
    )
    assert result["success"] is True and asked == []
    assert (folder / "references" / "notes.md").read_text() == "use --signed\n"
    result = _manage(
        box, action="patch", name="patched", old_string="Tag the commit.", new_string="Sign it."
    )
    assert result["success"] is True, result
    assert "2. Sign it." in (folder / "SKILL.md").read_text()
    removed = _manage(box, action="remove_file", name="patched", file_path="references/notes.md")
    assert removed["success"] is True and not (folder / "references").exists()
    assert _manage(box, action="delete", name="patched")["success"] is True
    assert not folder.exists()


def _script_call() -> Any:
    return tool_call(
        "skill_manage",
        {
            "action": "write_file",
            "name": "scripted",
            "file_path": "scripts/release.sh",
            "file_content": "#!/bin/sh\ngit tag v1\n",
        },
    )


def test_a_script_is_asked_about_and_not_written_when_denied(box: Box) -> None:
    _create(box, "scripted")
    result, asked = _answered_turn(box, "deny", _script_call())
    assert result.get("success") is not True, result
    assert len(asked) == 1 and "scripts/release.sh" in json.dumps(asked[0])
    assert "git tag v1" in json.dumps(asked[0])  # the person sees what would be written
    assert not (box.skills / "scripted" / "scripts").exists()


def test_a_script_is_written_once_approved(box: Box) -> None:
    if not (box.skills / "scripted").exists():
        _create(box, "scripted")
    result, asked = _answered_turn(box, "once", _script_call())
    assert result["success"] is True, result
    assert len(asked) == 1
    assert (box.skills / "scripted" / "scripts" / "release.sh").read_text().endswith("v1\n")


BAD = [
    ({"action": "create", "name": 5, "content": "x"}, "name"),
    ({"action": "create", "name": "../escape", "content": SKILL.format(name="e")}, "invalid"),
    ({"action": "create", "name": "a/b", "content": SKILL.format(name="e")}, "invalid"),
    ({"action": "create", "name": "nofront", "content": "# just text\n"}, "front matter"),
    ({"action": "create", "name": "unclosed", "content": "---\nname: x\n"}, "not closed"),
    ({"action": "create", "name": "nodesc", "content": "---\nname: x\n---\nbody\n"}, "description"),
    ({"action": "create", "name": "badyaml", "content": "---\n: [\n---\nbody\n"}, "yaml"),
    (
        {"action": "create", "name": "huge", "content": SKILL.format(name="h") + "x" * 100_001},
        "limit",
    ),
    ({"action": "create", "name": "typed", "content": ["list"]}, "string"),
    ({"action": "create", "name": "math-checks", "content": SKILL.format(name="m")}, "plugin"),
    ({"action": "edit", "name": "calculator:math-checks", "content": "x"}, "read-only"),
    ({"action": "launch", "name": "x"}, "action"),
    ({"action": "edit", "name": "nosuchskill", "content": SKILL.format(name="n")}, "not found"),
]


@pytest.mark.parametrize(("args", "words"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_refused_clearly_and_writes_nothing(
    box: Box, args: dict[str, Any], words: str
) -> None:
    before = sorted(p.name for p in box.skills.iterdir()) if box.skills.exists() else []
    result = _manage(box, **args)
    assert result["success"] is False and words in result["error"].lower(), result
    after = sorted(p.name for p in box.skills.iterdir()) if box.skills.exists() else []
    assert after == before


@pytest.mark.parametrize(
    "file_path", ["../../outside.md", "/etc/passwd", "scripts", "bin/run.sh", "references/../x"]
)
def test_a_file_path_leaving_the_skill_layout_is_refused(box: Box, file_path: str) -> None:
    if not (box.skills / "paths").exists():
        _create(box, "paths")
    result = _manage(box, action="write_file", name="paths", file_path=file_path, file_content="x")
    assert result["success"] is False and "file_path" in result["error"], result
    assert sorted(p.name for p in (box.skills / "paths").iterdir()) == ["SKILL.md"]


def test_a_patch_that_would_break_the_front_matter_is_refused(box: Box) -> None:
    if not (box.skills / "guarded").exists():
        _create(box, "guarded")
    before = (box.skills / "guarded" / "SKILL.md").read_text()
    result = _manage(
        box, action="patch", name="guarded", old_string="description: Release", new_string="x"
    )
    assert result["success"] is False and "break SKILL.md" in result["error"], result
    assert (box.skills / "guarded" / "SKILL.md").read_text() == before


def test_a_symlink_out_of_the_skill_is_not_followed(box: Box, tmp_path: Path) -> None:
    if not (box.skills / "linked").exists():
        _create(box, "linked")
    outside = tmp_path / "outside"
    outside.mkdir()
    (box.skills / "linked" / "references").symlink_to(outside)
    result = _manage(
        box, action="write_file", name="linked", file_path="references/x.md", file_content="x"
    )
    assert result["success"] is False and "outside" in result["error"], result
    assert list(outside.iterdir()) == []


def test_hermesctl_chat_prints_each_skill_change(box: Box) -> None:
    content = SKILL.format(name="chatty")
    box.model.push(
        call_tools(
            tool_call("skill_manage", {"action": "create", "name": "chatty", "content": content})
        ),
        reply("saved"),
    )
    out = run_hermesctl(
        ["--socket", str(box.daemon.socket), "chat", "-m", "remember this"],
        env={"HERMES_HOME": str(box.daemon.home)},
        input="",
    )
    assert out.returncode == 0, out.stderr
    assert "📝 skill: Skill 'chatty' created." in out.stdout + out.stderr
