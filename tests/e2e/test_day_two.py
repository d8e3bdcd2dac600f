"""Day-two operations through the real hermesctl against a real hermesd: --version, config
show/get/set/path/check, reload, logs, doctor and stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.support.daemon import (
    DaemonProcess,
    checkout_pythonpath,
    run_hermesctl,
    short_tmpdir,
)
from tests.support.modelserver import ScriptedModelServer, model_config
from tests.support.plugin_factory import write_plugin
from tests.support.terminal import Terminal

ENV = {"HERMES_BUNDLED_PLUGINS": "/nonexistent"}

COMMENTED = """\
# my hermesd settings
model:
  base_url: {url}  # the local llama.cpp
  default: scripted-model
  timeout: 60

# louder while I debug
log_level: INFO
"""


def ctl(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_hermesctl(["--socket", str(daemon.socket), *args])


@pytest.fixture
def model():
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def daemon(start, model: ScriptedModelServer) -> DaemonProcess:
    return start(config=COMMENTED.format(url=model.url), env=ENV)


def test_version_prints_the_client_version_without_a_daemon() -> None:
    out = run_hermesctl(["--version"], env={"HERMES_SOCKET": "/nonexistent/sock"})
    assert out.returncode == 0 and out.stdout.startswith("hermesctl 0.")


def test_help_lists_the_day_two_commands() -> None:
    out = run_hermesctl(["--help"], env={"HERMES_SOCKET": "/nonexistent/sock"})
    for word in ("config", "reload", "logs", "doctor", "stop"):
        assert f"\n    {word} " in out.stdout, word


# --- config ----------------------------------------------------------------------------------


def test_config_set_keeps_comments_validates_and_reloads(daemon: DaemonProcess, model) -> None:
    out = ctl(daemon, "config", "set", "model.default", "other-model")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:2] == [
        f"model.default = other-model (in {daemon.home / 'config.yaml'})",
        "Configuration reloaded.",
    ]
    text = (daemon.home / "config.yaml").read_text()
    assert text == COMMENTED.format(url=model.url).replace("scripted-model", "other-model")
    assert ctl(daemon, "config", "get", "model.default").stdout == "other-model\n"
    assert daemon.call("status")["model"] == "other-model"


def test_config_set_parses_the_value_as_the_setting_takes_it(daemon: DaemonProcess) -> None:
    assert ctl(daemon, "config", "set", "tools.timeout", "30").returncode == 0
    assert ctl(daemon, "config", "set", "approvals.deny", "[rm -rf *, shutdown]").returncode == 0
    assert ctl(daemon, "config", "set", "agent.system_prompt", "42").returncode == 0
    data = yaml.safe_load((daemon.home / "config.yaml").read_text())
    assert data["tools"] == {"timeout": 30}
    assert data["approvals"] == {"deny": ["rm -rf *", "shutdown"]}
    assert data["agent"] == {"system_prompt": "42"}


@pytest.mark.parametrize(
    "key, value, problem",
    [
        ("limits.max_connections", "lots", "'limits.max_connections' must be an integer"),
        ("model.base_url", "localhost:8080/v1", "must be an absolute http(s) URL"),
        ("approvals.mode", "sometimes", "'approvals.mode' must be one of manual, off"),
    ],
)
def test_config_set_refuses_a_bad_value_and_leaves_the_file_alone(
    daemon: DaemonProcess, key: str, value: str, problem: str
) -> None:
    before = (daemon.home / "config.yaml").read_text()
    out = ctl(daemon, "config", "set", key, value)
    assert out.returncode == 1 and problem in out.stderr
    assert "Traceback" not in out.stderr
    assert (daemon.home / "config.yaml").read_text() == before
    assert daemon.call("ping")["pong"]


@pytest.mark.parametrize("key", ["model.nonsense", "model", "no.such.thing"])
def test_config_set_refuses_what_is_not_a_setting(daemon: DaemonProcess, key: str) -> None:
    out = ctl(daemon, "config", "set", key, "1")
    assert out.returncode == 1 and "hermesctl config show lists" in out.stderr


def test_config_show_prints_the_file_with_the_api_key_redacted(start, model) -> None:
    daemon = start(config=model_config(model.url, api_key="hunter2-local-key"), env=ENV)
    out = ctl(daemon, "config", "show")
    assert out.returncode == 0
    assert "hunter2" not in out.stdout and "api_key: [REDACTED]" in out.stdout
    effective = ctl(daemon, "config", "show", "--effective").stdout
    assert (
        "model.api_key = [REDACTED]" in effective and "limits.max_connections = 1024" in effective
    )
    assert ctl(daemon, "config", "get", "model.api_key").stdout == "[REDACTED]\n"


def test_config_check_lists_every_problem_of_the_file_as_it_is_now(daemon: DaemonProcess) -> None:
    (daemon.home / "config.yaml").write_text("log_level: LOUD\nlimits:\n  max_inflight: many\n")
    out = ctl(daemon, "config", "check")
    assert out.returncode == 1
    assert "'log_level' must be one of" in out.stdout and "'limits.max_inflight'" in out.stdout
    assert out.stdout.splitlines()[-1].endswith("config.yaml: 2 problem(s)")


def test_config_check_names_the_key_a_typo_meant_also_beside_other_errors(
    daemon: DaemonProcess,
) -> None:
    (daemon.home / "config.yaml").write_text(
        "log_level: LOUD\napprovals:\n  timout: 5\nmodel:\n  defualt: qwen\n"
    )
    out = ctl(daemon, "config", "check")
    assert out.returncode == 1
    assert "unknown setting 'approvals.timout' ignored; did you mean 'approvals.timeout'?" in (
        out.stdout
    )
    assert "did you mean 'model.default'?" in out.stdout
    assert "'log_level' must be one of" in out.stdout
    typo = ctl(daemon, "config", "set", "approvals.mdoe", "manual")
    assert typo.returncode == 1 and "did you mean 'approvals.mode'?" in typo.stderr


def test_config_set_of_a_word_yaml_reads_as_a_boolean_keeps_the_word(
    daemon: DaemonProcess,
) -> None:
    # run on a terminal: a setting that widens what tools may do is confirmed there
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(daemon.home), TERM="xterm")
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket)]
    t = Terminal([*argv, "config", "set", "approvals.mode", "off"], env)
    try:
        if t.expect(r"Type 'yes' to allow it: |approvals\.mode = off").group(0).startswith("Type"):
            t.sendline("yes")
        assert t.wait() == 0, t.text
    finally:
        t.close()
    assert "mode: 'off'" in (daemon.home / "config.yaml").read_text()
    assert ctl(daemon, "config", "get", "approvals.mode").stdout == "off\n"


def test_config_path_and_get_of_a_section(daemon: DaemonProcess) -> None:
    assert ctl(daemon, "config", "path").stdout == f"{daemon.home / 'config.yaml'}\n"
    section = ctl(daemon, "config", "get", "model").stdout.splitlines()
    assert "model.timeout = 60" in section and "model.max_retries = 3" in section


def test_config_get_of_an_unknown_setting_is_one_sentence(daemon: DaemonProcess) -> None:
    out = ctl(daemon, "config", "get", "model.colour")
    assert out.returncode == 1
    assert out.stderr == (
        "hermesctl: unknown setting 'model.colour' (hermesctl config show lists them)\n"
    )


# --- reload ----------------------------------------------------------------------------------


def test_reload_reports_a_failing_plugin_and_status_shows_the_outcome(start) -> None:
    home = short_tmpdir()
    plugin = write_plugin(home / "plugins", "fragile", "def register(ctx):\n    pass\n")
    daemon = start(home, env=ENV)
    assert "last reload" not in ctl(daemon, "status").stdout
    (plugin / "__init__.py").write_text("def register(ctx):\n    raise ValueError('broke')\n")
    out = ctl(daemon, "reload")
    assert out.returncode == 1
    assert "Configuration reloaded." in out.stdout
    assert "Reloaded plugins: 1 found — 1 failed" in out.stdout
    assert "✗ fragile — ValueError: broke" in out.stdout
    status = ctl(daemon, "status").stdout
    line = next(x for x in status.splitlines() if "last reload:" in x)
    assert "(hermesctl reload): failed — plugin fragile: ValueError: broke" in line
    assert time.strftime("%Y-%m-%d") in line


def test_reload_with_a_broken_config_keeps_the_running_one_and_says_why(
    daemon: DaemonProcess,
) -> None:
    (daemon.home / "config.yaml").write_text("log_level: LOUD\nshutdown_timeout: soon\n")
    out = ctl(daemon, "reload")
    assert out.returncode == 1
    assert out.stdout.startswith("Configuration not reloaded (the running one stays):\n")
    assert "'log_level'" in out.stdout and "'shutdown_timeout'" in out.stdout
    assert daemon.call("status")["model"] == "scripted-model"
    assert daemon.call("status")["last_reload"]["ok"] is False


def test_sighup_is_recorded_as_the_last_reload(daemon: DaemonProcess) -> None:
    daemon.signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while not daemon.call("status").get("last_reload"):
        assert time.monotonic() < deadline, daemon.log()
        time.sleep(0.05)
    last = daemon.call("status")["last_reload"]
    assert last["source"] == "SIGHUP" and last["ok"] is True


# --- logs ------------------------------------------------------------------------------------


LOGS_SECRET = """
import logging, os

def register(ctx):
    logging.getLogger("chatty").warning("my key is %s", os.environ["CHATTY_TOKEN"])
"""


def test_logs_prints_recent_records_with_secrets_redacted(start) -> None:
    home = short_tmpdir()
    (home / ".env").write_text("CHATTY_TOKEN=plain-but-named-secret\n")
    write_plugin(home / "plugins", "chatty", LOGS_SECRET)
    daemon = start(home, env=ENV)
    daemon.call("plugins.list")  # the plugins have loaded
    out = ctl(daemon, "logs", "-n", "1000")
    assert out.returncode == 0
    assert "WARNING chatty: my key is [REDACTED]" in out.stdout
    assert "plain-but-named-secret" not in out.stdout
    assert "hermesd.daemon.main: hermesd" in out.stdout  # the ready line
    assert len(ctl(daemon, "logs", "-n", "2").stdout.splitlines()) == 2


def test_logs_follow_prints_new_records_as_they_come(daemon: DaemonProcess) -> None:
    env = {"PYTHONPATH": checkout_pythonpath()}
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket), "logs", "-f"]
    with subprocess.Popen(
        [*argv, "-n", "1", "--json"], stdout=subprocess.PIPE, text=True, env=env
    ) as follower:
        assert follower.stdout is not None
        json.loads(follower.stdout.readline())  # the last record so far: following has begun
        assert ctl(daemon, "reload").returncode == 0
        seen = []
        while not any("configuration reloaded" in r["message"] for r in seen):
            seen.append(json.loads(follower.stdout.readline()))
        follower.terminate()
    assert all(set(r) == {"seq", "time", "level", "logger", "message"} for r in seen)


def test_logs_follow_ends_cleanly_when_the_daemon_stops(daemon: DaemonProcess) -> None:
    env = {"PYTHONPATH": checkout_pythonpath()}
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket), "logs", "-f"]
    with subprocess.Popen(
        [*argv, "-n", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as follower:
        assert follower.stdout is not None and follower.stderr is not None
        follower.stdout.readline()
        daemon.stop()
        assert follower.wait(30) == 0
        assert "closed the connection" in follower.stderr.read()


# --- doctor ----------------------------------------------------------------------------------


def rows(out: subprocess.CompletedProcess[str]) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in json.loads(out.stdout)["checks"]}


def test_doctor_checks_the_endpoint_lists_its_models_and_accepts_the_name(
    daemon: DaemonProcess,
) -> None:
    out = ctl(daemon, "doctor", "--json")
    assert out.returncode == 0, out.stdout
    checks = rows(out)
    assert checks["connection"]["status"] == "ok"
    assert checks["model endpoint"]["status"] == "ok"
    assert checks["models"]["detail"] == "scripted-model"
    assert checks["model name"]["status"] == "ok"
    assert checks["config"]["status"] == "ok"
    for name in ("socket", "sandbox", "systemd", "versions", "plugins"):
        assert name in checks
    assert "notify socket set" in checks["systemd"]["detail"]  # the tests stand in for systemd
    assert "Landlock" in checks["sandbox"]["detail"] and "bwrap" in checks["sandbox"]["detail"]
    text = ctl(daemon, "doctor").stdout
    assert "✓ model name" in text


def test_doctor_fails_a_model_name_the_endpoint_does_not_serve(start, model) -> None:
    daemon = start(config=model_config(model.url).replace("scripted-model", "gpt-9"), env=ENV)
    out = ctl(daemon, "doctor", "--json")
    assert out.returncode == 1
    assert rows(out)["model name"] == {
        "name": "model name",
        "status": "fail",
        "detail": "model.default 'gpt-9' is not one of the endpoint's models",
    }


def test_doctor_without_a_model_name_names_the_endpoints_only_model(start, model) -> None:
    daemon = start(config=f"model:\n  base_url: {model.url}\n", env=ENV)
    detail = rows(ctl(daemon, "doctor", "--json"))["model name"]["detail"]
    assert detail == (
        "model.default is not set: hermesctl config set model.default NAME; "
        "the endpoint's only model is scripted-model"
    )


def test_doctor_fails_an_unreachable_endpoint_and_names_plugins_missing_env(start) -> None:
    home = short_tmpdir()
    write_plugin(
        home / "plugins",
        "needy",
        "def register(ctx):\n    pass\n",
        manifest="name: needy\nrequires_env:\n  - NEEDY_TOKEN\n",
    )
    daemon = start(home, config=model_config("http://127.0.0.1:9/v1"), env=ENV)
    out = ctl(daemon, "doctor", "--json")
    assert out.returncode == 1
    checks = rows(out)
    assert checks["model endpoint"]["status"] == "fail"
    assert "is not reachable" in checks["model endpoint"]["detail"]
    assert checks["plugin needy"]["detail"] == (
        "missing NEEDY_TOKEN: hermesctl plugins env needy NAME=VALUE"
    )


# --- stop ------------------------------------------------------------------------------------


def test_stop_stops_the_daemon_and_waits_for_it(daemon: DaemonProcess) -> None:
    pid = daemon.proc.pid
    out = ctl(daemon, "stop")
    assert out.returncode == 0 and out.stdout == f"hermesd (pid {pid}) stopped.\n"
    assert daemon.proc.wait(20) == 0
    assert ctl(daemon, "status").returncode == 3


def test_config_set_of_a_start_up_setting_says_a_restart_applies_it(daemon: DaemonProcess) -> None:
    out = ctl(daemon, "config", "set", "limits.max_connections", "64")
    assert out.returncode == 0
    assert out.stdout.splitlines()[-1] == (
        "note: limits.max_connections takes effect when hermesd restarts (hermesctl stop)"
    )


def test_a_huge_log_record_is_kept_cut_to_16_kib(start) -> None:
    home = short_tmpdir()
    write_plugin(
        home / "plugins",
        "loud",
        "import logging\n\n"
        "def register(ctx):\n    logging.getLogger('loud').warning('y' * 100000)\n",
    )
    daemon = start(home, env=ENV)
    daemon.call("plugins.list")  # loaded
    out = ctl(daemon, "logs", "--json", "-n", "1000")
    record = next(json.loads(x) for x in out.stdout.splitlines() if '"loud"' in x)
    assert record["message"] == "y" * 16384 + f"… [{100000 - 16384} more characters]"
    assert "y" * 100000 in daemon.log()  # stderr keeps the whole record
