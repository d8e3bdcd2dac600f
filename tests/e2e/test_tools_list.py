"""``hermesctl tools list`` and the reference's toolsets on a real daemon: a fresh install lists
the reference's tool names with their toolsets (the ones hermesd lacks as unavailable, "not
built in hermesd"); ``agent.disabled_toolsets`` / ``tools.disabled_toolsets`` and ``toolsets``
hide tools from the model and say so; a plugin tool whose check fails says why."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from hermesd.tools.toolsets import REFERENCE_TOOLSETS, reference_toolset
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.plugin_factory import schema, write_plugin

CHECKS = f"""
    import json

    def register(ctx):
        ctx.register_tool("probe_weather", "weather", {schema("probe_weather")!r},
                          lambda args: json.dumps({{}}), check_fn=lambda: False)

        def broken():
            raise RuntimeError("no API key for the weather service")

        ctx.register_tool("fetch_weather", "weather", {schema("fetch_weather")!r},
                          lambda args: json.dumps({{}}), check_fn=broken)
"""


def ctl(daemon: DaemonProcess, *args: str) -> Any:
    return run_hermesctl(["--socket", str(daemon.socket), *args])


def _rows(daemon: DaemonProcess, *extra: str) -> dict[str, dict[str, Any]]:
    out = ctl(daemon, "tools", "list", "--json", *extra)
    assert out.returncode == 0, out.stderr
    return {row["name"]: row for row in json.loads(out.stdout)}


def _offered(model: ScriptedModelServer, daemon: DaemonProcess) -> set[str]:
    """The tool names the model is sent in a turn."""
    model.push(reply("hi"))
    seen = len(model.requests)
    with daemon.client() as client:
        sid = client.call("session.create", {"attach": False})["id"]
        done = client.call("session.send", {"session_id": sid, "message": "hi", "wait": True})
        assert done["status"] == "completed", done
    return {t["function"]["name"] for t in model.requests[seen:][-1].get("tools") or []}


def _config(model: ScriptedModelServer, more: str = "") -> str:
    return f"model:\n  base_url: {model.url}\n  default: scripted-model\n{more}"


def test_a_fresh_install_lists_the_reference_tools_by_toolset(start: Any) -> None:
    daemon = start()
    rows = _rows(daemon)
    for toolset, names in REFERENCE_TOOLSETS.items():
        for name in names:
            assert rows[name]["toolset"] == toolset, rows[name]
    skill = rows["skill_manage"]
    assert (skill["source"], skill["status"], skill["reason"]) == ("builtin", "available", None)
    assert rows["calculate"]["source"] == "plugin"  # the bundled calculator
    browser = rows["browser_cdp"]
    assert browser["status"] == "unavailable" and browser["source"] is None
    assert browser["reason"] == "not built in hermesd"


def test_the_table_shows_toolset_source_status_and_why(start: Any) -> None:
    daemon = start()
    out = ctl(daemon, "tools", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["TOOL", "TOOLSET", "SOURCE", "STATUS", "WHY"]
    (browser,) = [x for x in lines if x.startswith("browser_cdp ")]
    assert browser.split()[:4] == ["browser_cdp", "browser", "-", "unavailable"]
    assert browser.endswith("not built in hermesd")
    (skill,) = [x for x in lines if x.startswith("skill_manage ")]
    assert skill.split() == ["skill_manage", "skills", "builtin", "available"]
    assert "tools offered to the model" in lines[-1]


def test_disabled_toolsets_hide_tools_from_the_model_and_say_why(
    start: Any, model: ScriptedModelServer
) -> None:
    daemon = start(config=_config(model, "agent:\n  disabled_toolsets: [skills]\n"))
    rows = _rows(daemon)
    for name in ("skills_list", "skill_view", "skill_manage"):
        assert rows[name]["status"] == "unavailable"
        assert rows[name]["reason"].startswith("disabled by config"), rows[name]
    assert rows["todo"]["status"] == "available"
    offered = _offered(model, daemon)
    assert "todo" in offered and "read_file" in offered
    assert not offered & {"skills_list", "skill_view", "skill_manage"}
    # a model calling a disabled tool anyway is refused, and nothing is written
    content = "---\nname: sneaky\ndescription: d\n---\nbody\n"
    args = {"action": "create", "name": "sneaky", "content": content}
    model.push(call_tools(tool_call("skill_manage", args)), reply("done"))
    seen = len(model.requests)
    with daemon.client() as client:
        sid = client.call("session.create", {"attach": False})["id"]
        client.call("session.send", {"session_id": sid, "message": "go", "wait": True})
    [result] = [m for m in model.requests[seen:][-1]["messages"] if m["role"] == "tool"]
    assert "not available" in result["content"]
    assert not (daemon.home / "skills" / "sneaky").exists()
    # a client calling it directly is refused as well, naming the setting
    with daemon.client() as client, pytest.raises(RpcError) as refused:
        client.call("tools.call", {"name": "skill_manage", "args": args, "session_id": sid})
    assert refused.value.code == Codes.INVALID_PARAMS
    assert "skill_manage is turned off by config (disabled by config" in refused.value.message
    assert not (daemon.home / "skills" / "sneaky").exists()


def test_our_spelling_tools_disabled_toolsets_works_too(
    start: Any, model: ScriptedModelServer
) -> None:
    daemon = start(config=_config(model, "tools:\n  disabled_toolsets: [todo]\n"))
    assert _rows(daemon)["todo"]["reason"].startswith("disabled by config")
    assert "todo" not in _offered(model, daemon)


def test_toolsets_names_what_the_model_gets_composites_included(
    start: Any, model: ScriptedModelServer
) -> None:
    daemon = start(config=_config(model, "toolsets: [debugging]\n"))
    offered = _offered(model, daemon)
    assert {"terminal", "read_file", "write_file", "patch", "search_files"} <= offered
    assert not offered & {"todo", "memory", "skill_manage", "calculate"}
    assert "not enabled by config" in _rows(daemon)["todo"]["reason"]


def test_toolsets_hermes_cli_means_everything(start: Any, model: ScriptedModelServer) -> None:
    daemon = start(config=_config(model, "toolsets: [hermes-cli]\n"))
    offered = _offered(model, daemon)
    assert {"terminal", "todo", "skill_manage", "calculate"} <= offered


def test_a_plugin_tool_whose_check_fails_says_why(start: Any) -> None:
    home = short_tmpdir("tl-")
    write_plugin(Path(home) / "plugins", "weather", CHECKS)
    daemon = start(home)
    rows = _rows(daemon, "--toolset", "weather")
    assert set(rows) == {"probe_weather", "fetch_weather"}
    assert rows["probe_weather"]["source"] == "plugin"
    assert rows["probe_weather"]["reason"] == "check_fn returned false"
    assert "no API key for the weather service" in rows["fetch_weather"]["reason"]
    out = ctl(daemon, "tools", "list", "--toolset", "weather")
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("probe_weather ")]
    assert line.split()[:4] == ["probe_weather", "weather", "plugin", "unavailable"]


def test_every_built_in_tool_of_the_reference_carries_its_toolset(start: Any) -> None:
    rows = _rows(start())
    built = [r for r in rows.values() if r["source"] == "builtin"]
    assert {"terminal", "read_file", "memory", "todo", "skill_manage", "cronjob"} <= {
        r["name"] for r in built
    }
    wrong = [
        (r["name"], r["toolset"])
        for r in built
        if reference_toolset(r["name"]) not in (None, r["toolset"])
    ]
    assert wrong == []


def test_a_reload_applies_a_new_disabled_toolsets(start: Any, model: ScriptedModelServer) -> None:
    daemon = start(config=_config(model))
    assert "todo" in _offered(model, daemon)
    (daemon.home / "config.yaml").write_text(
        _config(model, "agent:\n  disabled_toolsets: [todo]\n")
    )
    daemon.signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while _rows(daemon)["todo"]["reason"] is None:
        assert time.monotonic() < deadline, "the reload never applied"
        time.sleep(0.1)
    assert "todo" not in _offered(model, daemon)
