"""A change that widens what tools may do is confirmed by a person on a terminal (issue 29 §1).

``config.set`` of a sandbox, approvals or allowlist setting and ``plugins.install``/``enable``
are answered ``ConfirmationRequired`` (a one-time challenge) only to the owner's process that
has a controlling terminal; ``hermesctl`` shows what widens and asks for ``yes``. Without a
terminal the call is refused outright and nothing changes; editing config.yaml and reloading
stays allowed. The daemon runs with the rule on (``HERMESD_CONFIRM_WIDENING=on``), which the
other tests' daemons turn off (tests/support/daemon.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from hermesd.rpc.protocol import Codes
from tests.support.daemon import DaemonProcess, checkout_pythonpath, short_tmpdir, start_daemon
from tests.support.terminal import Terminal

ON = {"HERMESD_CONFIRM_WIDENING": "on"}

# Run on a terminal: a challenge is good once, on its connection, for its parameters only.
REPLAY = """\
import json, sys
from hermesctl.client import Client
from hermesd.rpc.protocol import RpcError
def attempt(client, params):
    try:
        client.call("config.set", params, timeout=30)
        return "ok"
    except RpcError as exc:
        return exc.code
first, second = (Client.connect(sys.argv[1], timeout=30, hello=True) for _ in range(2))
wanted = {"key": "sandbox.network", "value": "false"}
try:
    first.call("config.set", wanted, timeout=30)
except RpcError as exc:
    challenge = exc.data["challenge"]
    out = {"first": exc.code, "widens": exc.data["widens"]}
out["other connection"] = attempt(second, {**wanted, "confirm": challenge})
other = {"key": "sandbox.network", "value": "true", "confirm": challenge}
out["other value"] = attempt(first, other)
try:
    first.call("config.set", wanted, timeout=30)
except RpcError as exc:
    challenge = exc.data["challenge"]
out["answered"] = attempt(first, {**wanted, "confirm": challenge})
out["replayed"] = attempt(first, {**wanted, "confirm": challenge})
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    d = start_daemon(short_tmpdir("wc-"), config="sandbox:\n  mode: read-only\n", env=ON)
    (d.home / "replay.py").write_text(REPLAY)
    yield d
    d.stop()


def _env(d: DaemonProcess) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(PYTHONPATH=checkout_pythonpath(env.get("PYTHONPATH")), TERM="xterm")
    return env


def _ctl(d: DaemonProcess, *args: str) -> list[str]:
    return [sys.executable, "-m", "hermesctl", "--socket", str(d.socket), *args]


def _no_terminal(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """hermesctl in a session of its own, without a controlling terminal."""
    return subprocess.run(
        _ctl(d, *args),
        env=_env(d),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def _setting(d: DaemonProcess, key: str) -> object:
    return d.call("config.get", {"key": key})["value"]


def test_without_a_terminal_a_widening_change_is_refused_and_nothing_changes(
    daemon: DaemonProcess,
) -> None:
    before = (daemon.home / "config.yaml").read_text()
    done = _no_terminal(daemon, "config", "set", "sandbox.mode", "off")
    assert done.returncode != 0
    assert "confirm" in done.stderr and "terminal" in done.stderr, done.stderr
    assert (daemon.home / "config.yaml").read_text() == before
    assert _setting(daemon, "sandbox.mode") == "read-only"


def test_a_change_that_widens_nothing_needs_no_confirmation(daemon: DaemonProcess) -> None:
    done = _no_terminal(daemon, "config", "set", "agent.max_iterations", "12")
    assert done.returncode == 0, done.stderr
    assert _setting(daemon, "agent.max_iterations") == 12


def test_on_a_terminal_hermesctl_shows_what_widens_and_a_no_changes_nothing(
    daemon: DaemonProcess,
) -> None:
    t = Terminal(_ctl(daemon, "config", "set", "sandbox.mode", "off"), _env(daemon))
    try:
        t.expect("sandbox.mode")
        t.expect("Type 'yes' to allow it: ")
        t.sendline("no")
        assert t.wait() != 0
        t.expect("not confirmed")
    finally:
        t.close()
    assert _setting(daemon, "sandbox.mode") == "read-only"


def test_on_a_terminal_a_yes_applies_the_change(daemon: DaemonProcess) -> None:
    t = Terminal(_ctl(daemon, "config", "set", "command_allowlist", "[rm -r]"), _env(daemon))
    try:
        t.expect("command_allowlist")
        t.expect("Type 'yes' to allow it: ")
        t.sendline("yes")
        assert t.wait() == 0, t.text
    finally:
        t.close()
    assert _setting(daemon, "command_allowlist") == ["rm -r"]
    assert "config.set confirmed by uid" in daemon.log()


def test_a_challenge_is_good_once_on_its_connection_for_its_parameters(
    daemon: DaemonProcess,
) -> None:
    t = Terminal([sys.executable, str(daemon.home / "replay.py"), str(daemon.socket)], _env(daemon))
    try:
        assert t.wait(60) == 0, t.text
        result = json.loads(t.expect(r"RESULT (\{.*\})").group(1))
    finally:
        t.close()
    assert result == {
        "first": Codes.CONFIRMATION_REQUIRED,
        "widens": [result["widens"][0]],
        "other connection": Codes.PERMISSION_DENIED,
        "other value": Codes.PERMISSION_DENIED,
        "answered": "ok",
        "replayed": Codes.PERMISSION_DENIED,
    }
    assert "sandbox.network" in result["widens"][0]
    assert _setting(daemon, "sandbox.network") is False


def test_editing_the_config_file_and_reloading_stays_allowed(daemon: DaemonProcess) -> None:
    path = daemon.home / "config.yaml"
    path.write_text(path.read_text() + "approvals:\n  timeout: 42\n")
    done = _no_terminal(daemon, "reload")
    assert done.returncode == 0, done.stderr
    assert _setting(daemon, "approvals.timeout") == 42


def test_a_plugin_install_needs_the_person_too(daemon: DaemonProcess) -> None:
    done = _no_terminal(daemon, "plugins", "install", str(daemon.home / "no-such-plugin"))
    assert done.returncode != 0
    assert "its code runs inside hermesd" in done.stderr, done.stderr
