"""A hostile model aims write_file at the daemon's own state: the figure for docs/reliability.md.

The daemon runs with its default workspace, ``$HERMES_HOME/workspace`` (the layout where the
state is one ``..`` away), a temporary ``HOME`` and a client that answers "deny" to whatever is
asked. The model tries every target under ``$HERMES_HOME`` (config, secrets, database, plugin
code, skills, memories) in every spelling (absolute, ``..`` from the workspace, a symlinked
directory, a symlinked file, a hard link), overwriting and appending, then again through a path a
thread keeps swapping with a symlink. Each attempt writes a unique marker; afterwards no file of
the state holds one and the database is intact. Printed: "writes to the daemon's state from a
tool: 0 of N attempts".
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.approvals import client_answering
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, ToolCall, call_tools, reply, tool_call
from tests.support.swap import Flipper

STATE = [
    "config.yaml",
    ".env",
    "state.db",
    "state.db-wal",
    "plugins/planted/__init__.py",
    "plugins/existing/__init__.py",
    "skills/demo/SKILL.md",
    "memories/MEMORY.md",
]


@pytest.fixture(scope="module")
def daemon(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    base = short_tmpdir("fs-")
    home = base / "hermes"
    (home / "plugins" / "existing").mkdir(parents=True)
    (home / "plugins" / "existing" / "__init__.py").write_text("def register(ctx):\n    pass\n")
    (home / "skills" / "demo").mkdir(parents=True)
    (home / "skills" / "demo" / "SKILL.md").write_text("---\nname: demo\n---\n# demo\n")
    (home / "memories").mkdir()
    (home / "memories" / "MEMORY.md").write_text("remember\n")
    (home / ".env").write_text("OPENAI_API_KEY=sk-test-not-real\n")
    (base / "user").mkdir()
    config = (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\napprovals:\n  timeout: 5\n"
    )
    daemon = start_daemon(home, config=config, env={"HOME": str(base / "user")})
    yield daemon
    daemon.stop()


def _spellings(home: Path, workspace: Path) -> list[str]:
    """Every path the model tries, all meaning a file of the daemon's state."""
    (workspace / "homelink").symlink_to(home)
    paths: list[str] = []
    for i, rel in enumerate(STATE):
        target = home / rel
        paths += [str(target), f"../{rel}", f"{workspace}/../{rel}", f"homelink/{rel}"]
        link = workspace / f"link-{i}"
        link.symlink_to(target)
        paths.append(link.name)
        if target.is_file():
            os.link(target, workspace / f"hard-{i}")
            paths.append(f"hard-{i}")
    return paths


def _turn(daemon: DaemonProcess, model: ScriptedModelServer, calls: list[ToolCall]) -> list[str]:
    model.push(call_tools(*calls), reply("done"))
    seen = len(model.requests)
    client, _ = client_answering(daemon, "deny")
    with client:
        sid = client.call("session.create", {"attach": False})["id"]
        params = {"session_id": sid, "message": "take over", "wait": True}
        assert client.call("session.send", params, timeout=300)["status"] == "completed"
    return [m["content"] for m in model.requests[seen:][-1]["messages"] if m["role"] == "tool"]


def _markers_in_state(home: Path) -> set[str]:
    """The attempt markers found in any file of the state (the workspace and database aside:
    the database keeps the model's calls, markers included, as conversation history)."""
    found: set[str] = set()
    for path in home.rglob("*"):
        inside_workspace = path.is_relative_to(home / "workspace")
        if inside_workspace or path.name.startswith("state.db") or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        found.update(word for word in text.split() if word.startswith("PWNED-"))
    return found


def test_writes_to_the_daemon_state_from_a_tool(
    daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    home = daemon.home
    workspace = home / "workspace"
    workspace.mkdir(mode=0o700, exist_ok=True)  # the daemon makes it at its first file call
    paths = _spellings(home, workspace)
    calls, n = [], 0
    for path in paths:
        for mode in ("overwrite", "append"):
            calls.append(
                tool_call("write_file", {"path": path, "content": f"PWNED-{n}\n", "mode": mode})
            )
            n += 1
    results = _turn(daemon, model, calls)
    assert len(results) == len(calls)

    # the same through a path that is a real directory one instant and a symlink the next
    (workspace / "race" / "d").mkdir(parents=True)
    (workspace / "race" / "twin").symlink_to(home)
    race_calls = []
    for _ in range(60):
        race_calls.append(
            tool_call("write_file", {"path": "race/d/config.yaml", "content": f"PWNED-{n}\n"})
        )
        n += 1
    with Flipper(workspace / "race" / "d", workspace / "race" / "twin") as flipper:
        race_results = _turn(daemon, model, race_calls)
    assert flipper.flips > 0 and len(race_results) == 60

    leaked = _markers_in_state(home)
    db_written = [
        (path, result)
        for path, result in zip([p for p in paths for _ in (0, 1)], results, strict=True)
        if "state.db" in path and "bytes_written" in result
    ]
    with sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    attempts = len(calls) + len(race_calls)
    writes = len(leaked) + len(db_written)
    refused = sum(1 for r in results + race_results if "Access denied" in r)
    denied = sum(1 for r in results + race_results if "denied by user" in r)
    print(
        f"\nwrites to the daemon's state from a tool: {writes} of {attempts} attempts "
        f"({refused} refused outright, {denied} asked and denied, the rest failed or wrote "
        f"inside the workspace; {flipper.flips} symlink swaps during the race)"
    )
    assert writes == 0, (leaked, db_written)
    assert daemon.call("ping") is not None
    assert json.loads(results[0])["error"].startswith("Access denied")
