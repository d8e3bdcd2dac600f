"""Start-up, configuration, signals and stopping of a real hermesd."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from hermesd.daemon import config
from hermesd.rpc.protocol import Codes, RpcError
from tests.support.daemon import DaemonProcess, child_pids, daemon_env, send_and_follow
from tests.support.modelserver import ScriptedModelServer, calculator_rules, model_config
from tests.support.plugin_factory import write_plugin


def _run_hermesd(
    home, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "hermesd", *args]
    return subprocess.run(
        argv, env=daemon_env(home, env), capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize(
    "text, key",
    [
        ("limits:\n  max_connections: lots\n", "limits.max_connections"),
        ("model:\n  timeout: [1]\n", "model.timeout"),
        ("plugins:\n  enabled: calculator\n", "plugins.enabled"),
        ("approvals:\n  mode: sometimes\n", "approvals.mode"),
        ("agent: 5\n", "agent"),
        ("shutdown_timeout: true\n", "shutdown_timeout"),
    ],
)
def test_wrong_types_exit_78_naming_the_key(home, text: str, key: str) -> None:
    (home / "config.yaml").write_text(text)
    proc = _run_hermesd(home, "--allow-root", "--socket", str(home / "s.sock"))
    assert proc.returncode == 78
    assert f"'{key}'" in proc.stderr


def test_invalid_yaml_exits_78(home) -> None:
    (home / "config.yaml").write_text("model: [unclosed\n")
    proc = _run_hermesd(home, "--allow-root")
    assert proc.returncode == 78
    assert "not valid YAML" in proc.stderr


def test_unknown_group_is_a_configuration_error(home) -> None:
    (home / "config.yaml").write_text("socket:\n  group: no-such-group-here\n")
    proc = _run_hermesd(home, "--allow-root")
    assert proc.returncode == 78 and "no-such-group-here" in proc.stderr


def test_check_config_accepts_a_good_file_and_lists_warnings(home) -> None:
    (home / "config.yaml").write_text("model:\n  default: m\nfrobnicate: 1\n")
    proc = _run_hermesd(home, "--check-config")
    assert proc.returncode == 0
    assert "configuration OK" in proc.stdout
    assert "unknown setting 'frobnicate'" in proc.stderr


def test_check_config_rejects_a_bad_file(home) -> None:
    (home / "config.yaml").write_text("limits:\n  max_message: -1\n")
    proc = _run_hermesd(home, "--check-config")
    assert proc.returncode == 78 and "limits.max_message" in proc.stderr


def test_unknown_keys_are_warned_about_not_fatal(start) -> None:
    daemon = start(config="colour: blue\nmodel:\n  flavour: x\n")
    warnings = daemon.call("status")["config_warnings"]
    assert "unknown setting 'colour' ignored" in warnings
    assert "unknown setting 'model.flavour' ignored" in warnings
    assert "unknown setting 'colour'" in daemon.log()


@pytest.mark.skipif(os.geteuid() != 0, reason="only meaningful as root")
def test_refuses_to_run_as_root_without_allow_root(home) -> None:
    proc = _run_hermesd(home, "--socket", str(home / "s.sock"))
    assert proc.returncode == 77
    assert "refusing to run as root" in proc.stderr


def test_missing_home_is_created_private_to_the_owner(start, home) -> None:
    made = home / "fresh" / "hermes"
    daemon = start(home=made, create_home=False)
    assert (os.stat(made).st_mode & 0o777) == 0o700
    assert daemon.call("status")["home"] == str(made)


def test_dotenv_fills_unset_variables_only(home, monkeypatch) -> None:
    (home / ".env").write_text("HERMES_T_A=from-file\nHERMES_T_B=from-file\n")
    monkeypatch.setenv("HERMES_T_B", "from-env")
    monkeypatch.delenv("HERMES_T_A", raising=False)
    filled = config.apply_dotenv(config.load_dotenv_file(home))
    assert filled == ["HERMES_T_A"]
    assert os.environ["HERMES_T_A"] == "from-file"
    assert os.environ["HERMES_T_B"] == "from-env"
    monkeypatch.delenv("HERMES_T_A")


# Settings that did something before and nothing now, with a value they once refused too.
DEPRECATED = {
    "model.transport": "httpx",
    "model.process": "separate",
    "model.process_idle_exit": -1,
    "switch_interval": 0.5,
}


def deprecated_yaml(model_url: str | None = None) -> str:
    model = model_config(model_url) if model_url else "model:\n"
    keys = [f"  {key.split('.')[1]}: {v}" for key, v in DEPRECATED.items() if "." in key]
    return model + "\n".join(keys) + "\nswitch_interval: 0.5\n"


def test_check_config_accepts_deprecated_settings_with_a_warning_naming_each(home) -> None:
    (home / "config.yaml").write_text(deprecated_yaml())
    proc = _run_hermesd(home, "--check-config")
    assert proc.returncode == 0, proc.stderr
    for key in DEPRECATED:
        assert f"warning: '{key}' is deprecated and has no effect" in proc.stderr


def test_deprecated_settings_are_logged_and_change_nothing(start, home) -> None:
    # Read from inside the daemon by a plugin tool: the interpreter's switch interval.
    write_plugin(
        home / "plugins",
        "gilprobe",
        """
        import sys

        def register(ctx):
            ctx.register_tool(name="switch_interval", toolset="gilprobe",
                              schema={"name": "switch_interval", "description": "interval",
                                      "parameters": {"type": "object", "properties": {}}},
                              handler=lambda args, **kw: repr(sys.getswitchinterval()))
        """,
    )
    with ScriptedModelServer(rules=calculator_rules) as model:
        (home / "config.yaml").write_text(deprecated_yaml(model.url))
        daemon = start(home=home)
        warnings = daemon.call("status")["config_warnings"]
        for key in DEPRECATED:
            assert any(w.startswith(f"'{key}' is deprecated") for w in warnings), warnings
            assert f"'{key}' is deprecated" in daemon.log()
        with daemon.client() as c:
            sid = c.call("session.create")["id"]
            assert send_and_follow(c, sid, "What is 15 * 23?")[-1]["status"] == "completed"
        assert child_pids(daemon.proc.pid) == []  # no model client process, "separate" or not
        probe = daemon.call("tools.call", {"name": "switch_interval", "args": {}})["result"]
        assert float(probe) == pytest.approx(0.005)  # Python's own


def test_sigterm_lets_in_flight_requests_finish_then_exits_0(daemon: DaemonProcess) -> None:
    with daemon.client() as c:
        msgid = c.send("ping", {"data": "late", "delay_ms": 2000})
        c.call("ping")  # answered while the slow one runs: that one was read before the stop
        daemon.signal(signal.SIGTERM)
        assert msgid not in c._responses  # still in flight at the stop
        assert c.wait(msgid, timeout=10)["data"] == "late"
    assert daemon.proc.wait(15) == 0
    daemon.notify.wait_for("STOPPING=1")


def test_requests_that_outlive_the_shutdown_timeout_are_cancelled(start) -> None:
    daemon = start(config="shutdown_timeout: 0.3\n")
    with daemon.client() as c:
        msgid = c.send("ping", {"delay_ms": 30_000})
        time.sleep(0.1)
        t0 = time.monotonic()
        daemon.signal(signal.SIGTERM)
        with pytest.raises(RpcError) as err:
            c.wait(msgid, timeout=10)
        assert err.value.code == Codes.SHUTTING_DOWN
    assert daemon.proc.wait(15) == 0
    assert time.monotonic() - t0 < 10


def test_sigint_stops_gracefully_too(daemon: DaemonProcess) -> None:
    daemon.signal(signal.SIGINT)
    assert daemon.proc.wait(15) == 0


def test_shutdown_method_stops_the_daemon_for_its_owner(daemon: DaemonProcess) -> None:
    assert daemon.call("shutdown") == {"stopping": True}
    assert daemon.proc.wait(15) == 0


def test_sighup_reloads_the_configuration(daemon: DaemonProcess) -> None:
    assert daemon.call("status")["config_warnings"] == []
    (daemon.home / "config.yaml").write_text("surprise: 1\n")
    daemon.signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "configuration reloaded" not in daemon.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemon.call("status")["config_warnings"] == ["unknown setting 'surprise' ignored"]
    daemon.notify.wait_for("RELOADING=1")  # sent before the log line, heard by a thread
    assert daemon.notify.count("RELOADING=1") == 1


def test_sighup_with_a_broken_config_keeps_the_running_one(start) -> None:
    daemon = start(config="log_level: INFO\n")
    (daemon.home / "config.yaml").write_text("log_level: [oops\n")
    daemon.signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "config not reloaded" not in daemon.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "keeping the running one" in daemon.log()
    assert daemon.alive() and daemon.call("ping")["pong"]


def test_config_reload_method_reports_errors_to_the_caller(daemon: DaemonProcess) -> None:
    (daemon.home / "config.yaml").write_text("limits:\n  max_inflight: many\n")
    with daemon.client() as c, pytest.raises(RpcError) as err:
        c.call("config.reload")
    assert "limits.max_inflight" in err.value.message
    (daemon.home / "config.yaml").write_text("log_level: DEBUG\n")
    assert daemon.call("config.reload") == {"reloaded": True, "warnings": []}
