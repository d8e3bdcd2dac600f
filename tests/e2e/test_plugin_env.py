"""A plugin's variables through hermesctl: ``plugins enable`` asks for what is missing on a
terminal (hidden input for secrets) and names it otherwise, ``plugins env`` shows, sets and
unsets, and a variable removed from .env is unset on reload."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from dotenv import dotenv_values

from tests.support.daemon import (
    DaemonProcess,
    checkout_pythonpath,
    run_hermesctl,
    short_tmpdir,
)
from tests.support.plugin_factory import write_plugin
from tests.support.terminal import Terminal

ENV = {"HERMES_BUNDLED_PLUGINS": "/nonexistent"}

MANIFEST = """\
name: weather
version: 1.0.0
requires_env:
  - name: WEATHER_API_KEY
    description: API key for the weather service
    secret: true
  - name: WEATHER_UNITS
    description: metric or imperial
"""
# The tool reports what the daemon's environment holds now.
INIT = """
import json, os

def register(ctx):
    ctx.register_tool("weather_env", "weather", {
        "name": "weather_env", "description": "the weather variables",
        "parameters": {"type": "object", "properties": {}}},
        lambda args, **kw: json.dumps({k: os.environ.get(k) for k in
                                       ("WEATHER_API_KEY", "WEATHER_UNITS")}))
"""
CONFIG = "# my settings\nplugins:\n  disabled: [weather]  # not yet\n"


def ctl(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_hermesctl(["--socket", str(daemon.socket), *args])


@pytest.fixture
def daemon(start) -> DaemonProcess:
    home = short_tmpdir()
    write_plugin(home / "plugins", "weather", INIT, manifest=MANIFEST)
    return start(home, config=CONFIG, env=ENV)


def state(daemon: DaemonProcess) -> str:
    return str(daemon.call("plugins.info", {"name": "weather"})["state"])


def weather_env(daemon: DaemonProcess) -> dict[str, str | None]:
    result = daemon.call("tools.call", {"name": "weather_env"})["result"]
    return dict(json.loads(result))


def test_enable_off_a_terminal_exits_1_naming_what_is_missing(daemon: DaemonProcess) -> None:
    out = ctl(daemon, "plugins", "enable", "weather")
    assert out.returncode == 1
    assert out.stderr == (
        "hermesctl: plugin weather is enabled but cannot load until WEATHER_API_KEY, "
        "WEATHER_UNITS are set: hermesctl plugins env weather WEATHER_API_KEY=... "
        "WEATHER_UNITS=...\n"
    )
    assert state(daemon) == "missing-env"
    text = (daemon.home / "config.yaml").read_text()
    assert text.startswith("# my settings\n") and "disabled" not in text


def test_enable_on_a_terminal_asks_with_hidden_input_for_the_secret(
    daemon: DaemonProcess,
) -> None:
    env = {"PYTHONPATH": checkout_pythonpath(), "PATH": "/usr/bin:/bin", "TERM": "dumb"}
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket)]
    term = Terminal([*argv, "plugins", "enable", "weather"], env)
    try:
        term.expect(r"WEATHER_API_KEY \(empty to skip\): ")
        term.sendline("hidden-typed-key")
        term.expect(r"WEATHER_UNITS \(empty to skip\): ")
        term.sendline("metric")
        term.expect(r"✓ weather v1\.0\.0 \(1 tools\)")
        assert term.wait() == 0
        assert "hidden-typed-key" not in term.text  # not echoed
        assert "metric" in term.text  # a setting is echoed as typed
    finally:
        term.close()
    assert dotenv_values(daemon.home / ".env") == {
        "WEATHER_API_KEY": "hidden-typed-key",
        "WEATHER_UNITS": "metric",
    }
    assert weather_env(daemon) == {"WEATHER_API_KEY": "[REDACTED]", "WEATHER_UNITS": "metric"}


def test_enable_with_no_input_never_asks_even_on_a_terminal(daemon: DaemonProcess) -> None:
    env = {"PYTHONPATH": checkout_pythonpath(), "PATH": "/usr/bin:/bin", "TERM": "dumb"}
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket)]
    term = Terminal([*argv, "plugins", "enable", "weather", "--no-input"], env)
    try:
        assert term.wait() == 1
        assert "cannot load until WEATHER_API_KEY" in term.text
    finally:
        term.close()


def test_plugins_env_shows_sets_and_unsets_the_variables(daemon: DaemonProcess) -> None:
    assert ctl(daemon, "plugins", "enable", "weather").returncode == 1
    shown = ctl(daemon, "plugins", "env", "weather").stdout.splitlines()
    assert shown == [
        "  WEATHER_API_KEY (MISSING, secret) — API key for the weather service",
        "  WEATHER_UNITS (MISSING) — metric or imperial",
    ]
    out = ctl(daemon, "plugins", "env", "weather", "WEATHER_API_KEY=k-1", "WEATHER_UNITS=metric")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("✓ weather v1.0.0")
    assert state(daemon) == "loaded"
    assert weather_env(daemon)["WEATHER_UNITS"] == "metric"
    out = ctl(daemon, "plugins", "env", "weather", "--unset", "WEATHER_UNITS")
    assert out.returncode == 0
    assert "WEATHER_UNITS (MISSING)" in out.stdout
    assert state(daemon) == "missing-env"
    assert "WEATHER_UNITS" not in dotenv_values(daemon.home / ".env")


def test_plugins_env_rejects_what_is_not_an_assignment(daemon: DaemonProcess) -> None:
    out = ctl(daemon, "plugins", "env", "weather", "WEATHER_UNITS")
    assert out.returncode == 2 and "'WEATHER_UNITS' is not KEY=VALUE" in out.stderr
    out = ctl(daemon, "plugins", "env", "weather", "LD_PRELOAD=/tmp/x.so")
    assert out.returncode == 1 and "LD_PRELOAD" in out.stderr


def test_a_key_removed_from_dotenv_by_hand_is_unset_on_reload(start) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "weather", INIT, manifest=MANIFEST)
    (home / ".env").write_text("WEATHER_API_KEY=k-1\nWEATHER_UNITS=metric\n")
    daemon = start(home, env=ENV)
    assert weather_env(daemon)["WEATHER_UNITS"] == "metric"
    (home / ".env").write_text("WEATHER_API_KEY=k-1\n# units removed\n")
    assert ctl(daemon, "reload").returncode == 0
    assert state(daemon) == "missing-env"
    (home / ".env").write_text("WEATHER_API_KEY=k-1\nWEATHER_UNITS=imperial\n")
    assert ctl(daemon, "reload").returncode == 0
    assert weather_env(daemon)["WEATHER_UNITS"] == "imperial"  # a changed value is taken too


def test_a_variable_set_outside_dotenv_wins_over_it(start) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "weather", INIT, manifest=MANIFEST)
    (home / ".env").write_text("WEATHER_API_KEY=k-1\nWEATHER_UNITS=metric\n")
    daemon = start(home, env={**ENV, "WEATHER_UNITS": "kelvin"})
    (home / ".env").write_text("WEATHER_API_KEY=k-1\n")
    assert ctl(daemon, "reload").returncode == 0
    assert weather_env(daemon)["WEATHER_UNITS"] == "kelvin"
