"""Published memory providers, installed their own way into a test-only home and selected with
``memory.provider``: hermes-local-memory 0.3.1 (its ``install-shim`` writes
plugins/local_memory/__init__.py, which puts the package from the corpus cache on sys.path) and
hermes-brain-memory 0.1.0 (its ``install`` copies plugins/brain/; its ``brain`` CLI is not
installed here, so it is unavailable). Packages come from the plugin corpus cache
(`tests.support.corpus`); without the package registry the tests skip.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_memory_providers import _send, _wait_for
from tests.e2e.test_plugin_corpus import provider_listing
from tests.support import corpus
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir, start_daemon
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)

ENTRIES = {e["provider"]: e for e in corpus.memory_providers()}


def _daemon(model: ScriptedModelServer, provider: str) -> DaemonProcess:
    root = short_tmpdir("pub-")
    home = root / ".hermes"
    home.mkdir(parents=True)
    try:
        corpus.install_provider(ENTRIES[provider], home)
    except corpus.Unreachable as exc:
        pytest.skip(f"package registry unreachable: {exc}")
    config = model_config(model.url) + f"memory:\n  provider: {provider}\n"
    return start_daemon(home, config=config, env={"HOME": str(root)}, timeout=60)


@pytest.fixture(scope="module")
def local(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    daemon = _daemon(model, "local_memory")
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def brain(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    daemon = _daemon(model, "brain")
    yield daemon
    daemon.stop()


def _rows(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql, args))


def test_local_memory_is_found_from_its_shim_and_available(local: DaemonProcess) -> None:
    assert (local.home / "plugins" / "local_memory" / "__init__.py").is_file()
    assert not (local.home / "plugins" / "local_memory" / "plugin.yaml").exists()
    row = provider_listing(local, "local_memory")
    assert row["line"] == "✓ local_memory (memory provider, user, active, available)"


def test_local_memory_stores_the_turn_and_recalls_a_fact_into_the_request_only(
    local: DaemonProcess, model: ScriptedModelServer
) -> None:
    db = local.home / "memory" / "local_memory.sqlite"
    with local.client() as c:
        sid = c.call("session.create")["id"]
        model.push(
            call_tools(
                tool_call(
                    "memory_conclude",
                    {"content": "The user's cat is called Miso", "kind": "personal"},
                )
            ),
            reply("I will remember Miso."),
        )
        seen = len(model.requests)
        _send(c, sid, "My cat is called Miso, please remember")
        tool = [m for m in model.requests[seen + 1]["messages"] if m["role"] == "tool"][-1]
        assert json.loads(tool["content"])["success"] is True
        # sync_turn (which takes no messages=) stored the turn in the provider's own SQLite
        stored = _wait_for(
            lambda: _rows(db, "SELECT role, content FROM messages WHERE session_id = ?", sid),
            "the turn in local_memory.sqlite",
        )
        assert ("user", "My cat is called Miso, please remember") in stored
        assert ("assistant", "I will remember Miso.") in stored

        model.push(reply("Your cat is Miso."))
        seen = len(model.requests)
        _send(c, sid, "What is my cat called?")
        user = [m for m in model.requests[seen]["messages"] if m["role"] == "user"][-1]
        assert user["content"].startswith("What is my cat called?\n\n<memory-context>\n")
        assert "# Local Memory" in user["content"]
        assert "The user's cat is called Miso" in user["content"]
        history = c.call("session.history", {"session_id": sid})["messages"]
    assert not any("<memory-context>" in str(m.get("content")) for m in history)
    assert "Local Memory" not in (local.home / "state.db").read_bytes().decode("latin-1")


def test_local_memory_tools_are_offered_with_its_prompt_block(
    local: DaemonProcess, model: ScriptedModelServer
) -> None:
    with local.client() as c:
        sid = c.call("session.create")["id"]
        model.push(reply("Hello."))
        seen = len(model.requests)
        _send(c, sid, "hello there, how are things")
    request = model.requests[seen]
    names = [t["function"]["name"] for t in request["tools"]]
    assert {"memory_get_card", "memory_search", "memory_conclude"} <= set(names)
    [system] = [m for m in request["messages"] if m["role"] == "system"]
    assert "# Local Memory\nActive. Use memory_get_card" in system["content"]


def test_brain_without_its_cli_is_listed_unavailable_and_never_used(
    brain: DaemonProcess, model: ScriptedModelServer
) -> None:
    row = provider_listing(brain, "brain")
    assert row["line"] == (
        "✗ brain (memory provider, user, active) — unavailable: is_available() returned False"
    )
    with brain.client() as c:
        sid = c.call("session.create")["id"]
        model.push(reply("Fine."))
        seen = len(model.requests)
        _send(c, sid, "remember that I like hiking")
    names = [t["function"]["name"] for t in model.requests[seen]["tools"]]
    assert not any(n.startswith("brain_") for n in names)
    user = [m for m in model.requests[seen]["messages"] if m["role"] == "user"][-1]
    assert user["content"] == "remember that I like hiking"
    assert "Memory provider 'brain' is not available" in brain.log()
    assert not (brain.home.parent / ".brain").exists()  # it wrote nothing


def test_brains_cli_py_is_hermesctl_brain(brain: DaemonProcess) -> None:
    provider_listing(brain, "brain")
    done = run_hermesctl(["--socket", str(brain.socket), "brain", "status"])
    assert done.returncode == 0, done.stderr
    assert "brain CLI     : NOT FOUND (npm install -g brain-memory)" in done.stdout


def test_brain_setup_drives_its_schema_and_save_config(brain: DaemonProcess) -> None:
    done = run_hermesctl(
        ["--socket", str(brain.socket), "memory", "setup", "brain", "--set", "project=tests"],
        input="",
    )
    assert done.returncode == 0, done.stderr
    saved = json.loads((brain.home / "brain.json").read_text())  # written by its save_config
    assert saved == {
        "project": "tests",
        "top_recall": 6,
        "auto_reinforce": True,
        "brain_bin": "brain",
        "sync_on_memorize": False,
    }
    env = (brain.home / ".env").read_text()
    assert 'BRAIN_PROJECT="tests"' in env  # its fields name env vars, as the reference writes
