"""The plugin host end to end: real plugin folders and installed packages, a real hermesd, its
real socket, and hermesctl as a separate process.

Most tests read one shared daemon (the "zoo", module scope) whose ``$HERMES_HOME`` holds a
plugin for every behaviour — well-behaved, broken, hanging, clashing, env-gated — plus plugins
handed in through ``HERMES_PLUGIN_PATH``, a project folder, and entry-point wheels installed with
pip into a folder on the daemon's PYTHONPATH. Behaviours that need a different daemon
configuration (safe mode, ``plugins.enabled``, the guide's calculator alone) start their own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support import plugin_zoo
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir, start_daemon
from tests.support.guide_seed import MISSING_REASON, extract_guide_calculator, find_guide_seed
from tests.support.plugin_factory import build_wheel, pip_install, write_plugin

LOAD_TIMEOUT = 1.0
ZOO_CONFIG = f"""
plugins:
  load_timeout: {LOAD_TIMEOUT}
  disabled: [switched_off]
tools:
  timeout: 3
  hook_timeout: 1
  result_budget: 5000
"""

EP_MODULE = {
    "zoo_ep_module/__init__.py": """
        import json
        from .schemas import SHOUT

        def register(ctx):
            ctx.register_tool("shout_text", "shout", SHOUT,
                              lambda args: json.dumps({"out": args["text"].upper()}))
    """,
    "zoo_ep_module/schemas.py": """
        SHOUT = {"description": "Shout the text and return it in capitals as JSON",
                 "parameters": {"type": "object", "required": ["text"],
                                "properties": {"text": {"type": "string",
                                                        "description": "text to shout"}}}}
    """,
}
EP_CALLABLE = {
    "zoo_ep_callable/__init__.py": """
        import json

        def register(ctx):
            ctx.register_hook("post_tool_call", lambda **kw: None)
            ctx.register_tool("whisper_text", "whisper",
                              {"description": "Whisper the text and return it lower-cased",
                               "parameters": {"type": "object", "properties": {
                                   "text": {"type": "string", "description": "the text"}}}},
                              lambda args: json.dumps({"out": args.get("text", "").lower()}))
    """,
}
EP_BROKEN = {"zoo_ep_broken/__init__.py": "VALUE = 1\n"}


@pytest.fixture(scope="module")
def site() -> Iterator[Path]:
    """A pip target folder holding three real entry-point distributions."""
    root = short_tmpdir("hz-")
    wheels = [
        build_wheel(
            root / "dist",
            "zoo-ep-module",
            "2.3.1",
            EP_MODULE,
            {"ep_module": "zoo_ep_module"},
            summary="Shouts text",
            author="Ada",
        ),
        build_wheel(
            root / "dist",
            "zoo-ep-callable",
            "0.4",
            EP_CALLABLE,
            {"ep_callable": "zoo_ep_callable:register"},
            summary="Whispers",
        ),
        build_wheel(root / "dist", "zoo-ep-broken", "9", EP_BROKEN, {"ep_broken": "zoo_ep_broken"}),
    ]
    pip_install(wheels, root / "site")
    yield root / "site"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def zoo(site: Path) -> Iterator[DaemonProcess]:
    """One daemon over the whole zoo; records how long it took to reach READY=1."""
    root = short_tmpdir("hz-")
    folders = plugin_zoo.write_zoo(root)
    env = {
        "HERMES_PLUGIN_PATH": f"{folders['path_one']}{os.pathsep}{folders['path_many']}",
        "HERMES_ENABLE_PROJECT_PLUGINS": "yes",
        "ZOO_PROCESS_TOKEN": "from-process",
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p),
    }
    started = time.monotonic()
    daemon = start_daemon(
        folders["home"],
        config=ZOO_CONFIG,
        env=env,
        argv_prefix=["env", "-C", str(folders["project"])],
    )
    daemon.ready_after = time.monotonic() - started  # type: ignore[attr-defined]
    yield daemon
    daemon.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def listing(zoo: DaemonProcess) -> dict[str, Any]:
    return zoo.call("plugins.list")


def plugin(listing: dict[str, Any], key: str) -> dict[str, Any]:
    found = [p for p in listing["plugins"] if p["key"] == key]
    assert found, f"{key} not listed: {[p['key'] for p in listing['plugins']]}"
    return found[0]


def line(listing: dict[str, Any], key: str) -> str:
    """The /plugins text line of ``key`` (from the daemon-rendered text, not the map)."""
    text_lines = listing["text"].splitlines()
    wanted = plugin(listing, key)["line"]
    assert f"  {wanted}" in text_lines
    return wanted


def call_tool(daemon: DaemonProcess, name: str, args: Any = None) -> Any:
    params: dict[str, Any] = {"name": name}
    if args is not None:
        params["args"] = args
    return json.loads(daemon.call("tools.call", params)["result"])


def tool_names(daemon: DaemonProcess) -> set[str]:
    return {t["name"] for t in daemon.call("tools.list")["tools"]}


def still_serving(daemon: DaemonProcess) -> bool:
    return daemon.alive() and daemon.call("ping") is not None


def ctl(daemon: DaemonProcess, *args: str) -> Any:
    return run_hermesctl(["--socket", str(daemon.socket), *args])


# --- start-up ------------------------------------------------------------------------------------


def test_daemon_reaches_ready_in_bounded_time_despite_hanging_plugins(zoo: DaemonProcess) -> None:
    # two register()s hang (one forever), each abandoned after plugins.load_timeout
    assert zoo.ready_after < 2 * LOAD_TIMEOUT + 10  # type: ignore[attr-defined]
    assert still_serving(zoo)


def test_listing_shows_sources_in_scan_order(listing: dict[str, Any]) -> None:
    sources = [p["source"] for p in listing["plugins"]]
    order = ["bundled", "path", "user", "project", "entrypoint"]
    assert sources == sorted(sources, key=order.index)
    assert set(sources) == set(order)
    user = [p["key"] for p in listing["plugins"] if p["source"] == "user"]
    assert user == sorted(user)  # alphabetical by folder name within a source
    assert listing["text"].splitlines()[0] == f"Plugins ({len(listing['plugins'])}):"


def test_well_behaved_plugin_from_home_is_loaded(listing: dict[str, Any]) -> None:
    assert line(listing, "slow") == "✓ slow v1.0.0 (1 tools)"


# --- broken plugins ------------------------------------------------------------------------------


def test_unparseable_manifest_is_listed_with_the_parse_error(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    entry = line(listing, "broken_yaml")
    assert entry.startswith("✗ broken_yaml — Failed to parse plugin.yaml: ")
    assert "Failed to parse " in zoo.log() and "broken_yaml/plugin.yaml" in zoo.log()


def test_manifest_that_is_not_a_mapping_is_listed_as_an_error(listing: dict[str, Any]) -> None:
    assert line(listing, "not_a_mapping") == (
        "✗ not_a_mapping — Failed to parse plugin.yaml: the manifest must be a mapping"
    )


def test_raising_register_is_listed_and_everything_it_registered_is_rolled_back(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    assert line(listing, "raiser") == (
        "✗ raiser v1.0.0 — RuntimeError: register exploded on purpose"
    )
    assert plugin(listing, "raiser")["tools"] == [] and plugin(listing, "raiser")["hooks"] == []
    assert "leak_tool" not in tool_names(zoo)
    assert call_tool(zoo, "calculate", {"expression": "1+1"})["result"] == 2
    assert "Failed to load plugin 'raiser': register exploded on purpose" in zoo.log()


def test_plugin_whose_import_fails_is_listed_with_the_import_error(listing: dict[str, Any]) -> None:
    assert line(listing, "import_error") == (
        "✗ import_error v1.0.0 — ModuleNotFoundError: No "
        "module named 'hermesd_no_such_module_for_tests'"
    )


def test_register_that_never_returns_is_abandoned_after_the_load_timeout(
    listing: dict[str, Any],
) -> None:
    assert line(listing, "hang_forever") == (
        f"✗ hang_forever v1.0.0 — TimeoutError: register() did not finish within {LOAD_TIMEOUT:g}s"
    )


def test_registrations_from_an_abandoned_register_are_ignored(zoo: DaemonProcess) -> None:
    deadline = time.monotonic() + 15
    while "registered tool 'late_tool' after its load was abandoned" not in zoo.log():
        assert time.monotonic() < deadline, zoo.log()
        time.sleep(0.1)
    assert "late_tool" not in tool_names(zoo)
    late = plugin(zoo.call("plugins.list"), "hang_then_register")
    assert late["state"] == "error" and late["tools"] == []


def test_unknown_hook_is_warned_about_and_the_plugin_still_loads(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    assert line(listing, "unknown_hook") == "✓ unknown_hook v1.0.0 (1 hooks)"
    assert "Plugin 'unknown_hook' registered unknown hook 'on_moon_landing' (valid: " in zoo.log()


def test_bad_tool_schemas_are_rejected_and_listed_with_reasons(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    entry = plugin(listing, "bad_schemas")
    assert entry["state"] == "loaded" and entry["tools"] == ["good_tool"]
    reasons = {r["name"]: r["reason"] for r in entry["rejected_tools"]}
    assert set(reasons) == {"bad name!", "list_things"}
    assert "^[a-zA-Z0-9_-]{1,64}$" in reasons["bad name!"]
    assert "object" in reasons["list_things"]
    assert entry["line"].startswith("✓ bad_schemas v1.0.0 (1 tools) — rejected tool 'bad name!'")
    assert {"good_tool"} <= tool_names(zoo) and "list_things" not in tool_names(zoo)


def test_tool_name_clash_is_rejected_naming_both_toolsets_and_the_first_tool_stays(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    (rejected,) = plugin(listing, "clash")["rejected_tools"]
    assert rejected["name"] == "calculate"
    assert "'impostor'" in rejected["reason"] and "'calculator'" in rejected["reason"]
    assert call_tool(zoo, "calculate", {"expression": "6*7"})["result"] == 42


# --- enabling and env gating ---------------------------------------------------------------------


def test_missing_required_env_disables_the_plugin_with_the_guide_message(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    assert line(listing, "weather") == "✗ weather v1.0.0 — disabled (missing: WEATHER_API_KEY)"
    assert plugin(listing, "weather")["missing_env"] == ["WEATHER_API_KEY"]
    assert "Plugin weather disabled (missing: WEATHER_API_KEY)" in zoo.log()


def test_required_env_from_the_daemon_environment_satisfies_the_plugin(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    assert line(listing, "env_from_process") == "✓ env_from_process v1.0.0 (1 tools)"
    assert call_tool(zoo, "process_env_tool", {"text": "x"})["from"] == "process_env_tool"


def test_required_env_from_hermes_home_dotenv_satisfies_the_plugin(listing: dict[str, Any]) -> None:
    assert line(listing, "env_from_dotenv") == "✓ env_from_dotenv v1.0.0 (1 tools)"


def test_plugin_in_plugins_disabled_is_not_loaded(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    assert line(listing, "switched_off") == "✗ switched_off v1.0.0 — disabled in config"
    assert "switched_off_tool" not in tool_names(zoo)


def test_plugins_enabled_list_loads_only_those_and_declared_path_plugins(start) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "wanted", plugin_zoo.echo_plugin("wanted_tool", "w"))
    write_plugin(home / "plugins", "unwanted", plugin_zoo.echo_plugin("unwanted_tool", "w"))
    nix = write_plugin(short_tmpdir(), "from_nix", plugin_zoo.echo_plugin("nix_tool", "n"))
    daemon = start(
        home,
        config="plugins:\n  enabled: [wanted]\n",
        env={"HERMES_BUNDLED_PLUGINS": str(short_tmpdir()), "HERMES_PLUGIN_PATH": str(nix)},
    )
    assert daemon.call("plugins.list")["text"] == (
        "Plugins (3):\n"
        "  ✓ from_nix v1.0.0 (1 tools)\n"
        "  ✗ unwanted v1.0.0 — not enabled in config\n"
        "  ✓ wanted v1.0.0 (1 tools)"
    )


def test_safe_mode_skips_plugin_discovery(start) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "anything", plugin_zoo.echo_plugin("anything_tool", "a"))
    daemon = start(home, env={"HERMES_SAFE_MODE": "1"})
    result = daemon.call("plugins.list")
    assert result["plugins"] == []
    assert result["safe_mode"] is True
    assert result["text"] == "Safe mode (HERMES_SAFE_MODE=1): no plugins are loaded."
    assert not {"calculate", "anything_tool"} & tool_names(daemon)
    assert "skill_view" in tool_names(daemon)  # built-in tools do not depend on plugins


# --- other sources -------------------------------------------------------------------------------


def test_hermes_plugin_path_takes_a_plugin_folder_and_a_folder_of_plugins(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    path_keys = [p["key"] for p in listing["plugins"] if p["source"] == "path"]
    assert path_keys == ["path_single", "path_a", "path_b"]
    assert call_tool(zoo, "path_b_tool", {"text": "hi"})["args"] == {"text": "hi"}


def test_category_layout_gives_a_category_slash_folder_key(listing: dict[str, Any]) -> None:
    entry = plugin(listing, "image_gen/openai")
    assert entry["name"] == "openai-images" and entry["line"] == (
        "✓ image_gen/openai v0.1 (1 tools)"
    )


def test_project_plugins_load_from_the_working_directory_when_opted_in(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    assert plugin(listing, "from_project")["source"] == "project"
    assert call_tool(zoo, "project_tool", {"text": "p"})["from"] == "project_tool"


def test_project_plugins_are_ignored_without_the_opt_in(start) -> None:
    project = short_tmpdir()
    write_plugin(
        project / ".hermes" / "plugins",
        "from_project",
        plugin_zoo.echo_plugin("project_tool", "project"),
    )
    daemon = start(
        argv_prefix=["env", "-C", str(project)], env={"HERMES_BUNDLED_PLUGINS": str(short_tmpdir())}
    )
    assert daemon.call("plugins.list")["plugins"] == []


def test_entry_point_naming_a_module_loads_with_distribution_metadata(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    entry = plugin(listing, "ep_module")
    assert entry["source"] == "entrypoint" and entry["description"] == "Shouts text"
    assert entry["author"] == "Ada" and entry["line"] == "✓ ep_module v2.3.1 (1 tools)"
    assert call_tool(zoo, "shout_text", {"text": "hey"}) == {"out": "HEY"}


def test_entry_point_naming_the_register_function_loads(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    assert line(listing, "ep_callable") == "✓ ep_callable v0.4 (1 tools, 1 hooks)"
    assert call_tool(zoo, "whisper_text", {"text": "HEY"}) == {"out": "hey"}


def test_entry_point_without_register_is_listed_as_an_error(listing: dict[str, Any]) -> None:
    assert line(listing, "ep_broken") == "✗ ep_broken v9 — PluginLoadError: no register() function"


# --- tools ---------------------------------------------------------------------------------------


def test_plugin_data_files_next_to_its_code_are_readable(zoo: DaemonProcess) -> None:
    assert call_tool(zoo, "read_words") == {"words": ["alpha", "beta", "gamma"]}


def test_tools_json_supplies_the_schema_and_register_tool_binds_the_handler(
    zoo: DaemonProcess,
) -> None:
    (tool,) = zoo.call("tools.list", {"toolset": "repeater"})["tools"]
    assert tool["description"].startswith("Repeat the text a number of times")
    assert tool["parameters"]["properties"]["times"]["type"] == "integer"
    assert call_tool(zoo, "repeat_text", {"text": "ab", "times": 3}) == {"out": "ababab"}


def test_tools_json_schema_is_enforced_on_calls(zoo: DaemonProcess) -> None:
    result = call_tool(zoo, "repeat_text", {"text": "ab", "times": "3"})
    assert result == {
        "error": "Invalid arguments for tool 'repeat_text': parameter 'times' "
        "must be integer, got string"
    }


def test_raising_tool_handler_gives_the_reference_error_result(zoo: DaemonProcess) -> None:
    assert call_tool(zoo, "explode_now") == {
        "error": "Tool execution failed: ValueError: bad input on purpose"
    }
    assert still_serving(zoo)


def test_tool_handler_returning_a_non_string_gives_an_error_result(zoo: DaemonProcess) -> None:
    assert call_tool(zoo, "return_nothing") == {
        "error": "Tool 'return_nothing' returned NoneType, not a JSON string"
    }
    assert call_tool(zoo, "return_dict") == {"plain": "dict"}  # dicts are serialised


def test_tool_handler_past_tools_timeout_gives_an_error_result(zoo: DaemonProcess) -> None:
    started = time.monotonic()
    assert call_tool(zoo, "sleep_long") == {"error": "Tool 'sleep_long' timed out after 3s"}
    assert time.monotonic() - started < 8
    assert still_serving(zoo)


def test_huge_tool_result_is_cut_to_the_budget_with_a_note(zoo: DaemonProcess) -> None:
    result = zoo.call("tools.call", {"name": "flood_output"})["result"]
    assert result.startswith('"' + "x" * 4999 + "\n\n[truncated: ")
    assert result.endswith("more characters; tool results are limited to 5000 characters]")
    out = ctl(zoo, "tools", "call", "flood_output")  # not JSON any more: printed as it is
    assert out.returncode == 0 and out.stdout == result + "\n"


def test_tools_call_with_a_wrong_argument_type_returns_an_error_result(zoo: DaemonProcess) -> None:
    result = call_tool(zoo, "calculate", {"expression": 42})
    assert result == {
        "error": "Invalid arguments for tool 'calculate': parameter 'expression' "
        "must be string, got integer"
    }
    assert still_serving(zoo)


def test_tools_call_with_a_missing_required_argument_returns_an_error_result(
    zoo: DaemonProcess,
) -> None:
    assert "expression" in call_tool(zoo, "calculate", {})["error"]
    assert still_serving(zoo)


def test_tools_call_of_an_unknown_tool_is_not_found(zoo: DaemonProcess) -> None:
    with pytest.raises(RpcError) as err:
        zoo.call("tools.call", {"name": "no_such_tool", "args": {}})
    assert err.value.code == Codes.NOT_FOUND
    assert err.value.message == "Unknown tool: no_such_tool"
    assert still_serving(zoo)


def test_tools_call_with_non_map_args_is_invalid_params(zoo: DaemonProcess) -> None:
    with pytest.raises(RpcError) as err:
        zoo.call("tools.call", {"name": "calculate", "args": ["2+2"]})
    assert err.value.code == Codes.INVALID_PARAMS
    assert "args must be a map" in err.value.message
    assert still_serving(zoo)


def test_tools_call_accepts_args_as_a_json_string(zoo: DaemonProcess) -> None:
    assert call_tool(zoo, "calculate", '{"expression": "2**16"}')["result"] == 65536


@pytest.mark.parametrize("bad", ['{"expression": ', '["2+2"]'])
def test_tools_call_with_a_json_string_that_is_not_an_object_is_invalid_params(
    zoo: DaemonProcess, bad: str
) -> None:
    with pytest.raises(RpcError) as err:
        zoo.call("tools.call", {"name": "calculate", "args": bad})
    assert err.value.code == Codes.INVALID_PARAMS
    assert still_serving(zoo)


def test_pre_tool_call_hook_blocks_a_client_tool_call(zoo: DaemonProcess) -> None:
    assert call_tool(zoo, "calculate", {"expression": "13*13"}) == {
        "error": "guard says no to 13*13"
    }
    assert call_tool(zoo, "calculate", {"expression": "13*12"})["result"] == 156


def test_pre_tool_call_hook_that_times_out_blocks_the_call(zoo: DaemonProcess) -> None:
    result = call_tool(zoo, "slow_tool", {"text": "x"})  # the stall plugin's hook sleeps 3 s
    assert result["error"].startswith("Blocked: pre_tool_call hook ")
    assert "'stall'" in result["error"] and "did not answer within 1s" in result["error"]
    assert still_serving(zoo)


def test_plugin_tool_can_dispatch_another_tool(zoo: DaemonProcess) -> None:
    assert call_tool(zoo, "dispatch_calc", {"expression": "sqrt(144)"}) == {
        "dispatched": {"expression": "sqrt(144)", "result": 12.0}
    }


def test_dispatched_tool_calls_go_through_the_hooks_too(zoo: DaemonProcess) -> None:
    assert call_tool(zoo, "dispatch_calc", {"expression": "13*13"}) == {
        "dispatched": {"error": "guard says no to 13*13"}
    }


def test_tool_hidden_by_check_fn_is_listed_as_unavailable(zoo: DaemonProcess) -> None:
    (tool,) = zoo.call("tools.list", {"toolset": "hidden"})["tools"]
    assert tool["available"] is False and tool["owner"] == "hidden"


# --- skills --------------------------------------------------------------------------------------


def test_skills_view_of_the_calculator_skill_starts_with_the_bundle_banner(
    zoo: DaemonProcess,
) -> None:
    view = zoo.call("skills.view", {"name": "calculator:math-checks"})
    assert view["success"] is True and view["name"] == "calculator:math-checks"
    assert view["content"].startswith(
        "[Bundle context: This skill is part of the 'calculator' plugin.]\n\n---\n"
    )


def test_skills_view_banner_names_sibling_skills(zoo: DaemonProcess) -> None:
    view = zoo.call("skills.view", {"name": "skilled:alpha"})
    assert view["content"].startswith(
        "[Bundle context: This skill is part of the 'skilled' plugin.\n"
        "Sibling skills: beta.\n"
        "Use qualified form to invoke siblings (e.g. skilled:beta).]\n\n---\nname: alpha\n"
    )


def test_skills_view_of_a_missing_plugin_skill_lists_what_the_plugin_has(
    zoo: DaemonProcess,
) -> None:
    assert zoo.call("skills.view", {"name": "skilled:gamma"}) == {
        "success": False,
        "error": "Skill 'gamma' not found in plugin 'skilled'.",
        "available_skills": ["skilled:alpha", "skilled:beta"],
        "hint": "The 'skilled' plugin provides 2 skill(s).",
    }


def test_skills_view_reads_a_file_inside_the_skill_folder(zoo: DaemonProcess) -> None:
    view = zoo.call("skills.view", {"name": "skilled:alpha", "file_path": "notes.txt"})
    assert view["success"] is True and view["content"] == "alpha notes\n"


@pytest.mark.parametrize(
    "file_path", ["../beta/SKILL.md", "../../__init__.py", "/etc/passwd", "escape"]
)
def test_skills_view_refuses_file_paths_outside_the_skill_folder(
    zoo: DaemonProcess, file_path: str
) -> None:
    name = "daily-review" if file_path == "escape" else "skilled:alpha"
    view = zoo.call("skills.view", {"name": name, "file_path": file_path})
    assert view["success"] is False
    assert "outside the skill folder" in view["error"] or "must be relative" in view["error"]
    assert "content" not in view
    assert still_serving(zoo)


def test_user_skills_from_hermes_home_are_listed_and_viewable(zoo: DaemonProcess) -> None:
    skills = {s["name"]: s for s in zoo.call("skills.list")["skills"]}
    assert skills["daily-review"]["category"] == "notes"
    assert skills["daily-review"]["plugin"] is None
    assert skills["skilled:beta"]["description"] == "second skill"
    view = zoo.call("skills.view", {"name": "daily-review"})
    assert view["content"].startswith("---\nname: daily-review\n")
    assert view["linked_files"]["references"] == ["references/checklist.md"]


# --- hermesctl -----------------------------------------------------------------------------------


def test_hermesctl_plugins_list_prints_the_daemon_rendered_text(
    zoo: DaemonProcess, listing: dict[str, Any]
) -> None:
    out = ctl(zoo, "plugins", "list")
    assert out.returncode == 0, out.stderr
    assert out.stdout == zoo.call("plugins.list")["text"] + "\n"


def test_hermesctl_plugins_list_json_is_the_array_of_plugin_maps(zoo: DaemonProcess) -> None:
    for argv in (["plugins", "list", "--json"], ["--json", "plugins", "list"]):
        out = ctl(zoo, *argv)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == zoo.call("plugins.list")["plugins"]


def test_hermesctl_tools_list_shows_toolset_source_and_why_hidden(zoo: DaemonProcess) -> None:
    out = ctl(zoo, "tools", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    (calculate,) = [x for x in lines if x.startswith("calculate ")]
    assert calculate.split() == ["calculate", "calculator", "plugin", "available"]
    (hidden,) = [x for x in lines if x.startswith("hidden_tool ")]
    assert hidden.split()[:4] == ["hidden_tool", "hidden", "plugin", "unavailable"]
    assert hidden.endswith("check_fn returned false")


def test_hermesctl_tools_list_marks_tools_of_toolsets_not_enabled(start) -> None:
    daemon = start(config="tools:\n  enabled_toolsets: [calculator]\n")
    out = ctl(daemon, "tools", "list")
    assert out.returncode == 0, out.stderr
    (terminal,) = [x for x in out.stdout.splitlines() if x.startswith("terminal ")]
    assert "unavailable" in terminal and "not enabled by config" in terminal
    (calculate,) = [x for x in out.stdout.splitlines() if x.startswith("calculate ")]
    assert calculate.split()[-1] == "available"


def test_hermesctl_tools_list_json_is_an_array_of_tool_objects(zoo: DaemonProcess) -> None:
    out = ctl(zoo, "tools", "list", "--toolset", "calculator", "--json")
    tools = json.loads(out.stdout)
    assert [t["name"] for t in tools] == ["calculate", "unit_convert"]
    assert all(t["toolset"] == "calculator" and "parameters" in t for t in tools)


def test_hermesctl_tools_call_parses_values_as_json_when_they_parse(zoo: DaemonProcess) -> None:
    out = ctl(zoo, "tools", "call", "repeat_text", "text=ab", "times=2")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"out": "abab"}
    assert out.stdout.startswith("{\n  ")  # pretty-printed
    out = ctl(
        zoo,
        "tools",
        "call",
        "path_a_tool",
        "text=x y",
        "n=2.5",
        "flag=true",
        "items=[1, null]",
        'quoted="7"',
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["args"] == {
        "text": "x y",
        "n": 2.5,
        "flag": True,
        "items": [1, None],
        "quoted": "7",
    }


def test_hermesctl_tools_call_accepts_args_as_json(zoo: DaemonProcess) -> None:
    out = ctl(zoo, "tools", "call", "calculate", "--args", '{"expression": "pi * 5**2"}')
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["result"] == pytest.approx(78.5398, abs=1e-3)


def test_hermesctl_tools_call_exits_1_when_the_result_is_an_error(zoo: DaemonProcess) -> None:
    out = ctl(zoo, "tools", "call", "calculate", "expression=1/0")
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"] == "Division by zero"
    out = ctl(zoo, "tools", "call", "calculate", "expression=7")  # 7 parses as a number
    assert out.returncode == 1 and "must be string" in json.loads(out.stdout)["error"]


def test_hermesctl_tools_call_of_an_unknown_tool_is_one_line_and_exit_1(zoo: DaemonProcess) -> None:
    out = ctl(zoo, "tools", "call", "no_such_tool")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == "hermesctl: Unknown tool: no_such_tool\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["calculate", "expression"], "expected key=value, got 'expression'"),
        (["calculate", "--args", "{nope"], "--args is not valid JSON"),
        (["calculate", "--args", "[1]"], "--args must be a JSON object, not list"),
        (["calculate", "a=1", "--args", "{}"], "either as key=value pairs or with --args"),
    ],
)
def test_hermesctl_tools_call_usage_mistakes_exit_2(
    zoo: DaemonProcess, argv: list[str], message: str
) -> None:
    out = ctl(zoo, "tools", "call", *argv)
    assert out.returncode == 2 and message in out.stderr
    assert "Traceback" not in out.stderr


def test_hermesctl_skills_list_shows_user_and_plugin_skills(zoo: DaemonProcess) -> None:
    out = ctl(zoo, "skills", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "Skills (1):" and lines[1].startswith("  daily-review ")
    assert "Plugin skills (3):" in lines
    assert any(x.startswith("  calculator:math-checks ") for x in lines)


def test_hermesctl_skills_view_prints_the_content(zoo: DaemonProcess) -> None:
    out = ctl(zoo, "skills", "view", "skilled:beta")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("[Bundle context: This skill is part of the 'skilled' plugin.")
    assert "# beta" in out.stdout
    out = ctl(zoo, "skills", "view", "daily-review", "--file", "references/checklist.md")
    assert out.returncode == 0 and out.stdout == "- what went well\n"


def test_hermesctl_skills_view_of_a_missing_skill_or_escaping_file_exits_1(
    zoo: DaemonProcess,
) -> None:
    out = ctl(zoo, "skills", "view", "skilled:gamma")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("hermesctl: Skill 'gamma' not found in plugin 'skilled'.\n")
    out = ctl(zoo, "skills", "view", "skilled:alpha", "--file", "../../__init__.py")
    assert out.returncode == 1 and "outside the skill folder" in out.stderr


def test_hermesctl_plugin_commands_need_a_subcommand() -> None:
    for area in ("plugins", "tools", "skills"):
        out = run_hermesctl([area])
        assert out.returncode == 2 and "SUBCOMMAND" in out.stderr


# --- the guide's calculator ----------------------------------------------------------------------


@pytest.fixture
def guide_calculator_home() -> Callable[[], Path]:
    seed = find_guide_seed()
    if seed is None:
        pytest.skip(MISSING_REASON)

    def make() -> Path:
        home = short_tmpdir()
        extract_guide_calculator(seed, home / "plugins")
        return home

    return make


def test_guide_calculator_copied_verbatim_loads_and_lists_as_the_guide_shows(
    start, guide_calculator_home: Callable[[], Path]
) -> None:
    daemon = start(guide_calculator_home(), env={"HERMES_BUNDLED_PLUGINS": str(short_tmpdir())})
    assert daemon.call("plugins.list")["text"] == (
        "Plugins (1):\n  ✓ calculator v1.0.0 (2 tools, 1 hooks)"
    )
    out = ctl(daemon, "plugins", "list")
    assert out.stdout == "Plugins (1):\n  ✓ calculator v1.0.0 (2 tools, 1 hooks)\n"
    assert call_tool(daemon, "calculate", {"expression": "2**16"})["result"] == 65536
    assert call_tool(daemon, "unit_convert", {"value": 5, "from_unit": "km", "to_unit": "mi"})[
        "result"
    ] == pytest.approx(3.10686, abs=1e-4)


def test_guide_calculator_in_home_wins_the_key_collision_with_the_bundled_one(
    start, guide_calculator_home: Callable[[], Path]
) -> None:
    home = guide_calculator_home()
    daemon = start(home)  # the repository's bundled plugins/ is scanned too
    (entry,) = daemon.call("plugins.list")["plugins"]
    assert entry["source"] == "user" and entry["path"] == str(home / "plugins" / "calculator")
    assert entry["skills"] == []  # the bundled calculator (which has one) was not loaded
    assert (
        "Plugin 'calculator' from the user source overrides the one from the bundled "
        "source" in daemon.log()
    )


def test_another_module_can_add_plugins_subcommands(zoo: DaemonProcess) -> None:
    code = (
        "import sys\n"
        "from hermesctl.subcommands.plugins import plugins_command, plugins_subcommand\n"
        "@plugins_subcommand\n"
        "def setup(psub):\n"
        "    psub.add_parser('count').add_argument('--state', default='loaded')\n"
        "@plugins_command('count')\n"
        "def count(args, client):\n"
        "    plugins = client.call('plugins.list')['plugins']\n"
        "    print(sum(p['state'] == args.state for p in plugins)); return 0\n"
        "from hermesctl.cli import main\n"
        f"sys.exit(main(['--socket', {str(zoo.socket)!r}, 'plugins', 'count', "
        "'--state', 'missing-env']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "1\n"  # weather
    assert run_hermesctl(["plugins", "count"]).returncode == 2  # only where it was added


def test_odd_number_literals_leave_no_syntax_warning_in_the_daemon_log(
    start: Callable[..., DaemonProcess],
) -> None:
    # Python's compiler warns about some of them on stderr ("invalid decimal literal"), which
    # for the daemon is its journal; whatever the model sends, the calculator answers with an
    # error result and the log stays clean.
    daemon = start()
    for expression in ("1if 1 else 2", "0x", "1_a", "2.e"):
        result = call_tool(daemon, "calculate", {"expression": expression})
        assert "error" in result, (expression, result)
    daemon.call("ping")
    assert "SyntaxWarning" not in daemon.log()
