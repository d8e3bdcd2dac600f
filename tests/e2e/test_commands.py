"""Slash commands over the real socket: ``command.run``, ``commands.list``, ``hermesctl cmd``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, reply
from tests.support.plugin_factory import write_plugin

Start = Callable[..., DaemonProcess]

COMMANDS_PLUGIN = """
import asyncio, json, time

def register(ctx):
    ctx.register_command("echo", lambda raw: f"echo:{raw}", description="Echo the arguments",
                         args_hint="<text>")

    async def later(raw):
        await asyncio.sleep(0.05)
        return f"async:{raw}"
    ctx.register_command("later", later, help="Answer after a moment")

    def boom(raw):
        raise ValueError("the widget broke")
    ctx.register_command("boom", boom, description="Always fails")

    def hang(raw):
        time.sleep(30)
    ctx.register_command("hang", hang, description="Never answers in time")

    ctx.register_command("help", lambda raw: "mine", description="Clashes with a built-in")
    ctx.register_command("reset", lambda raw: "mine", description="Clashes with an alias")

    ctx.register_tool("peek_session", "probe", {
        "name": "peek_session", "description": "Return the session id the call ran in",
        "parameters": {"type": "object", "properties": {}}},
        lambda args, **kw: json.dumps({"session": kw.get("session_id")}))
    ctx.register_command("peek", lambda raw: ctx.dispatch_tool("peek_session", {}),
                         description="Call a tool through the pipeline")
"""


def env() -> dict[str, str]:
    return {"HERMES_BUNDLED_PLUGINS": "/nonexistent"}


def start_with_plugin(start: Start, config: str = "") -> DaemonProcess:
    home = short_tmpdir()
    write_plugin(home / "plugins", "cmds", COMMANDS_PLUGIN)
    return start(home, config=config or None, env=env())


@pytest.fixture(scope="module")
def cmds() -> Iterator[DaemonProcess]:
    """One daemon for the tests that do not change its plugins or settings."""
    home = short_tmpdir()
    write_plugin(home / "plugins", "cmds", COMMANDS_PLUGIN)
    daemon = start_daemon(home, env=env())
    yield daemon
    daemon.stop()


def run(daemon: DaemonProcess, line: str, session_id: str | None = None) -> dict:
    params = {"line": line}
    if session_id:
        params["session_id"] = session_id
    return daemon.call("command.run", params)


def test_help_lists_builtins_and_plugin_commands_with_descriptions_and_hints(cmds) -> None:
    out = run(cmds, "/help")["output"]
    assert "  /new [title]" in out and "(alias /reset)" in out
    assert "/reload-plugins" in out and "/approve" in out
    plugin_part = out.split("Plugin commands:")[1]
    assert "/echo <text>" in plugin_part and "Echo the arguments" in plugin_part
    assert "Answer after a moment" in plugin_part  # help= is a synonym of description=


def test_sync_plugin_command_gets_the_raw_argument_string(cmds) -> None:
    result = run(cmds, "/echo  a b  c")
    assert result["output"] == "echo:a b  c" and result["ok"] is True


def test_command_works_without_the_leading_slash(cmds) -> None:
    assert run(cmds, "echo hi")["output"] == "echo:hi"


def test_async_plugin_command_is_awaited(cmds) -> None:
    assert run(cmds, "/later x")["output"] == "async:x"


def test_raising_plugin_command_reports_plugin_command_error_and_logs_the_traceback(cmds) -> None:
    result = run(cmds, "/boom")
    assert result == {**result, "output": "Plugin command error: the widget broke", "ok": False}
    log = cmds.log()
    assert "Traceback" in log and "ValueError: the widget broke" in log
    assert run(cmds, "/echo still here")["output"] == "echo:still here"


def test_hanging_plugin_command_is_bounded_by_commands_timeout(start: Start) -> None:
    daemon = start_with_plugin(start, "commands:\n  timeout: 0.5\n")
    began = time.monotonic()
    result = run(daemon, "/hang")
    assert time.monotonic() - began < 5
    assert result["ok"] is False and "did not finish within 0.5s" in result["output"]
    assert run(daemon, "/echo ok")["output"] == "echo:ok"


def test_plugin_command_clashing_with_a_builtin_is_skipped_with_the_reference_warning(cmds) -> None:
    assert run(cmds, "/help")["output"].startswith("Commands:")
    log = cmds.log()
    for name in ("help", "reset"):
        assert (
            f"Plugin 'cmds' tried to register command '/{name}' which conflicts with a "
            "built-in command. Skipping."
        ) in log


def test_unknown_command_is_a_not_found_error_and_the_daemon_keeps_serving(cmds) -> None:
    with pytest.raises(RpcError) as err:
        run(cmds, "/nope now")
    assert err.value.code == Codes.NOT_FOUND
    assert err.value.message == "Unknown command: /nope. Type /help for the list."
    assert run(cmds, "/echo 1")["output"] == "echo:1"


@pytest.mark.parametrize("line", ["", "   ", "/"])
def test_a_line_without_a_command_name_is_invalid_params(cmds, line: str) -> None:
    with pytest.raises(RpcError) as err:
        run(cmds, line)
    assert err.value.code == Codes.INVALID_PARAMS


def test_command_dispatch_tool_runs_the_tool_in_the_calling_session(cmds) -> None:
    with cmds.client() as c:
        sid = c.call("session.create")["id"]
        result = c.call("command.run", {"line": "/peek", "session_id": sid})
    assert result["output"] == json.dumps({"session": sid})


def test_title_renames_the_session(cmds) -> None:
    with cmds.client() as c:
        sid = c.call("session.create")["id"]
        result = c.call("command.run", {"line": "/title  Budget   review", "session_id": sid})
        assert result["output"] == "Title set to: Budget review"
        assert c.call("session.get", {"session_id": sid})["title"] == "Budget review"


def test_title_without_a_session_fails_with_a_clear_message(cmds) -> None:
    result = run(cmds, "/title x")
    assert result["ok"] is False and "needs a session" in result["output"]


def test_model_shows_and_sets_the_session_model(cmds) -> None:
    with cmds.client() as c:
        sid = c.call("session.create")["id"]
        assert c.call("command.run", {"line": "/model", "session_id": sid})["output"] == (
            "Model: (not configured)"
        )
        c.call("command.run", {"line": "/model small-model", "session_id": sid})
        assert c.call("session.get", {"session_id": sid})["model"] == "small-model"


def test_new_and_reset_create_a_session_attached_to_the_caller(cmds) -> None:
    with cmds.client() as c:
        old = c.call("session.create")["id"]
        for line in ("/new", "/reset Fresh start"):
            result = c.call("command.run", {"line": line, "session_id": old})
            assert result["action"] == "session" and result["session"]["id"] != old
            assert result["session"]["attached"] == 1
        assert result["session"]["title"] == "Fresh start"


def test_sessions_lists_recent_sessions_marking_the_current_one(cmds) -> None:
    with cmds.client() as c:
        sid = c.call("session.create", {"title": "alpha"})["id"]
        out = c.call("command.run", {"line": "/sessions", "session_id": sid})["output"]
    assert f"*{sid}" in out and "alpha" in out


def test_plugins_tools_skills_and_status_print_listings(cmds) -> None:
    assert run(cmds, "/plugins")["output"].startswith("Plugins (1):\n  ✓ cmds")
    assert "peek_session (probe)" in run(cmds, "/tools")["output"]
    assert run(cmds, "/skills")["output"] == "No skills installed."
    assert "hermesd" in run(cmds, "/status")["output"]


def test_approve_and_deny_without_an_approval_service_say_nothing_is_pending(cmds) -> None:
    assert run(cmds, "/approve")["output"] == "No pending approvals."
    assert run(cmds, "/deny")["output"] == "No pending approvals."


def test_quit_is_answered_with_a_client_side_hint(cmds) -> None:
    result = run(cmds, "/exit")
    assert result["action"] == "quit" and "client" in result["output"]


def test_commands_are_never_sent_to_the_model(start: Start) -> None:
    with ScriptedModelServer([reply("hi")]) as srv:
        daemon = start_with_plugin(start, f"model:\n  base_url: {srv.url}\n  default: m\n")
        with daemon.client() as c:
            sid = c.call("session.create")["id"]
            for line in ("/echo secret", "/help", "/title t"):
                c.call("command.run", {"line": line, "session_id": sid})
            assert c.call("session.get", {"session_id": sid})["message_count"] == 0
        assert srv.requests == []


def test_commands_list_gives_names_aliases_and_owners_for_completion(cmds) -> None:
    commands = {c["name"]: c for c in cmds.call("commands.list")["commands"]}
    assert commands["new"]["aliases"] == ["reset"] and commands["new"]["builtin"] is True
    assert commands["echo"] == {
        "name": "echo",
        "aliases": [],
        "description": "Echo the arguments",
        "args_hint": "<text>",
        "owner": "cmds",
        "builtin": False,
    }


def test_reload_plugins_command_picks_up_changed_code(start: Start) -> None:
    cmds = start_with_plugin(start)
    init = cmds.home / "plugins" / "cmds" / "__init__.py"
    init.write_text(init.read_text().replace('f"echo:{raw}"', 'f"echo-v2:{raw}!"'))
    assert run(cmds, "/reload-plugins")["output"].startswith("Reloaded plugins: 1 found — 1 loaded")
    assert run(cmds, "/echo x")["output"] == "echo-v2:x!"


def test_hermesctl_cmd_prints_output_and_exits_0(cmds) -> None:
    for line in (["/plugins"], ["plugins"]):
        proc = run_hermesctl(["--socket", str(cmds.socket), "cmd", *line])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("Plugins (1):")


def test_hermesctl_cmd_exits_1_on_unknown_or_failing_commands(cmds) -> None:
    proc = run_hermesctl(["--socket", str(cmds.socket), "cmd", "/nope"])
    assert proc.returncode == 1 and "Unknown command: /nope" in proc.stderr
    proc = run_hermesctl(["--socket", str(cmds.socket), "cmd", "/boom"])
    assert proc.returncode == 1 and proc.stderr.strip() == "Plugin command error: the widget broke"


def test_hermesctl_cmd_passes_the_session(cmds) -> None:
    sid = cmds.call("session.create")["id"]
    proc = run_hermesctl(["--socket", str(cmds.socket), "cmd", "--session", sid, "/title", "T1"])
    assert proc.returncode == 0 and proc.stdout.strip() == "Title set to: T1"


def test_of_two_plugins_with_one_command_the_later_loaded_wins_with_a_warning(start: Start) -> None:
    home = short_tmpdir()
    for key in ("aaa", "bbb"):
        write_plugin(
            home / "plugins",
            key,
            f"def register(ctx):\n    ctx.register_command('dup', lambda raw: '{key}')\n",
        )
    daemon = start(home, env=env())
    assert run(daemon, "/dup")["output"] == "bbb"
    assert "Plugin 'bbb' registered command '/dup', replacing the one from plugin 'aaa'" in (
        daemon.log()
    )
