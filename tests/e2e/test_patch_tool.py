"""The ``patch`` tool end to end: a scripted model edits real files in a real hermesd's workspace.

One daemon whose ``HOME`` is a temporary directory and whose workspace is a project folder in
it, approvals on with a one-second timeout (so a sensitive target nobody approves is denied).
Each test writes its own files, lets the model call ``patch`` in a turn, and checks the files on
disk and the JSON result the model read back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from tests.support.approvals import Background, client_answering
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call

CODE = "def area(w, h):\n    if w < 0:\n        raise ValueError(w)\n    return w * h\n"


@dataclass
class Box:
    daemon: DaemonProcess
    model: ScriptedModelServer
    home: Path
    project: Path


@pytest.fixture(scope="module")
def box(model: ScriptedModelServer) -> Iterator[Box]:
    base = short_tmpdir("pt-")
    home, hermes = base / "home", base / "hermes"
    project = home / "project"
    (project / ".git" / "hooks").mkdir(parents=True)
    hermes.mkdir()
    config = (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        f"terminal:\n  cwd: {project}\napprovals:\n  timeout: 1\n"
    )
    daemon = start_daemon(hermes, config=config, env={"HOME": str(home)})
    yield Box(daemon, model, home, project)
    daemon.stop()


def _turn(box: Box, caller: Client, *calls: Any) -> list[dict[str, Any]]:
    """One turn in which the model makes ``calls``; the parsed tool results it got back."""
    box.model.push(call_tools(*calls), reply("done"))
    seen = len(box.model.requests)
    sid = caller.call("session.create", {"attach": False})["id"]
    params = {"session_id": sid, "message": "edit it", "wait": True}
    result = caller.call("session.send", params, timeout=60)
    assert result["status"] == "completed", result
    last = box.model.requests[seen:][-1]
    return [json.loads(m["content"]) for m in last["messages"] if m["role"] == "tool"]


def _approved_turn(box: Box, call: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A turn whose approval a second client attached to the session answers "once"."""
    caller, _ = client_answering(box.daemon, None)
    owner, asked = client_answering(box.daemon, "once")
    with caller, owner:
        box.model.push(call_tools(call), reply("done"))
        seen = len(box.model.requests)
        sid = caller.call("session.create", {"attach": False})["id"]
        owner.call("session.attach", {"session_id": sid})
        params = {"session_id": sid, "message": "edit it", "wait": True}
        running = Background(caller.call, "session.send", params, timeout=60)
        while not running.done():
            owner.next_notification(timeout=0.05)
        assert running.result()["status"] == "completed"
    last = box.model.requests[seen:][-1]
    [result] = [json.loads(m["content"]) for m in last["messages"] if m["role"] == "tool"]
    return result, asked.requests


def _patch(box: Box, **args: Any) -> dict[str, Any]:
    caller, _ = client_answering(box.daemon, None)
    with caller:
        [result] = _turn(box, caller, tool_call("patch", args))
    return result


def test_an_exact_replace_edits_the_file_and_returns_a_diff(box: Box) -> None:
    target = box.project / "exact.py"
    target.write_text(CODE)
    result = _patch(
        box, mode="replace", path="exact.py", old_string="return w * h", new_string="return w*h"
    )
    assert result["success"] is True, result
    assert target.read_text() == CODE.replace("return w * h", "return w*h")
    assert result["files_modified"] == [str(target)]
    assert "--- a/exact.py" in result["diff"] and "+++ b/exact.py" in result["diff"]
    assert "-    return w * h\n" in result["diff"] and "+    return w*h\n" in result["diff"]


def test_a_replace_with_other_indentation_and_spacing_still_lands(box: Box) -> None:
    target = box.project / "fuzzy.py"
    target.write_text(CODE)
    result = _patch(
        box,
        mode="replace",
        path="fuzzy.py",
        old_string="if w  <  0:\n    raise ValueError(w)",
        new_string="if w < 0:\n    raise ValueError(f'negative width {w}')",
    )
    assert result["success"] is True, result
    assert target.read_text() == (
        "def area(w, h):\n    if w < 0:\n        raise ValueError(f'negative width {w}')\n"
        "    return w * h\n"
    )


def test_a_failed_match_is_a_clear_error_and_the_file_is_untouched(box: Box) -> None:
    target = box.project / "nomatch.py"
    target.write_text(CODE)
    result = _patch(
        box, mode="replace", path="nomatch.py", old_string="return w + h", new_string="x"
    )
    assert result["success"] is False and "not found" in result["error"], result
    assert "the closest line is 4|    return w * h" in result["error"]
    assert target.read_text() == CODE


def test_an_ambiguous_match_is_refused_unless_replace_all(box: Box) -> None:
    target = box.project / "twice.txt"
    target.write_text("x = a\nx = a\n")
    result = _patch(box, mode="replace", path="twice.txt", old_string="= a", new_string="= b")
    assert result["success"] is False and "matches 2 places" in result["error"], result
    assert target.read_text() == "x = a\nx = a\n"
    result = _patch(
        box, mode="replace", path="twice.txt", old_string="= a", new_string="= b", replace_all=True
    )
    assert result["success"] is True and target.read_text() == "x = b\nx = b\n"


def test_crlf_line_endings_are_kept(box: Box) -> None:
    target = box.project / "dos.txt"
    target.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = _patch(box, mode="replace", path="dos.txt", old_string="two\nthree", new_string="2\n3")
    assert result["success"] is True, result
    assert target.read_bytes() == b"one\r\n2\r\n3\r\n"


def test_a_file_outside_the_workspace_nobody_approves_is_not_touched(box: Box) -> None:
    target = box.home / "elsewhere.txt"
    target.write_text("keep me\n")
    result = _patch(box, mode="replace", path=str(target), old_string="keep me", new_string="owned")
    assert "BLOCKED" in result["error"], result
    assert target.read_text() == "keep me\n"


def test_a_run_on_entry_file_is_asked_about_and_patched_once_approved(box: Box) -> None:
    tasks = box.project / ".vscode" / "tasks.json"
    tasks.parent.mkdir()
    tasks.write_text('{"cmd": "make"}\n')
    args = {
        "mode": "replace",
        "path": ".vscode/tasks.json",
        "old_string": "make",
        "new_string": "x",
    }
    denied = _patch(box, **args)
    assert "BLOCKED" in denied["error"] and tasks.read_text() == '{"cmd": "make"}\n'
    result, asked = _approved_turn(box, tool_call("patch", args))
    assert result["success"] is True, result
    assert tasks.read_text() == '{"cmd": "x"}\n'
    [request] = asked
    assert request["tool"] == "patch" and str(tasks) in request["description"]


def test_a_file_read_file_refuses_is_refused_without_asking(box: Box) -> None:
    envrc = box.project / ".env"
    envrc.write_text("TOKEN=abc\n")
    result, asked = _approved_turn(
        box,
        tool_call(
            "patch", {"mode": "replace", "path": ".env", "old_string": "abc", "new_string": "x"}
        ),
    )
    assert result["error"].startswith("Access denied"), result
    assert asked == [] and envrc.read_text() == "TOKEN=abc\n"


def test_git_hooks_are_refused(box: Box) -> None:
    hook = box.project / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    result = _patch(
        box, mode="replace", path=str(hook), old_string="exit 0", new_string="curl x | sh"
    )
    assert result["error"].startswith("Access denied") and "tools may not write" in result["error"]
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"


def test_a_multi_file_patch_adds_updates_deletes_and_moves(box: Box) -> None:
    (box.project / "multi").mkdir()
    (box.project / "multi" / "app.py").write_text(CODE)
    (box.project / "multi" / "old.txt").write_text("obsolete\n")
    (box.project / "multi" / "from.txt").write_text("moving\n")
    patch = (
        "*** Begin Patch\n"
        "*** Update File: multi/app.py\n"
        "@@ def area\n"
        "     if w < 0:\n"
        "-        raise ValueError(w)\n"
        "+        return 0\n"
        "*** Add File: multi/new/util.py\n"
        "+def twice(x):\n"
        "+    return 2 * x\n"
        "*** Delete File: multi/old.txt\n"
        "*** Move File: multi/from.txt -> multi/to.txt\n"
        "*** End Patch\n"
    )
    result = _patch(box, mode="patch", patch=patch)
    assert result["success"] is True, result
    multi = box.project / "multi"
    assert (multi / "app.py").read_text() == CODE.replace("raise ValueError(w)", "return 0")
    assert (multi / "new" / "util.py").read_text() == "def twice(x):\n    return 2 * x\n"
    assert not (multi / "old.txt").exists() and not (multi / "from.txt").exists()
    assert (multi / "to.txt").read_text() == "moving\n"
    assert result["files_created"] == [str(multi / "new" / "util.py"), str(multi / "to.txt")]
    assert result["files_modified"] == [str(multi / "app.py")]
    assert result["files_deleted"] == [str(multi / "old.txt"), str(multi / "from.txt")]
    assert "+++ b/multi/new/util.py" in result["diff"] and "--- /dev/null" in result["diff"]
    assert "-        raise ValueError(w)" in result["diff"]


def test_a_patch_with_one_bad_hunk_changes_no_file(box: Box) -> None:
    (box.project / "atomic").mkdir()
    first, second = box.project / "atomic" / "a.txt", box.project / "atomic" / "b.txt"
    first.write_text("alpha\n")
    second.write_text("beta\n")
    patch = (
        "*** Begin Patch\n*** Update File: atomic/a.txt\n-alpha\n+ALPHA\n"
        "*** Update File: atomic/b.txt\n-gamma\n+GAMMA\n"
        "*** Delete File: atomic/a.txt\n*** End Patch\n"
    )
    result = _patch(box, mode="patch", patch=patch)
    assert result["success"] is False and "hunk 1" in result["error"], result
    assert "b.txt" in result["error"]
    assert first.read_text() == "alpha\n" and second.read_text() == "beta\n"


def test_a_patch_naming_a_file_outside_the_workspace_changes_nothing(box: Box) -> None:
    inside = box.project / "inside.txt"
    inside.write_text("in\n")
    outside = box.home / "outside.txt"
    outside.write_text("out\n")
    patch = (
        "*** Begin Patch\n*** Update File: inside.txt\n-in\n+IN\n"
        f"*** Update File: {outside}\n-out\n+OUT\n*** End Patch\n"
    )
    result = _patch(box, mode="patch", patch=patch)
    assert "BLOCKED" in result["error"], result
    assert inside.read_text() == "in\n" and outside.read_text() == "out\n"


def test_a_binary_file_is_refused(box: Box) -> None:
    target = box.project / "blob.bin"
    target.write_bytes(b"abc\x00def")
    result = _patch(box, mode="replace", path="blob.bin", old_string="abc", new_string="x")
    assert result["success"] is False and "binary" in result["error"], result
    assert target.read_bytes() == b"abc\x00def"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"mode": "replace", "path": "exact.py", "old_string": 3, "new_string": "x"}, "old_string"),
        ({"mode": "replace", "path": "exact.py", "old_string": "x"}, "new_string"),
        ({"mode": "sideways", "patch": "x"}, "mode"),
        ({"mode": "patch", "patch": "just words"}, "patch"),
        ({"mode": "patch"}, "patch"),
        (
            {"mode": "replace", "path": "big.txt", "old_string": "x" * (6 << 20), "new_string": ""},
            "longer than",
        ),
    ],
)
def test_bad_arguments_get_a_clear_error(box: Box, args: dict[str, Any], words: str) -> None:
    result = _patch(box, **args)
    assert words in result["error"], result
    assert not (box.project / "big.txt").exists()


def _read(box: Box, **args: Any) -> dict[str, Any]:
    caller, _ = client_answering(box.daemon, None)
    with caller:
        [result] = _turn(box, caller, tool_call("read_file", args))
    return result


def test_read_file_numbers_lines_and_pages_with_offset_and_limit(box: Box) -> None:
    (box.project / "pages.txt").write_text("".join(f"row {i}\n" for i in range(1, 21)))
    page = _read(box, path="pages.txt", offset=5, limit=3)
    assert page["content"] == "5|row 5\n6|row 6\n7|row 7"
    assert (page["start_line"], page["end_line"], page["total_lines"]) == (5, 7, 20)
    assert page["next_offset"] == 8
    assert _read(box, path="pages.txt", offset=19)["next_offset"] is None


def test_read_file_stops_a_huge_page_on_a_line_boundary(box: Box) -> None:
    long_line = "y" * 1500
    (box.project / "wide.txt").write_text(f"{long_line}\n" * 200 + "z" * 5000 + "\n")
    page = _read(box, path="wide.txt", limit=5000)
    assert len(page["content"]) <= 100_000
    assert page["truncated"] is True and page["next_offset"] == page["end_line"] + 1
    assert page["content"].split("\n")[-1] == f"{page['end_line']}|{long_line}"
    seen = page["content"].count("\n") + 1
    while page["next_offset"] is not None:
        page = _read(box, path="wide.txt", offset=page["next_offset"], limit=5000)
        seen += page["content"].count("\n") + 1
    assert seen == 201 and page["end_line"] == 201
    assert page["content"].endswith("201|" + "z" * 2000 + "... [truncated]")


def test_read_file_offset_below_one_is_refused(box: Box) -> None:
    (box.project / "small.txt").write_text("a\n")
    assert "offset" in _read(box, path="small.txt", offset=-3)["error"]


def test_a_hunk_matches_whole_lines_not_part_of_a_longer_one(box: Box) -> None:
    target = box.project / "lines.txt"
    target.write_text("limit = 100\nlimit = 10\n")
    patch = "*** Begin Patch\n*** Update File: lines.txt\n-limit = 10\n+limit = 20\n*** End Patch\n"
    result = _patch(box, mode="patch", patch=patch)
    assert result["success"] is True, result
    assert target.read_text() == "limit = 100\nlimit = 20\n"


def test_an_update_with_move_to_renames_and_edits(box: Box) -> None:
    source = box.project / "draft.md"
    source.write_text("# Draft\nbody\n")
    patch = (
        "*** Begin Patch\n*** Update File: draft.md\n*** Move to: final.md\n"
        "-# Draft\n+# Final\n body\n*** End Patch\n"
    )
    result = _patch(box, mode="patch", patch=patch)
    assert result["success"] is True, result
    assert not source.exists() and (box.project / "final.md").read_text() == "# Final\nbody\n"
    assert result["files_created"] == [str(box.project / "final.md")]
    assert result["files_deleted"] == [str(source)]


def test_the_hunk_hint_picks_among_repeated_lines(box: Box) -> None:
    target = box.project / "repeat.py"
    target.write_text("def a():\n    return None\n\ndef b():\n    return None\n")
    patch = (
        "*** Begin Patch\n*** Update File: repeat.py\n@@ def b\n"
        "-    return None\n+    return 2\n*** End Patch\n"
    )
    unhinted = patch.replace("@@ def b\n", "")
    refused = _patch(box, mode="patch", patch=unhinted)
    assert refused["success"] is False and "match 2 places" in refused["error"], refused
    result = _patch(box, mode="patch", patch=patch)
    assert result["success"] is True, result
    assert target.read_text() == "def a():\n    return None\n\ndef b():\n    return 2\n"
