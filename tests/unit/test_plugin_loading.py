"""Loading real plugin folders: sources, order, enabling, env gating, failures and rollback."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.plugins.host import PluginHost
from tests.support.plugin_factory import make_host, write_plugin
from tests.support.waiting import wait_until

TOOL_PLUGIN = """
    import json
    from . import schemas

    def handler(args, **kwargs):
        return json.dumps({"echo": args})

    def register(ctx):
        ctx.register_tool(name="echo_text", toolset="echo", schema=schemas.ECHO, handler=handler)
        ctx.register_hook("post_tool_call", lambda **kw: None)
"""
SCHEMAS = """
    ECHO = {"name": "echo_text", "description": "Echo the given text back and return it as JSON",
            "parameters": {"type": "object", "required": ["text"],
                           "properties": {"text": {"type": "string", "description": "the text"}}}}
"""

Factory = Callable[..., PluginHost]


@pytest.fixture
def hermes_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "plugins").mkdir(parents=True)
    return home


@pytest.fixture
def user_plugins(hermes_home: Path) -> Path:
    return hermes_home / "plugins"


@pytest.fixture
def host(hermes_home: Path) -> Iterator[Factory]:
    """``host(env=..., config=..., dotenv=...)`` builds a host and loads its plugins."""
    made: list[PluginHost] = []

    def build(
        env: dict[str, str] | None = None, config: dict[str, Any] | None = None, **kwargs: Any
    ) -> PluginHost:
        made.append(make_host(hermes_home, env, config, **kwargs))
        made[-1].plugins.load_all()
        return made[-1]

    yield build
    for built in made:
        built.plugins.unload_all()


def line(host: PluginHost, key: str) -> str:
    from hermesd.plugins.listing import plugin_line

    record = host.plugins.get(key)
    assert record is not None, f"no plugin {key}"
    return plugin_line(record)


def test_plugin_in_home_plugins_loads_its_tool_and_hook(user_plugins: Path, host: Factory) -> None:
    write_plugin(user_plugins, "echo", TOOL_PLUGIN, files={"schemas.py": SCHEMAS})
    built = host()
    assert line(built, "echo") == "  ✓ echo v1.0.0 (1 tools, 1 hooks)"
    result = asyncio.run(built.tools.call("echo_text", '{"text": "hi"}', session_id="s"))
    assert json.loads(result) == {"echo": {"text": "hi"}}


def test_register_runs_on_a_worker_thread(user_plugins: Path, host: Factory) -> None:
    write_plugin(
        user_plugins,
        "where",
        """
        import threading
        THREAD = []
        def register(ctx):
            THREAD.append(threading.current_thread().name)
    """,
    )
    host()
    assert sys.modules["hermes_plugins.where"].THREAD[0].startswith("hermesd-plugin")


def test_plugin_imports_as_a_package_so_relative_imports_and_data_files_work(
    user_plugins: Path, host: Factory
) -> None:
    write_plugin(
        user_plugins,
        "my-data",
        """
        from pathlib import Path
        from .helpers import greet
        DATA = (Path(__file__).parent / "data" / "words.txt").read_text().split()
        def register(ctx):
            ctx.register_tool("greet_user", "greet", {"description": greet(DATA[0]),
                              "parameters": {"type": "object", "properties": {}}},
                              lambda args: "{}")
    """,
        files={
            "helpers.py": "def greet(w):\n    return 'hello ' + w\n",
            "data/words.txt": "world\n",
        },
    )
    built = host()
    assert "hermes_plugins.my_data.helpers" in sys.modules
    assert built.tools.get("greet_user").description == "hello world"  # type: ignore[union-attr]


def test_broken_manifest_is_warned_about_and_listed_with_the_reason(
    user_plugins: Path, host: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    write_plugin(user_plugins, "broken", manifest="name: [unclosed\n")
    with caplog.at_level(logging.WARNING):
        built = host()
    manifest = user_plugins / "broken" / "plugin.yaml"
    assert any(m.startswith(f"Failed to parse {manifest}: ") for m in caplog.messages)
    assert built.plugins.get("broken").state == "error"  # type: ignore[union-attr]
    assert line(built, "broken").startswith("  ✗ broken — Failed to parse plugin.yaml: ")


def test_manifest_version_is_coerced_to_a_string(user_plugins: Path, host: Factory) -> None:
    write_plugin(user_plugins, "floaty", manifest="name: floaty\nversion: 1.0\n")
    write_plugin(user_plugins, "inty", manifest="name: inty\nversion: 2\n")
    write_plugin(user_plugins, "none", manifest="name: none\n")
    built = host()
    assert line(built, "floaty") == "  ✓ floaty v1.0 — registered nothing"
    assert line(built, "inty") == "  ✓ inty v2 — registered nothing"
    assert line(built, "none") == "  ✓ none — registered nothing"


def test_manifest_name_is_the_key_and_unknown_fields_are_ignored(
    user_plugins: Path, host: Factory
) -> None:
    write_plugin(
        user_plugins,
        "folder-name",
        manifest={"name": "real-name", "version": "3", "homepage": "x", "kind": "standalone"},
    )
    built = host()
    assert [r.key for r in built.plugins.records()] == ["real-name"]
    assert built.plugins.get("real-name").path == str(user_plugins / "folder-name")  # type: ignore[union-attr]


def test_folder_without_manifest_is_not_a_plugin(user_plugins: Path, host: Factory) -> None:
    write_plugin(user_plugins, "loose", no_manifest=True)
    assert host().plugins.records() == []


def test_import_error_fails_the_plugin_with_the_reference_log_line(
    user_plugins: Path, host: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    write_plugin(user_plugins, "needs-lib", "import surely_not_installed_lib\n")
    with caplog.at_level(logging.WARNING):
        built = host()
    assert (
        "Failed to load plugin 'needs-lib': No module named 'surely_not_installed_lib'"
        in caplog.messages
    )
    assert line(built, "needs-lib") == (
        "  ✗ needs-lib v1.0.0 — ModuleNotFoundError: No module named 'surely_not_installed_lib'"
    )
    assert not [m for m in sys.modules if m.startswith("hermes_plugins.needs_lib")]


def test_register_calling_sys_exit_is_an_ordinary_failure(
    user_plugins: Path, host: Factory
) -> None:
    write_plugin(user_plugins, "quitter", "import sys\ndef register(ctx):\n    sys.exit(3)\n")
    record = host().plugins.get("quitter")
    assert record is not None and record.state == "error"
    assert record.reason == "PluginAbort: SystemExit: 3"


def test_plugin_without_register_fails(user_plugins: Path, host: Factory) -> None:
    write_plugin(user_plugins, "lazy", "X = 1\n")
    assert host().plugins.get("lazy").reason == "PluginLoadError: no register() function"  # type: ignore[union-attr]


RAISING = """
    from pathlib import Path
    def register(ctx):
        ctx.register_tool("doomed_tool", "doomed", {"description": "d", "parameters":
                          {"type": "object", "properties": {}}}, lambda args: "{}")
        ctx.register_hook("pre_llm_call", lambda **kw: "doomed context")
        ctx.register_command("doomed", lambda raw: "x")
        ctx.register_cli_command("doomed", "help", lambda parser: None)
        ctx.register_skill("doomed-skill", Path(__file__).parent / "SKILL.md")
        raise RuntimeError("half-way")
"""


def test_register_raising_rolls_back_everything_it_registered(
    user_plugins: Path, host: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    write_plugin(user_plugins, "doomed", RAISING, files={"SKILL.md": "---\nname: s\n---\n"})
    with caplog.at_level(logging.WARNING):
        built = host()
    assert "Failed to load plugin 'doomed': half-way" in caplog.messages
    record = built.plugins.get("doomed")
    assert record is not None and record.state == "error"
    assert record.reason == "RuntimeError: half-way"
    assert built.tools.get("doomed_tool") is None
    assert not built.hooks.has("pre_llm_call")
    assert built.commands.lookup("doomed") is None and built.commands.cli_command("doomed") is None
    assert built.skills.plugin_skills("doomed") == []
    assert (record.tools, record.hooks, record.commands, record.skills) == ([], [], [], [])


def test_rollback_restores_a_command_the_failed_plugin_had_replaced(
    user_plugins: Path, host: Factory
) -> None:
    write_plugin(
        user_plugins,
        "a-first",
        """
        def register(ctx):
            ctx.register_command("shared", lambda raw: "from a")
    """,
    )
    write_plugin(
        user_plugins,
        "b-second",
        """
        def register(ctx):
            ctx.register_command("shared", lambda raw: "from b")
            raise ValueError("nope")
    """,
    )
    built = host()
    assert asyncio.run(built.commands.run("shared")) == "from a"


HANGING = """
    import os, time
    def register(ctx):
        ctx.register_tool("early_tool", "slow", {"description": "d", "parameters":
                          {"type": "object", "properties": {}}}, lambda args: "{}")
        WAIT
        ctx.register_tool("late_tool", "slow", {"description": "d", "parameters":
                          {"type": "object", "properties": {}}}, lambda args: "{}")
        ctx.register_hook("post_llm_call", lambda **kw: None)
"""


def test_hanging_register_times_out_rolls_back_and_ignores_late_registrations(
    user_plugins: Path, host: Factory, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    go_on = tmp_path / "go-on"  # register() waits for this file: the host must not
    wait = f"while not os.path.exists({str(go_on)!r}): time.sleep(0.01)"
    write_plugin(user_plugins, "slowpoke", HANGING.replace("WAIT", wait))
    with caplog.at_level(logging.WARNING):
        built = host(config={"plugins": {"load_timeout": 0.3}})
        assert (
            "Failed to load plugin 'slowpoke': register() did not finish within 0.3s"
            in caplog.messages
        )
        assert built.tools.get("early_tool") is None
        go_on.touch()  # the abandoned thread wakes up and tries to register more
        # the tool and the hook, each refused
        wait_until(lambda: len(_late(caplog)) == 2, 10, "two late registrations refused")
    assert built.tools.get("late_tool") is None and not built.hooks.has("post_llm_call")
    assert line(built, "slowpoke") == (
        "  ✗ slowpoke v1.0.0 — TimeoutError: register() did not finish within 0.3s"
    )


def _late(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [m for m in caplog.messages if "after its load was abandoned" in m]


def test_slow_register_within_the_timeout_loads(user_plugins: Path, host: Factory) -> None:
    write_plugin(user_plugins, "steady", HANGING.replace("WAIT", "time.sleep(0.2)"))
    built = host(config={"plugins": {"load_timeout": 3}})
    assert built.plugins.get("steady").state == "loaded"  # type: ignore[union-attr]
    assert built.tools.get("late_tool") is not None


def test_async_register_is_run_to_completion(user_plugins: Path, host: Factory) -> None:
    write_plugin(
        user_plugins,
        "asyncy",
        """
        import asyncio
        async def register(ctx):
            await asyncio.sleep(0)
            ctx.register_hook("on_session_start", lambda **kw: None)
    """,
    )
    assert host().plugins.get("asyncy").hooks == ["on_session_start"]  # type: ignore[union-attr]


def test_unknown_hook_is_warned_about_and_the_plugin_still_loads(
    user_plugins: Path, host: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    write_plugin(
        user_plugins,
        "future",
        """
        def register(ctx):
            ctx.register_hook("on_full_moon", lambda **kw: None)
    """,
    )
    with caplog.at_level(logging.WARNING):
        built = host()
    assert any(
        m.startswith("Plugin 'future' registered unknown hook 'on_full_moon' (valid: ")
        for m in caplog.messages
    )
    assert line(built, "future") == "  ✓ future v1.0.0 (1 hooks)"


def test_bad_tool_schemas_are_rejected_with_reasons_and_the_plugin_still_loads(
    user_plugins: Path, host: Factory
) -> None:
    write_plugin(
        user_plugins,
        "sloppy",
        """
        GOOD = {"description": "ok", "parameters": {"type": "object", "properties": {}}}
        def register(ctx):
            ctx.register_tool("good_tool", "s", GOOD, lambda args: "{}")
            ctx.register_tool("bad name", "s", GOOD, lambda args: "{}")
            ctx.register_tool("no_params", "s", {"description": "x"}, lambda args: "{}")
            ctx.register_tool("array_params", "s", {"parameters": {"type": "array"}},
                              lambda args: "{}")
    """,
    )
    built = host()
    record = built.plugins.get("sloppy")
    assert record is not None and record.state == "loaded" and record.tools == ["good_tool"]
    assert [r.name for r in record.rejected_tools] == ["bad name", "no_params", "array_params"]
    assert "invalid tool name" in record.rejected_tools[0].reason
    assert line(built, "sloppy").startswith("  ✓ sloppy v1.0.0 (1 tools) — rejected tool ")


def test_tool_name_clash_without_override_is_rejected_naming_both_toolsets(
    user_plugins: Path, host: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    body = """
        def register(ctx):
            ctx.register_tool("search_web", "{ts}", {{"description": "d", "parameters":
                              {{"type": "object", "properties": {{}}}}}}, lambda args: "{ts}"{o})
    """
    write_plugin(user_plugins, "a-web", body.format(ts="web", o=""))
    write_plugin(user_plugins, "b-web", body.format(ts="otherweb", o=""))
    with caplog.at_level(logging.ERROR):
        built = host()
    [message] = [m for m in caplog.messages if "search_web" in m]
    assert "'otherweb'" in message and "'web'" in message and "b-web" in message
    assert built.tools.get("search_web").owner == "a-web"  # type: ignore[union-attr]
    assert built.plugins.get("b-web").rejected_tools[0].name == "search_web"  # type: ignore[union-attr]


def test_tool_name_clash_with_override_replaces_the_earlier_tool(
    user_plugins: Path, host: Factory
) -> None:
    body = """
        def register(ctx):
            ctx.register_tool("search_web", "{ts}", {{"description": "d", "parameters":
                              {{"type": "object", "properties": {{}}}}}}, lambda args: "{ts}"{o})
    """
    write_plugin(user_plugins, "a-web", body.format(ts="web", o=""))
    write_plugin(user_plugins, "b-web", body.format(ts="otherweb", o=", override=True"))
    built = host()
    assert asyncio.run(built.tools.call("search_web", {})) == "otherweb"


def test_missing_env_disables_the_plugin_with_the_guide_message(
    user_plugins: Path, host: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    write_plugin(
        user_plugins,
        "weather",
        TOOL_PLUGIN,
        files={"schemas.py": SCHEMAS},
        manifest={"name": "weather", "version": "1.0.0", "requires_env": ["WEATHER_API_KEY"]},
    )
    with caplog.at_level(logging.WARNING):
        built = host(env={})
    assert "Plugin weather disabled (missing: WEATHER_API_KEY)" in caplog.messages
    assert line(built, "weather") == "  ✗ weather v1.0.0 — disabled (missing: WEATHER_API_KEY)"
    assert built.plugins.get("weather").state == "missing-env"  # type: ignore[union-attr]
    assert built.tools.get("echo_text") is None


def test_env_from_process_or_dotenv_satisfies_requires_env(
    user_plugins: Path, host: Factory
) -> None:
    write_plugin(
        user_plugins,
        "weather",
        manifest={
            "name": "weather",
            "requires_env": [
                "FROM_ENV",
                {"name": "FROM_DOTENV", "secret": True},
                {"name": "STILL_MISSING", "password": True},
            ],
        },
    )
    built = host(env={"FROM_ENV": "1"}, dotenv={"FROM_DOTENV": "2"})
    record = built.plugins.get("weather")
    assert record is not None and record.missing_env == ["STILL_MISSING"]
    assert record.manifest is not None
    assert [r.secret for r in record.manifest.requires_env] == [False, True, True]
    built = host(env={"FROM_ENV": "1", "STILL_MISSING": "3"}, dotenv={"FROM_DOTENV": "2"})
    assert built.plugins.get("weather").state == "loaded"  # type: ignore[union-attr]


def test_enabled_list_restricts_loading_and_others_are_listed_not_enabled(
    user_plugins: Path, host: Factory
) -> None:
    for name in ("alpha", "beta"):
        write_plugin(user_plugins, name)
    built = host(config={"plugins": {"enabled": ["beta"]}})
    assert [(r.key, r.state) for r in built.plugins.records()] == [
        ("alpha", "not-enabled"),
        ("beta", "loaded"),
    ]
    assert line(built, "alpha") == "  ✗ alpha v1.0.0 — not enabled in config"


def test_without_an_enabled_list_every_plugin_loads(user_plugins: Path, host: Factory) -> None:
    for name in ("alpha", "beta"):
        write_plugin(user_plugins, name)
    assert all(r.loaded for r in host().plugins.records())


def test_disabled_always_wins(user_plugins: Path, host: Factory) -> None:
    write_plugin(user_plugins, "alpha")
    built = host(config={"plugins": {"enabled": ["alpha"], "disabled": ["alpha"]}})
    assert built.plugins.get("alpha").state == "disabled"  # type: ignore[union-attr]
    assert line(built, "alpha") == "  ✗ alpha v1.0.0 — disabled in config"


def test_category_layout_gives_category_slash_folder_keys(
    user_plugins: Path, host: Factory
) -> None:
    write_plugin(user_plugins, "image_gen/openai", manifest={"name": "openai"})
    write_plugin(user_plugins, "tts/openai", manifest={"name": "openai"})
    write_plugin(user_plugins, "deep/er/still", manifest={"name": "still"})
    built = host()
    assert [r.key for r in built.plugins.records()] == ["image_gen/openai", "tts/openai"]
    assert "hermes_plugins.image_gen__openai" in sys.modules


def test_hermes_plugin_path_takes_one_plugin_or_a_folder_of_plugins(
    tmp_path: Path, host: Factory
) -> None:
    single = write_plugin(tmp_path / "nix", "single")
    write_plugin(tmp_path / "many", "one")
    write_plugin(tmp_path / "many", "two")
    env = {"HERMES_PLUGIN_PATH": f"{single}:{tmp_path / 'many'}"}
    built = host(env=env, config={"plugins": {"enabled": []}})
    assert [(r.key, r.source, r.state) for r in built.plugins.records()] == [
        ("single", "path", "loaded"),
        ("one", "path", "loaded"),
        ("two", "path", "loaded"),
    ]


def test_project_plugins_load_only_when_opted_in(tmp_path: Path, host: Factory) -> None:
    project = tmp_path / "project"
    write_plugin(project / ".hermes" / "plugins", "local")
    assert host(cwd=project).plugins.records() == []
    for value in ("1", "true", "yes", "on"):
        built = host(env={"HERMES_ENABLE_PROJECT_PLUGINS": value}, cwd=project)
        assert [(r.key, r.source) for r in built.plugins.records()] == [("local", "project")]


def test_safe_mode_skips_discovery(user_plugins: Path, host: Factory) -> None:
    write_plugin(user_plugins, "alpha")
    assert host(env={"HERMES_SAFE_MODE": "1"}).plugins.records() == []


def test_later_source_wins_a_key_collision(
    tmp_path: Path, user_plugins: Path, host: Factory
) -> None:
    write_plugin(tmp_path / "bundled", "dup", manifest={"name": "dup", "version": "1"})
    write_plugin(user_plugins, "dup", manifest={"name": "dup", "version": "2"})
    built = host(env={"HERMES_BUNDLED_PLUGINS": str(tmp_path / "bundled")})
    [record] = built.plugins.records()
    assert (record.source, record.version) == ("user", "2")


def test_load_order_is_sources_in_scan_order_then_alphabetical(
    tmp_path: Path, user_plugins: Path, host: Factory
) -> None:
    inject = """
        def register(ctx):
            ctx.register_hook("pre_llm_call", lambda **kw: {{"context": "{name}"}})
    """
    write_plugin(tmp_path / "bundled", "zeta", inject.format(name="zeta"))
    for name in ("beta", "alpha"):
        write_plugin(user_plugins, name, inject.format(name=name))
    write_plugin(tmp_path / "path", "mid", inject.format(name="mid"))
    built = host(
        env={
            "HERMES_BUNDLED_PLUGINS": str(tmp_path / "bundled"),
            "HERMES_PLUGIN_PATH": str(tmp_path / "path"),
        }
    )
    context = asyncio.run(built.hooks.pre_llm_context(session_id="s", user_message="hi"))
    assert context == "zeta\n\nmid\n\nalpha\n\nbeta"


def test_tools_json_supplies_schemas_and_register_tool_only_binds_handlers(
    user_plugins: Path, host: Factory
) -> None:
    declared = [
        {
            "name": "get_weather",
            "description": "Get the weather of a city and return it",
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {"city": {"type": "string", "description": "city"}},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "send_alert",
                "description": "Send an alert and return its id",
                "parameters": {"type": "object", "properties": {}},
            },
        },
        {
            "name": "never_bound",
            "description": "Declared but unused and returns nothing",
            "parameters": {"type": "object", "properties": {}},
        },
    ]
    write_plugin(
        user_plugins,
        "declared",
        """
        def register(ctx):
            ctx.register_tool("get_weather", "weather", None, lambda args: "sunny")
            ctx.register_tool(name="send_alert", toolset="weather",
                              schema={"parameters": {"type": "array"}},
                              handler=lambda args: "sent")
    """,
        tools_json=declared,
    )
    built = host()
    record = built.plugins.get("declared")
    assert record is not None and record.tools == ["get_weather", "send_alert"]
    functions = [t["function"] for t in built.tools.openai_tools({"weather"})]
    assert functions[0]["parameters"]["required"] == ["city"]
    assert functions[1]["parameters"]["type"] == "object"
    assert any(w.tool == "never_bound" for w in record.warnings)


def test_malformed_tools_json_fails_the_plugin(user_plugins: Path, host: Factory) -> None:
    path = write_plugin(user_plugins, "declared")
    (path / "tools.json").write_text("{oops")
    record = host().plugins.get("declared")
    assert record is not None and record.state == "error" and "tools.json" in record.reason


def test_tool_lint_and_manifest_drift_become_warnings(user_plugins: Path, host: Factory) -> None:
    write_plugin(
        user_plugins,
        "drifty",
        """
        def register(ctx):
            ctx.register_tool("weather", "w", {"description": "Weather",
                              "parameters": {"type": "object", "properties": {}}},
                              lambda args: "{}")
    """,
        manifest={
            "name": "drifty",
            "provides_tools": ["get_weather"],
            "provides_hooks": ["post_tool_call"],
        },
    )
    record = host().plugins.get("drifty")
    assert record is not None and record.loaded
    text = [w.message for w in record.warnings]
    assert any("not verb_noun" in m for m in text)
    assert any("too short" in m for m in text)
    assert "tool 'get_weather' is listed in provides_tools but was not registered" in text
    assert "tool 'weather' was registered but is not listed in provides_tools" in text
    assert "hook 'post_tool_call' is listed in provides_hooks but was not registered" in text


def test_unload_all_removes_registrations_and_plugin_modules(
    user_plugins: Path, host: Factory
) -> None:
    write_plugin(user_plugins, "echo", TOOL_PLUGIN, files={"schemas.py": SCHEMAS})
    built = host()
    built.plugins.unload_all()
    assert built.tools.get("echo_text") is None and not built.hooks.has("post_tool_call")
    assert not [m for m in sys.modules if m.startswith("hermes_plugins.")]
    assert built.plugins.records() == []
    assert built.tools.get("skill_view") is not None  # built-ins stay


def test_reload_picks_up_changed_plugin_code(user_plugins: Path, host: Factory) -> None:
    body = """
        from .version import TEXT
        def register(ctx):
            ctx.register_command("which", lambda raw: TEXT)
    """
    path = write_plugin(user_plugins, "changing", body, files={"version.py": "TEXT = 'one'\n"})
    built = host()
    assert asyncio.run(built.commands.run("which")) == "one"
    (path / "version.py").write_text("TEXT = 'two'\n")
    built.plugins.reload()
    assert asyncio.run(built.commands.run("which")) == "two"


def test_bundled_calculator_lists_as_the_guide_shows(hermes_home: Path) -> None:
    built = make_host(hermes_home, env={"HERMES_BUNDLED_PLUGINS": ""})  # the repo's plugins/
    try:
        built.plugins.load_all()
        lines = built.plugins.listing_text().splitlines()
        assert lines[0] == f"Plugins ({len(lines) - 1}):"
        assert "  ✓ calculator v1.0.0 (2 tools, 1 hooks)" in lines
        result = asyncio.run(built.tools.call("calculate", '{"expression": "2**16"}'))
        assert json.loads(result)["result"] == 65536
        record = built.plugins.get("calculator")
        assert record is not None and record.source == "bundled"
        assert record.skills == ["calculator:math-checks"]
    finally:
        built.plugins.unload_all()


def test_guide_listing_for_the_calculator_alone(hermes_home: Path, tmp_path: Path) -> None:
    bundled = tmp_path / "only-calculator"
    bundled.mkdir()
    (bundled / "calculator").symlink_to(
        Path(__file__).resolve().parents[2] / "plugins" / "calculator"
    )
    built = make_host(hermes_home, env={"HERMES_BUNDLED_PLUGINS": str(bundled)})
    try:
        built.plugins.load_all()
        assert built.plugins.listing_text() == (
            "Plugins (1):\n  ✓ calculator v1.0.0 (2 tools, 1 hooks)"
        )
    finally:
        built.plugins.unload_all()
