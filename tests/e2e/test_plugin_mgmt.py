"""Plugin management through hermesctl and the daemon: install (real git), env prompts on a
pseudo-terminal, update, remove, enable/disable in config.yaml, lint, hot reload and SIGHUP."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from dotenv import dotenv_values

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.plugin_factory import write_plugin

Start = Callable[..., DaemonProcess]
ENV = {"HERMES_BUNDLED_PLUGINS": "/nonexistent"}

WEATHER_MANIFEST = """\
name: weather
version: 1.0.0
description: Weather lookups
requires_env:
  - name: WEATHER_API_KEY
    description: API key for the weather service
    url: https://example.com/keys
    secret: true
  - name: WEATHER_UNITS
    description: metric or imperial
"""
WEATHER_INIT = """
import json, os

def register(ctx):
    ctx.register_tool("get_weather", "weather", {
        "name": "get_weather", "description": "Return the lengths of the configured units and key",
        "parameters": {"type": "object", "properties": {}}},
        lambda args, **kw: json.dumps({"units_len": len(os.environ.get("WEATHER_UNITS", "")),
                                       "key_len": len(os.environ.get("WEATHER_API_KEY", ""))}))
"""


def notes_init(marker: str) -> str:
    return f"""
import json

def register(ctx):
    ctx.register_tool("read_notes", "notes", {{
        "name": "read_notes", "description": "Return the notes plugin's version marker",
        "parameters": {{"type": "object", "properties": {{}}}}}},
        lambda args, **kw: json.dumps({{"marker": "{marker}"}}))
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def git_plugin(name: str, init: str, manifest: str | None = None) -> Path:
    """A real git repository holding one committed plugin."""
    repo = short_tmpdir("repo-") / name
    write_plugin(repo.parent, name, init, manifest=manifest or f"name: {name}\nversion: 1.0.0\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def ctl(daemon: DaemonProcess, *args: str, **kw) -> subprocess.CompletedProcess[str]:
    return run_hermesctl(["--socket", str(daemon.socket), *args], **kw)


@pytest.fixture
def daemon(start: Start) -> DaemonProcess:
    return start(env=ENV)


def plugin_state(daemon: DaemonProcess, key: str) -> str | None:
    rows = {p["key"]: p for p in daemon.call("plugins.list")["plugins"]}
    return rows[key]["state"] if key in rows else None


def run_on_pty(
    argv: list[str], answers: list[tuple[str, str]], timeout: float = 30.0
) -> tuple[int, str]:
    """Run argv with a pseudo-terminal as its controlling tty; answer each prompt in turn."""
    pid, fd = pty.fork()
    if pid == 0:  # child
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
        try:
            os.execve(sys.executable, [sys.executable, "-m", "hermesctl", *argv], env)
        finally:
            os._exit(127)
    seen, pending = "", list(answers)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            seen += data.decode(errors="replace")
        if pending and pending[0][0] in seen.split("\x00")[-1]:
            prompt, answer = pending.pop(0)
            seen = seen.replace(prompt, prompt + "\x00", 1)  # answer each prompt once
            os.write(fd, answer.encode() + b"\r")
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), seen.replace("\x00", "")


# --- install -----------------------------------------------------------------------------------


def test_install_from_a_git_repository_prompts_for_missing_env_on_the_terminal(daemon) -> None:
    repo = git_plugin("weather", WEATHER_INIT, WEATHER_MANIFEST)
    secret = "s3cr3t-value-9f"
    status, out = run_on_pty(
        ["--socket", str(daemon.socket), "plugins", "install", f"file://{repo}"],
        [
            ("WEATHER_API_KEY (empty to skip): ", secret),
            ("WEATHER_UNITS (empty to skip): ", "metric"),
        ],
    )
    assert status == 0, out
    assert "WEATHER_API_KEY: API key for the weather service" in out
    assert "Get yours at: https://example.com/keys" in out
    assert secret not in out  # hidden input for secrets
    assert "✓ weather v1.0.0 (1 tools)" in out
    env_file = daemon.home / ".env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    assert dotenv_values(env_file) == {"WEATHER_API_KEY": secret, "WEATHER_UNITS": "metric"}
    result = json.loads(daemon.call("tools.call", {"name": "get_weather"})["result"])
    assert result == {"units_len": len("metric"), "key_len": len(secret)}
    assert (daemon.home / "plugins" / "weather" / ".git").is_dir()
    assert secret not in daemon.log()


def test_an_empty_answer_skips_the_variable_and_leaves_the_plugin_disabled(daemon) -> None:
    repo = git_plugin("weather", WEATHER_INIT, WEATHER_MANIFEST)
    status, out = run_on_pty(
        ["--socket", str(daemon.socket), "plugins", "install", f"file://{repo}"],
        [("WEATHER_API_KEY (empty to skip): ", ""), ("WEATHER_UNITS (empty to skip): ", "si")],
    )
    assert status == 0, out
    assert "✗ weather v1.0.0 — disabled (missing: WEATHER_API_KEY)" in out
    assert dotenv_values(daemon.home / ".env") == {"WEATHER_UNITS": "si"}


def test_install_with_no_input_leaves_the_plugin_disabled_with_the_reason(daemon) -> None:
    repo = git_plugin("weather", WEATHER_INIT, WEATHER_MANIFEST)
    proc = ctl(daemon, "plugins", "install", "--no-input", f"file://{repo}")
    assert proc.returncode == 0, proc.stderr
    assert "✗ weather v1.0.0 — disabled (missing: WEATHER_API_KEY, WEATHER_UNITS)" in proc.stdout
    assert plugin_state(daemon, "weather") == "missing-env"
    assert not (daemon.home / ".env").exists()


def test_install_reports_missing_env_to_the_client(daemon) -> None:
    repo = git_plugin("weather", WEATHER_INIT, WEATHER_MANIFEST)
    result = daemon.call("plugins.install", {"source": f"file://{repo}"})
    assert result["missing_env"][0] == {
        "name": "WEATHER_API_KEY",
        "description": "API key for the weather service",
        "url": "https://example.com/keys",
        "secret": True,
    }


def test_install_refuses_to_overwrite_without_force(daemon) -> None:
    repo = git_plugin("notes", notes_init("v1"))
    assert ctl(daemon, "plugins", "install", f"file://{repo}").returncode == 0
    proc = ctl(daemon, "plugins", "install", f"file://{repo}")
    assert proc.returncode == 1 and "already installed" in proc.stderr
    proc = ctl(daemon, "plugins", "install", "--force", f"file://{repo}")
    assert proc.returncode == 0 and "(replaced)" in proc.stdout


def test_install_from_a_local_folder_copies_it(daemon) -> None:
    folder = write_plugin(short_tmpdir("src-"), "notes", notes_init("copied"))
    proc = ctl(daemon, "plugins", "install", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert "✓ notes v1.0.0 (1 tools)" in proc.stdout
    assert json.loads(daemon.call("tools.call", {"name": "read_notes"})["result"]) == {
        "marker": "copied"
    }


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("/nonexistent/plugin/dir", "neither a folder"),
        ("file:///nonexistent/repo.git", "git clone failed"),
    ],
)
def test_a_bad_source_is_a_clear_error_and_the_daemon_keeps_serving(
    daemon, source: str, needle: str
) -> None:
    with pytest.raises(RpcError) as err:
        daemon.call("plugins.install", {"source": source})
    assert err.value.code == Codes.INVALID_PARAMS and needle in err.value.message
    assert daemon.call("ping")["pong"] is True
    plugins = daemon.home / "plugins"
    assert not plugins.exists() or list(plugins.iterdir()) == []


def test_a_folder_without_a_manifest_is_not_installed(daemon) -> None:
    folder = short_tmpdir("src-") / "junk"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    with pytest.raises(RpcError) as err:
        daemon.call("plugins.install", {"source": str(folder)})
    assert "no plugin.yaml" in err.value.message


# --- update / remove ---------------------------------------------------------------------------


def test_update_pulls_a_new_commit_and_reloads(daemon) -> None:
    repo = git_plugin("notes", notes_init("v1"))
    ctl(daemon, "plugins", "install", f"file://{repo}")
    write_plugin(
        repo.parent,
        "notes",
        notes_init("v2 with more text"),
        manifest="name: notes\nversion: 1.1.0\n",
    )
    git(repo, "commit", "-q", "-am", "second")
    proc = ctl(daemon, "plugins", "update", "notes")
    assert proc.returncode == 0, proc.stderr
    assert "✓ notes v1.1.0 (1 tools)" in proc.stdout
    assert json.loads(daemon.call("tools.call", {"name": "read_notes"})["result"]) == {
        "marker": "v2 with more text"
    }


def test_update_of_a_copied_plugin_is_refused(daemon) -> None:
    ctl(daemon, "plugins", "install", str(write_plugin(short_tmpdir(), "notes", notes_init("x"))))
    proc = ctl(daemon, "plugins", "update", "notes")
    assert proc.returncode == 1
    assert proc.stderr == (
        "hermesctl: Plugin notes was installed from a folder, not from git, so it cannot be "
        "updated: install it again with hermesctl plugins install --force FOLDER.\n"
    )


def test_remove_unloads_and_deletes_the_plugin(daemon) -> None:
    repo = git_plugin("notes", notes_init("v1"))
    ctl(daemon, "plugins", "install", f"file://{repo}")
    proc = ctl(daemon, "plugins", "remove", "notes")
    assert proc.returncode == 0 and "Removed plugin notes" in proc.stdout
    assert not (daemon.home / "plugins" / "notes").exists()
    assert plugin_state(daemon, "notes") is None
    assert "read_notes" not in [t["name"] for t in daemon.call("tools.list")["tools"]]


def test_remove_refuses_plugins_outside_hermes_home(start: Start) -> None:
    daemon = start()  # with the bundled calculator
    proc = ctl(daemon, "plugins", "remove", "calculator")
    assert proc.returncode == 1 and "bundled source" in proc.stderr
    assert plugin_state(daemon, "calculator") == "loaded"


def test_unknown_plugin_names_are_not_found(daemon) -> None:
    for method in ("plugins.info", "plugins.enable", "plugins.remove"):
        with pytest.raises(RpcError) as err:
            daemon.call(method, {"name": "ghost"})
        assert err.value.code == Codes.NOT_FOUND and "Plugin 'ghost' not found" in err.value.message


# --- enable / disable --------------------------------------------------------------------------

CONFIG_WITH_COMMENTS = """\
# my settings
log_level: INFO   # keep it calm

plugins:
  # nothing disabled yet
  load_timeout: 5   # seconds
"""


def test_disable_and_enable_edit_config_yaml_keeping_comments(start: Start) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "notes", notes_init("v1"))
    daemon = start(home, config=CONFIG_WITH_COMMENTS, env=ENV)
    proc = ctl(daemon, "plugins", "disable", "notes")
    assert (proc.returncode, proc.stdout) == (0, "⊘ Plugin notes disabled.\n")
    text = (home / "config.yaml").read_text()
    assert "# my settings" in text and "# keep it calm" in text and "# seconds" in text
    assert "  disabled: [notes]" in text
    assert plugin_state(daemon, "notes") == "disabled"
    proc = ctl(daemon, "plugins", "enable", "notes")
    assert (proc.returncode, proc.stdout) == (0, "✓ Plugin notes enabled.\n")
    assert (home / "config.yaml").read_text() == CONFIG_WITH_COMMENTS
    assert plugin_state(daemon, "notes") == "loaded"


def test_enable_adds_to_an_existing_enabled_list(start: Start) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "notes", notes_init("v1"))
    write_plugin(home / "plugins", "other", "def register(ctx):\n    pass\n")
    daemon = start(home, config="plugins:\n  enabled:\n    - other   # the other one\n", env=ENV)
    assert plugin_state(daemon, "notes") == "not-enabled"
    assert ctl(daemon, "plugins", "enable", "notes").returncode == 0
    assert (home / "config.yaml").read_text() == "plugins:\n  enabled: [other, notes]\n"
    assert plugin_state(daemon, "notes") == "loaded"


# --- set_env -----------------------------------------------------------------------------------


def test_set_env_values_round_trip_through_python_dotenv_and_keep_other_lines(daemon) -> None:
    env_file = daemon.home / ".env"
    env_file.write_text("# comment\nKEEP=1\nexport OTHER='x y'\n")
    tricky = 'line one\nline "two" it\'s \\n not a newline'
    daemon.call("plugins.set_env", {"values": {"TRICKY": tricky, "KEEP": "2"}})
    assert dotenv_values(env_file) == {"KEEP": "2", "OTHER": "x y", "TRICKY": tricky}
    assert env_file.read_text().startswith("# comment\nKEEP=")
    assert env_file.stat().st_mode & 0o777 == 0o600
    assert tricky.splitlines()[0] not in daemon.log()


@pytest.mark.parametrize("values", [{"1BAD": "x"}, {"OK": "${HOME}"}, {"OK": 3}])
def test_set_env_rejects_what_dotenv_cannot_hold(daemon, values: dict) -> None:
    with pytest.raises(RpcError) as err:
        daemon.call("plugins.set_env", {"values": values})
    assert err.value.code == Codes.INVALID_PARAMS
    assert not (daemon.home / ".env").exists()


def test_info_shows_which_required_variables_are_set(daemon) -> None:
    repo = git_plugin("weather", WEATHER_INIT, WEATHER_MANIFEST)
    daemon.call("plugins.install", {"source": f"file://{repo}"})
    daemon.call("plugins.set_env", {"values": {"WEATHER_UNITS": "metric"}})
    info = daemon.call("plugins.info", {"name": "weather"})
    assert [(e["name"], e["present"]) for e in info["requires_env"]] == [
        ("WEATHER_API_KEY", False),
        ("WEATHER_UNITS", True),
    ]
    assert info["git"] is True
    proc = ctl(daemon, "plugins", "info", "weather")
    assert "WEATHER_API_KEY (MISSING)" in proc.stdout


# --- lint --------------------------------------------------------------------------------------

BAD_TOOLS = """
def register(ctx):
    ctx.register_tool("bad name!", "t", {"name": "bad name!", "description": "x",
                      "parameters": {"type": "object", "properties": {}}}, lambda a: "{}")
    ctx.register_tool("fetch_page", "t", {"name": "fetch_page", "description": "Fetch",
                      "parameters": {"type": "object", "properties": {
                          "mode": {"type": "string", "description": "fast, slow, or medium"}}}},
                      lambda a: "{}")
"""


def test_lint_reports_errors_and_warnings_with_the_tool_and_exits_1(daemon) -> None:
    folder = write_plugin(short_tmpdir("lint-"), "badplug", BAD_TOOLS, manifest="name: badplug\n")
    proc = ctl(daemon, "plugins", "lint", str(folder))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert any(
        line.startswith("error: bad name!: tool rejected: invalid tool name") for line in lines
    )
    assert (
        'warning: fetch_page/mode: description lists values in prose; use "enum" instead' in lines
    )
    assert "warning: manifest has no version" in lines
    assert plugin_state(daemon, "badplug") is None  # never loaded into the daemon


def test_lint_of_a_broken_manifest_and_missing_register(daemon) -> None:
    folder = write_plugin(short_tmpdir("lint-"), "broken", "x = 1\n", manifest="name: [oops\n")
    result = daemon.call("plugins.lint", {"path": str(folder)})
    messages = [f["message"] for f in result["findings"]]
    assert result["errors"] == 2
    assert any(m.startswith("plugin.yaml does not parse") for m in messages)
    assert "__init__.py defines no register(ctx) function" in messages


def test_lint_of_a_clean_plugin_exits_0(daemon) -> None:
    folder = write_plugin(
        short_tmpdir("lint-"),
        "notes",
        notes_init("v1"),
        manifest="name: notes\nversion: 1.0.0\ndescription: Notes\n",
    )
    proc = ctl(daemon, "plugins", "lint", str(folder))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.strip().endswith("0 error(s), 0 warning(s)")


# --- hot reload --------------------------------------------------------------------------------

SLOW_INIT = """
import json, time

def register(ctx):
    def lookup(args, **kw):
        time.sleep(float(args.get("pause", 0)))
        return json.dumps({"version": "%s"})
    ctx.register_tool("slow_lookup", "slow", {
        "name": "slow_lookup", "description": "Return the plugin version after a pause",
        "parameters": {"type": "object", "properties": {"pause": {"type": "number"}}}}, lookup)
"""


def test_reload_during_a_turn_lets_the_turn_finish_with_the_tools_it_started_with(
    start: Start,
) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "slow", SLOW_INIT % "v1")
    script = [
        call_tools(tool_call("slow_lookup", {"pause": 1.0})),
        call_tools(tool_call("slow_lookup", {})),
        reply("done"),
    ]
    with ScriptedModelServer(script, latency=0.2) as srv:
        daemon = start(home, config=f"model:\n  base_url: {srv.url}\n  default: m\n", env=ENV)
        with daemon.client() as c:
            sid = c.call("session.create")["id"]
            turn = c.send("session.send", {"session_id": sid, "message": "go", "wait": True})
            for note in c.notifications(10):
                if note.method == "session.event" and note.params[0]["type"] == "tool.started":
                    break
            else:
                pytest.fail("the turn never started its tool call")
            (home / "plugins" / "slow" / "__init__.py").write_text(SLOW_INIT % "v2-reloaded")
            with daemon.client() as other:
                assert other.call("plugins.reload")["loaded"] == ["slow"]
                new = other.call("tools.call", {"name": "slow_lookup"})["result"]
            result = c.wait(turn, timeout=30)
        assert result["status"] == "completed" and result["final_text"] == "done"
        assert json.loads(new) == {"version": "v2-reloaded"}
        tool_results = [m["content"] for m in srv.requests[-1]["messages"] if m["role"] == "tool"]
        assert [json.loads(r) for r in tool_results] == [{"version": "v1"}, {"version": "v1"}]


HELD_INIT = """
import os, time
from pathlib import Path

HOME = Path(os.environ["HERMES_HOME"])

def register(ctx):
    loads = HOME / "held-loads"
    loads.write_text(loads.read_text() + "x" if loads.exists() else "x")
    if len(loads.read_text()) > 1:  # a reload: wait until the test lets it go
        deadline = time.monotonic() + 20
        while not (HOME / "held-go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
"""


def held_loads(home: Path) -> str:
    """One x per time aheld's register() ran (plugins load after the daemon listens)."""
    path = home / "held-loads"
    return path.read_text() if path.exists() else ""


def test_requests_for_plugins_wait_for_a_reload_instead_of_finding_them_gone(start: Start) -> None:
    home = short_tmpdir()
    # "aheld" loads before "notes": while it is held, notes is unloaded and not yet back
    write_plugin(home / "plugins", "aheld", HELD_INIT)
    write_plugin(home / "plugins", "notes", notes_init("v1"))
    script = [call_tools(tool_call("read_notes", {})), reply("done")]
    with ScriptedModelServer(script) as srv:
        daemon = start(home, config=f"model:\n  base_url: {srv.url}\n  default: m\n", env=ENV)
        with daemon.client() as admin, daemon.client() as tools, daemon.client() as chat:
            reload = admin.send("plugins.reload")
            deadline = time.monotonic() + 10
            while held_loads(home) != "xx":  # the reload is under way
                assert time.monotonic() < deadline, daemon.log()
                time.sleep(0.02)
            call = tools.send("tools.call", {"name": "read_notes"})
            listing = tools.send("tools.list")
            sid = chat.call("session.create")["id"]
            turn = chat.send("session.send", {"session_id": sid, "message": "go", "wait": True})
            time.sleep(0.3)
            assert not srv.requests  # the turn waits too
            (home / "held-go").write_text("")
            assert admin.wait(reload, timeout=20)["loaded"] == ["aheld", "notes"]
            assert json.loads(tools.wait(call, timeout=20)["result"]) == {"marker": "v1"}
            assert "read_notes" in [t["name"] for t in tools.wait(listing, timeout=20)["tools"]]
            result = chat.wait(turn, timeout=20)
    assert result["status"] == "completed" and result["final_text"] == "done"
    assert "read_notes" in [t["function"]["name"] for t in srv.requests[0]["tools"]]
    assert json.loads(
        next(m["content"] for m in srv.requests[-1]["messages"] if m["role"] == "tool")
    ) == {"marker": "v1"}


def test_a_plugin_that_hangs_in_a_reload_holds_requests_only_for_its_load_timeout(
    start: Start,
) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "aheld", HELD_INIT)  # never let go: it hangs on reload
    write_plugin(home / "plugins", "notes", notes_init("v1"))
    daemon = start(home, config="plugins:\n  load_timeout: 1\n", env=ENV)
    with daemon.client() as admin, daemon.client() as tools:
        reload = admin.send("plugins.reload")
        deadline = time.monotonic() + 10
        while held_loads(home) != "xx":
            assert time.monotonic() < deadline, daemon.log()
            time.sleep(0.02)
        call = tools.send("tools.call", {"name": "read_notes"})
        result = admin.wait(reload, timeout=20)
        assert result["loaded"] == ["notes"]
        assert [f["key"] for f in result["failed"]] == ["aheld"]
        assert json.loads(tools.wait(call, timeout=20)["result"]) == {"marker": "v1"}
        assert daemon.call("ping")["pong"]


def test_a_plugin_that_now_fails_is_reported_and_the_rest_keep_working(start: Start) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "notes", notes_init("v1"))
    write_plugin(home / "plugins", "fragile", "def register(ctx):\n    pass\n")
    daemon = start(home, env=ENV)
    (home / "plugins" / "fragile" / "__init__.py").write_text(
        "def register(ctx):\n    raise RuntimeError('now broken')\n"
    )
    proc = ctl(daemon, "plugins", "reload")
    assert proc.returncode == 1
    assert "✗ fragile — RuntimeError: now broken" in proc.stdout
    assert json.loads(daemon.call("tools.call", {"name": "read_notes"})["result"]) == {
        "marker": "v1"
    }


def test_sighup_reloads_plugins_without_dropping_connections(daemon) -> None:
    with daemon.client() as c:
        sid = c.call("session.create")["id"]
        write_plugin(daemon.home / "plugins", "notes", notes_init("late"))
        daemon.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while plugin_state(daemon, "notes") != "loaded":
            assert time.monotonic() < deadline, daemon.log()
            time.sleep(0.05)
        assert c.call("session.get", {"session_id": sid})["id"] == sid  # same connection


def test_reload_is_owner_only_and_documented_so() -> None:
    from hermesd.rpc.protocol import METHODS

    owner_only = {n for n, s in METHODS.items() if s.owner_only and n.startswith("plugins.")}
    assert owner_only == {
        "plugins.enable",
        "plugins.disable",
        "plugins.install",
        "plugins.set_env",
        "plugins.unset_env",
        "plugins.update",
        "plugins.remove",
        "plugins.reload",
        "plugins.lint",
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")
def test_a_group_member_may_read_but_not_change_plugins(start: Start) -> None:
    import grp
    import pwd

    from tests.support.otheruser import talk_as

    nobody = pwd.getpwnam("nobody")
    home = short_tmpdir()
    write_plugin(home / "plugins", "notes", notes_init("v1"))
    daemon = start(
        home, config=f"socket:\n  group: {grp.getgrgid(nobody.pw_gid).gr_name}\n", env=ENV
    )
    os.chmod(daemon.socket.parent, 0o755)
    out = talk_as(
        nobody.pw_uid,
        nobody.pw_gid,
        daemon.socket,
        [
            [0, 1, "plugins.info", [{"name": "notes"}]],
            [0, 2, "plugins.disable", [{"name": "notes"}]],
            [0, 3, "plugins.install", [{"source": "/tmp"}]],
            [0, 4, "plugins.set_env", [{"values": {"X": "1"}}]],
            [0, 5, "plugins.reload", []],
        ],
    )
    replies = {m[1]: m for m in out["received"] if m[0] == 1}
    assert replies[1][2] is None and replies[1][3]["key"] == "notes"
    assert [replies[i][2]["code"] for i in (2, 3, 4, 5)] == [Codes.PERMISSION_DENIED] * 4
    assert plugin_state(daemon, "notes") == "loaded"


def test_a_flow_style_plugins_section_is_edited_keeping_its_comments(start: Start) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "notes", notes_init("v1"))
    daemon = start(home, config="# kept after the edit\nplugins: {load_timeout: 5}\n", env=ENV)
    proc = ctl(daemon, "plugins", "disable", "notes")
    assert proc.returncode == 0 and proc.stdout == "⊘ Plugin notes disabled.\n"
    assert proc.stderr == ""
    text = (home / "config.yaml").read_text()
    assert text.startswith("# kept after the edit\n")
    assert yaml.safe_load(text) == {"plugins": {"load_timeout": 5, "disabled": ["notes"]}}


def test_a_secret_set_through_set_env_is_redacted_from_tool_results_at_once(daemon) -> None:
    secret = "tok-" + "q7" * 12
    daemon.call("plugins.set_env", {"values": {"SERVICE_API_TOKEN": secret}})
    result = daemon.call("tools.call", {"name": "terminal", "args": {"command": f"echo {secret}"}})[
        "result"
    ]
    assert secret not in result
