"""Published Hermes plugins do at least what they do in the reference (docs/plugins.md, "The
plugin corpus").

Each plugin of tests/data/plugin_corpus/corpus.json is installed (pinned, with its
dependencies, into a test-only cache folder: `tests.support.corpus`), loaded alone in a real
hermesd from its entry point, and compared with its recording from hermes-agent 0.19.0: every
tool, hook, middleware kind, slash command, CLI command and skill the reference registered is
registered in hermesd too, and the representative call (a turn against the scripted model, or
a slash command) gives the reference's answer and leaves at least the files the plugin left
there. Without the package registry the tests skip, saying so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import corpus
from tests.support.daemon import (
    DaemonProcess,
    checkout_pythonpath,
    send_and_follow,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import ScriptedModelServer, calculator_rules

ENTRIES = corpus.entries()
KINDS = ("tools", "hooks", "middleware", "commands", "cli_commands", "skills")


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=calculator_rules) as server:
        yield server


def home_files(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for p in home.rglob("*") if p.is_file()}


def run_probe(daemon: DaemonProcess, entry: dict[str, Any]) -> dict[str, Any]:
    probe = entry["probe"]
    with daemon.client(timeout=60) as c:
        sid = c.call("session.create")["id"]
        if probe["kind"] == "turn":
            events = send_and_follow(c, sid, probe["message"], timeout=60)
            finished = events[-1]
            if finished["status"] != "completed":
                return {"error": f"{finished['error_type']}: {finished['error']}"}
            return {"output": finished["final_text"]}
        if probe["kind"] == "command":
            out = c.call("command.run", {"line": probe["line"], "session_id": sid})
            return {"output": out.get("output")}
    raise AssertionError(f"unknown probe {probe}")


def compare(
    entry: dict[str, Any],
    ref: dict[str, Any],
    listed: dict[str, Any],
    probe: dict[str, Any],
    files: list[str],
) -> list[str]:
    """What hermesd does less than the reference did; empty when it does at least as much."""
    less: list[str] = []
    if ref["loaded"] and listed["state"] != "loaded":
        less.append(f"not loaded: {listed['reason']}")
    for kind in KINDS:
        missing = set(ref[kind]) - set(listed.get(kind) or [])
        if missing:
            less.append(f"{kind} missing: {sorted(missing)}")
    if "output" in ref["probe"]:
        if probe.get("output") != ref["probe"]["output"]:
            less.append(f"probe answered {probe!r}, the reference {ref['probe']!r}")
    elif "error" in probe:
        less.append(f"probe failed: {probe['error']}")
    missing_files = set(ref["files_after_probe"]) - set(files) - set(entry.get("timed_files", []))
    if missing_files:
        less.append(f"files not written: {sorted(missing_files)}")
    return less


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_plugin_does_at_least_what_it_does_in_the_reference(
    entry: dict[str, Any], model: ScriptedModelServer
) -> None:
    try:
        target = corpus.install(entry)
    except corpus.Unreachable as exc:
        pytest.skip(f"package registry unreachable: {exc}")
    ref = corpus.recording(entry["name"])
    root = short_tmpdir("pc-")  # HOME; HERMES_HOME is its .hermes, as in the recording
    home = root / ".hermes"
    home.mkdir(parents=True)
    if "install" in entry:  # no entry point: its own command puts the plugin in place
        corpus.run_install_command(entry, home, target)
    env = {"PYTHONPATH": checkout_pythonpath(str(target)), "HOME": str(root)}
    daemon = start_daemon(home, config=corpus.config_for(entry, model.url), env=env, timeout=60)
    try:
        listed = {p["key"]: p for p in daemon.call("plugins.list")["plugins"]}[entry["key"]]
        before = home_files(home)
        probe = run_probe(daemon, entry)
        written = corpus.plugin_files(sorted(home_files(home) - before))
        less = compare(entry, ref, listed, probe, written)
        assert daemon.alive()
    finally:
        daemon.stop()
    assert not less, f"{entry['name']} does less in hermesd than in the reference: {less}"


PROVIDERS = corpus.memory_providers()


def provider_listing(daemon: DaemonProcess, name: str, timeout: float = 60) -> dict[str, Any]:
    """The listing row of provider ``name`` once its availability was checked."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for row in daemon.call("plugins.list")["plugins"]:
            status = row.get("memory_provider") or {}
            if row["key"] == name and status.get("available") is not None:
                return dict(row)
        time.sleep(0.1)
    raise AssertionError(f"memory provider {name} was never checked")


@pytest.mark.parametrize("entry", PROVIDERS, ids=[e["name"] for e in PROVIDERS])
def test_memory_provider_is_found_and_listed_as_a_provider(
    entry: dict[str, Any], model: ScriptedModelServer
) -> None:
    root = short_tmpdir("pm-")
    home = root / ".hermes"
    home.mkdir(parents=True)
    try:
        corpus.install_provider(entry, home)
    except corpus.Unreachable as exc:
        pytest.skip(f"package registry unreachable: {exc}")
    config = corpus.config_for({"key": "none"}, model.url) + (
        f"memory:\n  provider: {entry['provider']}\n"
    )
    daemon = start_daemon(home, config=config, env={"HOME": str(root)}, timeout=60)
    try:
        row = provider_listing(daemon, entry["provider"])
        name = entry["provider"]
        if entry["available"]:
            assert row["line"] == f"✓ {name} (memory provider, user, active, available)"
        else:
            assert row["line"] == (
                f"✗ {name} (memory provider, user, active) — unavailable: {entry['reason']}"
            )
        assert "registered nothing" not in daemon.call("plugins.list")["text"]
        assert daemon.alive()
    finally:
        daemon.stop()
