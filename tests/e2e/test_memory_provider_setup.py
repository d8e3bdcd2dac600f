"""``hermesctl memory setup PROVIDER`` and the active provider's ``hermesctl <provider>``: the
recorder provider's ``get_config_schema()`` (a secret with an env_var, a choice, a value with an
env_var) drives prompts on a real pty or ``--set`` for scripts; secrets land in .env only, the
rest in config.yaml under ``memory.recorder``, and its ``save_config()`` gets the non-secret
values. A real daemon; the provider is tests/data/memory_providers/recorder.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_memory_providers import _calls, _home_with_recorder, _send, _wait_for
from tests.support.daemon import DaemonProcess, run_hermesctl, start_daemon
from tests.support.modelserver import ScriptedModelServer, model_config, reply
from tests.support.terminal import Terminal

SECRET = "rk-0123456789abcdef-secret"


@pytest.fixture
def daemon(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = _home_with_recorder("recorder")
    process = start_daemon(home, config=model_config(model.url))  # built-in memory only
    yield process
    process.stop()


def _ctl(daemon: DaemonProcess, *args: str) -> tuple[int, str, str]:
    done = run_hermesctl(["--socket", str(daemon.socket), *args], input="")
    return done.returncode, done.stdout, done.stderr


def _config(home: Path) -> dict[str, object]:
    return dict(yaml.safe_load((home / "config.yaml").read_text()))


def _env_lines(home: Path) -> list[str]:
    return (home / ".env").read_text().splitlines()


def test_setup_with_set_values_selects_the_provider_and_splits_secrets_from_settings(
    daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    code, out, err = _ctl(
        daemon, "memory", "setup", "recorder", "--set", f"api_key={SECRET}", "--set", "mode=brief"
    )
    assert code == 0, err
    assert "Memory provider: recorder" in out
    assert "API keys saved to .env" in out
    memory = _config(daemon.home)["memory"]
    assert memory == {"provider": "recorder", "recorder": {"mode": "brief", "endpoint": "local"}}
    assert f'RECORDER_API_KEY="{SECRET}"' in _env_lines(daemon.home)
    assert 'RECORDER_URL="local"' in _env_lines(daemon.home)  # a setting with an env_var too
    assert oct((daemon.home / ".env").stat().st_mode & 0o777) == "0o600"
    saved = json.loads((daemon.home / "recorder-config.json").read_text())
    assert saved == {"mode": "brief", "endpoint": "local"}
    [save] = [c for c in _calls(daemon) if c["method"] == "save_config"]
    assert save["args"] == [{"mode": "brief", "endpoint": "local"}, str(daemon.home)]
    assert SECRET not in (daemon.home / "config.yaml").read_text()
    assert SECRET not in daemon.log()
    # selected and reloaded: the next turn has the provider
    with daemon.client() as c:
        sid = c.call("session.create")["id"]
        model.push(reply("Set up."))
        _send(c, sid, "are you recording?")
    assert "prefetch" in [x["method"] for x in _calls(daemon, sid)]


def test_setup_prompts_on_a_terminal_without_echoing_the_secret(daemon: DaemonProcess) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(TERM="xterm")
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket)]
    t = Terminal([*argv, "memory", "setup", "recorder"], env)
    try:
        t.expect("Configuring recorder")
        t.expect("Get yours at https://example.invalid")
        t.expect("Recorder API key: ")
        t.wait_reading()
        t.sendline(SECRET)
        t.expect(r"Recording mode:\s+1\. full\s+2\. brief")
        t.expect(r"Recording mode \[full\]: ")
        t.wait_reading()
        t.sendline("2")
        t.expect(r"Where recordings go \[local\]: ")
        t.wait_reading()
        t.sendline("")
        t.expect("Start a new session to activate.")
        assert t.wait() == 0
        assert SECRET not in t.text
    finally:
        t.close()
    memory = _config(daemon.home)["memory"]
    assert memory == {"provider": "recorder", "recorder": {"mode": "brief", "endpoint": "local"}}
    assert f'RECORDER_API_KEY="{SECRET}"' in _env_lines(daemon.home)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuch"], "Memory provider 'nosuch' not found. Known providers: recorder"),
        (["recorder", "--set", "bogus=1"], "Memory provider 'recorder' has no setting 'bogus'"),
        (["recorder", "--set", "api_key=x", "--set", "mode=loud"], "'mode' must be one of full"),
        (["recorder", "--set", "api_key=${HOME}"], "which python-dotenv would expand"),
        (["recorder"], "Memory provider 'recorder' needs api_key"),
        (["recorder", "--set", "nonsense"], "--set wants KEY=VALUE"),
        (["../../etc"], "'../../etc' is not a memory provider name"),
    ],
)
def test_bad_setup_input_changes_nothing_and_says_why(
    daemon: DaemonProcess, args: list[str], message: str
) -> None:
    before = (daemon.home / "config.yaml").read_text()
    code, _, err = _ctl(daemon, "memory", "setup", *args)
    assert code != 0
    assert message in err
    assert (daemon.home / "config.yaml").read_text() == before
    assert not (daemon.home / ".env").exists()
    assert daemon.alive()


def test_a_failing_save_config_is_reported_and_the_rest_is_kept(daemon: DaemonProcess) -> None:
    (daemon.home / "recorder-mode.json").write_text(json.dumps({"save_config_fails": True}))
    code, out, err = _ctl(daemon, "memory", "setup", "recorder", "--set", f"api_key={SECRET}")
    assert code == 0, err
    assert "Failed to write provider config: RuntimeError: recorder could not save" in out
    assert _config(daemon.home)["memory"]["provider"] == "recorder"  # type: ignore[index]
    assert "Memory provider 'recorder' save_config() failed" in daemon.log()


def test_the_active_providers_cli_is_a_hermesctl_command(daemon: DaemonProcess) -> None:
    code, out, _ = _ctl(daemon, "recorder", "calls")
    assert code != 0  # not selected yet: no such command
    assert _ctl(daemon, "memory", "setup", "recorder", "--set", f"api_key={SECRET}")[0] == 0

    def listed() -> bool:
        with daemon.client() as c:
            return "recorder" in [x["name"] for x in c.call("cli.list")["commands"]]

    _wait_for(listed, "hermesctl recorder")
    code, out, err = _ctl(daemon, "recorder", "calls")
    assert code == 0, err
    assert "calls recorded; last:" in out
    code, out, _ = _ctl(daemon, "recorder", "home")
    assert out.strip() == str(daemon.home)
    code, _, err = _ctl(daemon, "recorder", "nosuch")
    assert code == 2 and "invalid choice" in err


def test_a_hostile_schema_cannot_write_a_dangerous_variable(daemon: DaemonProcess) -> None:
    schema = [
        {"key": "preload", "description": "x", "env_var": "LD_PRELOAD"},
        {"key": "path", "description": "y", "secret": True, "env_var": "PATH"},
        {"key": "../../etc", "description": "a key that is no key"},
        "not a field",
        {"description": "no key at all"},
    ]
    (daemon.home / "recorder-mode.json").write_text(json.dumps({"schema": schema}))
    with daemon.client() as c:
        fields = c.call("memory.setup_schema", {"provider": "recorder"})["fields"]
    assert [f["key"] for f in fields] == ["preload", "path"]  # the unusable entries skipped
    for pair in ("preload=/tmp/evil.so", "path=/tmp/evil"):
        code, _, err = _ctl(daemon, "memory", "setup", "recorder", "--set", pair)
        assert code != 0
        assert "hermesctl" in err and ("LD_PRELOAD" in err or "PATH" in err)
    assert not (daemon.home / ".env").exists()
    assert "memory" not in _config(daemon.home)


def test_a_provider_whose_schema_raises_is_set_up_without_settings(daemon: DaemonProcess) -> None:
    (daemon.home / "recorder-mode.json").write_text(json.dumps({"raise": ["get_config_schema"]}))
    code, _, err = _ctl(daemon, "memory", "setup", "recorder")
    assert code == 0, err
    assert _config(daemon.home)["memory"] == {"provider": "recorder"}
    assert "Memory provider 'recorder' get_config_schema() failed: RuntimeError" in daemon.log()
