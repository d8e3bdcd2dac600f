"""The ``ctx`` API plugins call: commands, CLI commands, skills, dispatch, injection, extras."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.plugins.host import PluginHost
from hermesd.plugins.manifest import Manifest, PluginRecord
from hermesd.plugins.registrar import PluginContext
from tests.support.plugin_factory import make_host, schema, write_plugin


@pytest.fixture
def host(tmp_path: Path) -> Iterator[PluginHost]:
    built = make_host(tmp_path / "home")
    yield built
    built.plugins.unload_all()


def context(host: PluginHost, key: str = "demo") -> PluginContext:
    record = PluginRecord(
        key=key,
        name=key,
        source="user",
        path=None,
        version="1.2",
        manifest=Manifest(name=key, version="1.2", key=key),
    )
    return PluginContext(record, host.plugins.services)


def test_context_exposes_name_manifest_and_home(host: PluginHost) -> None:
    ctx = context(host)
    assert ctx.plugin_name == "demo" and ctx.manifest.name == "demo"
    assert ctx.manifest.version == "1.2" and ctx.hermes_home == host.plugins.home
    assert ctx.profile_name == "default"


def test_unknown_context_attributes_raise_attribute_error(host: PluginHost) -> None:
    with pytest.raises(AttributeError):
        context(host).register_platform  # noqa: B018


def test_command_names_are_normalised(host: PluginHost) -> None:
    context(host).register_command("  /My Status ", lambda raw: "ok")
    command = host.commands.lookup("my-status")
    assert command is not None and command.owner == "demo"


@pytest.mark.parametrize(
    "name, shown",
    [
        ("help", "help"),
        ("/Model", "model"),
        ("reset", "reset"),
        ("reload-plugins", "reload-plugins"),
    ],
)
def test_builtin_names_and_aliases_cannot_be_taken(
    host: PluginHost, caplog: pytest.LogCaptureFixture, name: str, shown: str
) -> None:
    with caplog.at_level(logging.WARNING):
        context(host).register_command(name, lambda raw: "mine")
    assert (
        f"Plugin 'demo' tried to register command '/{shown}' which conflicts with a "
        "built-in command. Skipping."
    ) in caplog.messages
    assert host.commands.lookup(shown).owner == "builtin"  # type: ignore[union-attr]


def test_builtin_commands_are_registered_through_the_same_registry(host: PluginHost) -> None:
    names = {c.name for c in host.commands.slash_commands() if c.owner == "builtin"}
    assert {
        "help",
        "new",
        "plugins",
        "tools",
        "skills",
        "sessions",
        "title",
        "model",
        "status",
        "approve",
        "deny",
        "reload-plugins",
        "quit",
    } <= names
    assert host.commands.lookup("reset").name == "new"  # type: ignore[union-attr]
    assert host.commands.lookup("exit").name == "quit"  # type: ignore[union-attr]


def test_help_is_a_synonym_of_description(host: PluginHost) -> None:
    context(host).register_command("scan", lambda raw: "", help="Find files")
    assert host.commands.lookup("scan").description == "Find files"  # type: ignore[union-attr]


def test_handler_taking_ctx_and_raw_args_gets_the_context(host: PluginHost) -> None:
    ctx = context(host)

    def handler(ctx: PluginContext, argstr: str) -> str:
        return f"{ctx.plugin_name}:{argstr}"

    ctx.register_command("who", handler)
    assert asyncio.run(host.commands.run("who", "x y")) == "demo:x y"


def test_async_command_handler_is_awaited(host: PluginHost) -> None:
    async def handler(raw: str) -> str:
        await asyncio.sleep(0)
        return raw[::-1]

    context(host).register_command("rev", handler)
    assert asyncio.run(host.commands.run("rev", "abc")) == "cba"


def test_failing_command_handler_gives_a_message_not_an_exception(host: PluginHost) -> None:
    context(host).register_command("oops", lambda raw: 1 / 0)
    assert asyncio.run(host.commands.run("oops")) == (
        "Command /oops failed: ZeroDivisionError: division by zero"
    )


def test_later_plugin_wins_a_command_name_with_a_warning(
    host: PluginHost, caplog: pytest.LogCaptureFixture
) -> None:
    context(host, "first").register_command("same", lambda raw: "first")
    with caplog.at_level(logging.WARNING):
        context(host, "second").register_command("same", lambda raw: "second")
    assert asyncio.run(host.commands.run("same")) == "second"
    assert any("replacing the one from plugin 'first'" in m for m in caplog.messages)


def test_cli_command_setup_fn_builds_an_argparse_tree(host: PluginHost) -> None:
    def setup(parser: argparse.ArgumentParser) -> None:
        subs = parser.add_subparsers(dest="action")
        subs.add_parser("status")

    context(host).register_cli_command(
        "my-plugin", "Manage it", setup, handler_fn=lambda args: args.action
    )
    command = host.commands.cli_command("my-plugin")
    assert command is not None and command.owner == "demo" and command.help == "Manage it"
    parser = argparse.ArgumentParser()
    command.setup_fn(parser)
    assert command.handler_fn(parser.parse_args(["status"])) == "status"  # type: ignore[misc]


def test_cli_command_may_not_take_a_reserved_name(host: PluginHost) -> None:
    host.commands.reserve_cli_names(["plugins", "chat"])
    context(host).register_cli_command("chat", "mine", lambda parser: None)
    assert host.commands.cli_command("chat") is None


@pytest.mark.parametrize(
    "name, error", [("a:b", "must not contain ':'"), ("bad name", "Must match"), ("", "Must match")]
)
def test_register_skill_rejects_bad_names(
    host: PluginHost, tmp_path: Path, name: str, error: str
) -> None:
    skill = tmp_path / "SKILL.md"
    skill.write_text("# s\n")
    with pytest.raises(ValueError, match=error):
        context(host).register_skill(name, skill)


def test_register_skill_requires_the_file(host: PluginHost, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        context(host).register_skill("ghost", tmp_path / "nope" / "SKILL.md")


def test_register_skill_qualifies_with_the_plugin_key(host: PluginHost, tmp_path: Path) -> None:
    skill = tmp_path / "SKILL.md"
    skill.write_text("---\ndescription: Checks things\n---\n# s\n")
    context(host).register_skill("checks", skill)
    [registered] = host.skills.plugin_skills("demo")
    assert (registered.name, registered.description) == ("demo:checks", "Checks things")


SCANNER = """
    def handle_scan(ctx, argstr):
        return ctx.dispatch_tool("find_files", {"pattern": argstr})

    def register(ctx):
        ctx.register_command("scan", handle_scan, help="Find files")
"""


def test_dispatch_tool_from_a_command_goes_through_hooks(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_plugin(home / "plugins", "scanner", SCANNER)
    built = make_host(home)
    built.tools.register(
        "find_files",
        "files",
        schema("find_files", pattern="string"),
        lambda args: json.dumps({"found": [args["pattern"]]}),
    )
    built.hooks.register(
        "guard",
        "pre_tool_call",
        lambda tool_name, args, **kw: (
            {"action": "block", "message": "not *.key"} if args["pattern"] == "*.key" else None
        ),
    )
    seen: list[str] = []
    built.hooks.register("audit", "post_tool_call", lambda status, **kw: seen.append(status))
    built.plugins.load_all()

    async def main() -> tuple[Any, Any]:
        built.tools.attach_loop(asyncio.get_running_loop())
        return (await built.commands.run("scan", "*.py"), await built.commands.run("scan", "*.key"))

    try:
        allowed, blocked = asyncio.run(main())
    finally:
        built.plugins.unload_all()
    assert json.loads(allowed) == {"found": ["*.py"]}
    assert json.loads(blocked) == {"error": "not *.key"}
    assert seen == ["ok", "blocked"]


def test_dispatch_tool_uses_the_current_session(host: PluginHost) -> None:
    sessions: list[str] = []
    host.tools.register(
        "note_session",
        "t",
        schema("note_session"),
        lambda args, session_id: sessions.append(session_id) or "{}",
    )
    ctx = context(host)
    host.tools.register(
        "outer_tool", "t", schema("outer_tool"), lambda args: ctx.dispatch_tool("note_session", {})
    )
    asyncio.run(host.tools.call("outer_tool", {}, session_id="sess-7"))
    ctx.dispatch_tool("note_session", {}, task_id="explicit")
    assert sessions == ["sess-7", "explicit"]


def test_inject_message_without_an_active_session_returns_false(host: PluginHost) -> None:
    assert context(host).inject_message("hello") is False


def test_inject_message_delegates_to_the_injector(host: PluginHost) -> None:
    got: list[tuple[str, str]] = []
    host.plugins.services.injector = lambda content, role: got.append((content, role)) or True
    assert context(host).inject_message("hello", role="system") is True
    assert got == [("hello", "system")]
    host.plugins.services.injector = lambda content, role: 1 / 0
    assert context(host).inject_message("again") is False


ENGINE_PLUGIN = """
from agent.context_engine import ContextEngine

class Tiny(ContextEngine):
    name = "{name}"
    def update_from_response(self, usage): pass
    def should_compress(self, prompt_tokens=None): return False
    def compress(self, messages, current_tokens=None): return messages

def register(ctx):
    ctx.register_context_engine(Tiny())
"""


def test_register_context_engine_is_one_slot_and_takes_only_context_engines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    write_plugin(home / "plugins", "first", ENGINE_PLUGIN.format(name="one"))
    write_plugin(home / "plugins", "second", ENGINE_PLUGIN.format(name="two"))
    write_plugin(
        home / "plugins",
        "an-object",  # loads first: the slot is still free
        """
        def register(ctx):
            ctx.register_context_engine(object())
    """,
    )
    built = make_host(home)
    with caplog.at_level(logging.WARNING):
        built.plugins.load_all()
    slot = built.plugins.services.context_engines
    assert slot.engine is not None and slot.engine.name == "one"
    assert (
        "Plugin 'second' tried to register a context engine, but one is already registered. "
        "Only one context engine plugin is allowed." in caplog.messages
    )
    assert any(
        "'an-object'" in m and "not an agent.context_engine.ContextEngine" in m
        for m in caplog.messages
    )
    built.plugins.unload_all()
    assert slot.engine is None


def test_unknown_middleware_kind_is_stored_and_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    write_plugin(
        home / "plugins",
        "fancy",
        """
        def register(ctx):
            ctx.register_middleware("request", lambda **kw: None)
            ctx.register_middleware("api_execution", lambda **kw: None)
    """,
    )
    built = make_host(home)
    with caplog.at_level(logging.WARNING):
        built.plugins.load_all()
    record = built.plugins.get("fancy")
    assert record is not None and record.middleware == ["request", "llm_execution"]
    assert built.hooks.middleware.has("request")
    assert built.hooks.middleware.has("llm_execution")
    assert (
        "Plugin 'fancy' registered unknown middleware 'request' (valid: llm_execution, "
        "llm_request, tool_execution, tool_request)" in caplog.messages
    )
    built.plugins.unload_all()
    assert not built.hooks.middleware.has("request")
