"""The tool sandbox's settings on a real daemon: modes, mechanisms, the refusal when none works,
``sandbox.writable``, ``sandbox.readable_deny``, ``terminal.env_passthrough`` and ``status``.

Attacks are in tests/reliability/test_sandbox_attacks.py and test_nested_clients.py; this file
checks that each setting does what docs/sandbox.md says, under both mechanisms where it
matters. Every command aims inside this test's temporary directories.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hermesd.sandbox.confine import TEST_ABI_VARIABLE
from tests.support.approvals import terminal, tool
from tests.support.daemon import DaemonProcess, checkout_pythonpath, short_tmpdir
from tests.support.plugin_factory import write_plugin

Start = Callable[..., DaemonProcess]
MECHANISMS = ["bwrap", "landlock"]


def _sandboxed(
    start: Start, sandbox: str, extra: str = "", env: dict[str, str] | None = None
) -> DaemonProcess:
    config = f"approvals:\n  mode: 'off'\nsandbox:\n{sandbox}{extra}"
    return start(config=config, env=env)


def _run(d: DaemonProcess, command: str) -> dict[str, object]:
    with d.client(timeout=60) as c:
        result: dict[str, object] = terminal(c, command, timeout=60)
        return result


def test_without_bwrap_or_landlock_every_command_is_refused_naming_sandbox_mode(
    start: Start,
) -> None:
    outside = short_tmpdir("sbo-")
    d = _sandboxed(start, "  bwrap: /nonexistent/bwrap\n", env={TEST_ABI_VARIABLE: "0"})
    status = d.call("status")["sandbox"]
    assert status["mode"] == "workspace-write" and status["mechanism"] == "unavailable"
    assert "bubblewrap" in status["reason"] and "Landlock" in status["reason"]
    result = _run(d, f"touch {outside}/ran")
    assert "sandbox.mode" in str(result["error"]) and "refused" in str(result["error"])
    assert not (outside / "ran").exists()
    assert d.call("ping")["pong"] is True


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_without_libseccomp_every_command_is_refused_not_run_unfiltered(
    start: Start, mechanism: str
) -> None:
    shadow, outside = short_tmpdir("sbs-"), short_tmpdir("sbo-")
    # found before the installed binding: loads as pyseccomp does when libseccomp.so.2 is missing
    (shadow / "pyseccomp.py").write_text(
        "raise OSError('libseccomp.so.2: cannot open shared object file')\n"
    )
    d = _sandboxed(
        start, f"  mechanism: {mechanism}\n", env={"PYTHONPATH": checkout_pythonpath(str(shadow))}
    )
    status = d.call("status")["sandbox"]
    assert status["mechanism"] == "unavailable" and "libseccomp" in status["reason"], status
    result = _run(d, f"touch {outside}/ran")
    assert "sandbox.mode" in str(result["error"]) and "libseccomp" in str(result["error"])
    assert not (outside / "ran").exists()


def test_a_forced_bwrap_that_cannot_run_does_not_fall_back_to_landlock(start: Start) -> None:
    d = _sandboxed(start, "  mechanism: bwrap\n  bwrap: /nonexistent/bwrap\n")
    assert d.call("status")["sandbox"]["mechanism"] == "unavailable"
    assert "sandbox.mode" in str(_run(d, "true")["error"])


def test_landlock_older_than_abi_6_is_not_used(start: Start) -> None:
    d = _sandboxed(start, "  mechanism: landlock\n", env={TEST_ABI_VARIABLE: "5"})
    status = d.call("status")["sandbox"]
    assert status["mechanism"] == "unavailable" and "ABI 5" in status["reason"]


def test_mode_off_is_shown_in_status_and_runs_unconfined(start: Start) -> None:
    outside = short_tmpdir("sbo-")
    d = _sandboxed(start, "  mode: 'off'\n")
    assert d.call("status")["sandbox"] == {"mode": "off", "mechanism": "off", "network": "on"}
    assert _run(d, f"echo x > {outside}/written")["exit_code"] == 0
    assert (outside / "written").read_text() == "x\n"


def test_hermesctl_status_shows_the_sandbox(start: Start) -> None:
    d = _sandboxed(start, "  mode: 'off'\n")
    shown = subprocess.run(
        [sys.executable, "-m", "hermesctl", "--socket", str(d.socket), "status"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "sandbox:     off" in shown.stdout and "unconfined" in shown.stdout


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_read_only_mode_writes_nothing_but_its_private_tmp(start: Start, mechanism: str) -> None:
    d = _sandboxed(start, f"  mechanism: {mechanism}\n  mode: read-only\n")
    workspace = d.home / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.txt").write_text("readable\n")
    result = _run(
        d, 'cat notes.txt; echo x > new.txt; t=$(mktemp) && echo tmp-ok > "$t" && cat "$t"'
    )
    assert "readable" in str(result["output"]) and "tmp-ok" in str(result["output"])
    assert not (workspace / "new.txt").exists()
    shown = d.call("status")["sandbox"]
    assert shown == {"mode": "read-only", "mechanism": mechanism, "network": "on"}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_sandbox_writable_adds_a_folder_outside_the_workspace(start: Start, mechanism: str) -> None:
    extra, other = short_tmpdir("sbw-"), short_tmpdir("sbn-")
    d = _sandboxed(start, f"  mechanism: {mechanism}\n  writable: ['{extra}']\n")
    result = _run(d, f"echo yes > {extra}/made; echo no > {other}/made")
    assert (extra / "made").read_text() == "yes\n", result
    assert not (other / "made").exists()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_readable_deny_hides_a_file_and_a_folder(start: Start, mechanism: str) -> None:
    base = short_tmpdir("sbr-")
    (base / "secret-dir").mkdir()
    (base / "secret-dir" / "inside.txt").write_text("hidden-1\n")
    (base / "secret.txt").write_text("hidden-2\n")
    (base / "open.txt").write_text("visible\n")
    deny = f"['{base}/secret-dir', '{base}/secret.txt']"
    # the workspace: the rest of /tmp is private to the call
    cwd = f"terminal:\n  cwd: {base}\n"
    d = _sandboxed(start, f"  mechanism: {mechanism}\n  readable_deny: {deny}\n", cwd)
    output = str(
        _run(d, f"cat {base}/open.txt {base}/secret.txt {base}/secret-dir/inside.txt")["output"]
    )
    assert "visible" in output
    assert "hidden-1" not in output and "hidden-2" not in output


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_env_passthrough_passes_named_variables_but_never_secrets(
    start: Start, mechanism: str
) -> None:
    home = short_tmpdir()
    (home / ".env").write_text("FROM_DOTENV=dotenv-value-123456\n")
    d = start(
        home,
        config=(
            f"approvals:\n  mode: 'off'\nsandbox:\n  mechanism: {mechanism}\n"
            "terminal:\n  env_passthrough: [PROJECT_FLAG, MY_API_KEY, FROM_DOTENV]\n"
        ),
        env={"PROJECT_FLAG": "on", "MY_API_KEY": "key-value-987654", "UNLISTED": "nope"},
    )
    output = str(_run(d, "env")["output"])
    assert "PROJECT_FLAG=on" in output
    assert "MY_API_KEY" not in output and "FROM_DOTENV" not in output
    assert "UNLISTED" not in output and "PATH=" in output and "HOME=" in output


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_default_directory_is_the_sessions_workspace(start: Start, mechanism: str) -> None:
    d = _sandboxed(start, f"  mechanism: {mechanism}\n")
    output = str(_run(d, "pwd")["output"]).strip()
    assert Path(output) == (d.home / "workspace").resolve()


def test_an_unknown_sandbox_mode_is_a_configuration_error(start: Start) -> None:
    home = short_tmpdir()
    (home / "config.yaml").write_text("sandbox:\n  mode: permissive\n")
    done = subprocess.run(
        [sys.executable, "-m", "hermesd", "--home", str(home), "--check-config"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 78 and "sandbox.mode" in done.stderr


def test_the_daemon_starts_with_umask_077_and_is_not_dumpable(start: Start) -> None:
    d = start()
    status = Path(f"/proc/{d.proc.pid}/status").read_text()
    assert "Umask:\t0077" in status
    probe = (
        "from hermesd.sandbox.process import harden_daemon, is_dumpable\n"
        "before = is_dumpable(); harden_daemon(); print(before, is_dumpable())"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["True", "False"], done.stderr


DISPATCHER = """
    import json, os

    ctx_ref = []

    def run(args, **kw):
        out = json.loads(ctx_ref[0].dispatch_tool("terminal", {"command": args["command"]}))
        out["plugin_sees_key"] = os.environ.get("PLUGIN_API_KEY") == "plugin-key-5566778899"
        return json.dumps(out)

    def register(ctx):
        ctx_ref.append(ctx)
        ctx.register_tool("run_through_dispatch", "dispatch", {
            "name": "run_through_dispatch", "description": "terminal via dispatch_tool",
            "parameters": {"type": "object", "required": ["command"], "properties": {
                "command": {"type": "string", "description": "shell command"}}}}, run)
"""


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_plugins_dispatch_tool_terminal_runs_in_the_same_sandbox(
    start: Start, mechanism: str
) -> None:
    home, outside = short_tmpdir(), short_tmpdir("sbo-")
    (home / ".env").write_text("PLUGIN_API_KEY=plugin-key-5566778899\n")
    write_plugin(home / "plugins", "dispatcher", DISPATCHER)
    d = start(home, config=f"approvals:\n  mode: 'off'\nsandbox:\n  mechanism: {mechanism}\n")
    unix = f"{sys.executable} -c 'import socket; socket.socket(socket.AF_UNIX)'"
    command = f"env; cat {home}/.e''nv; echo x > {outside}/planted; {unix} 2>&1 | tail -1"
    with d.client(timeout=60) as c:
        result = tool(c, "run_through_dispatch", {"command": command}, timeout=60)
    assert "PermissionError: [Errno 1] Operation not permitted" in result["output"]  # seccomp
    assert result["plugin_sees_key"] is True  # in-process plugin code keeps its requires_env
    assert "plugin-key" not in result["output"] and "PLUGIN_API_KEY" not in result["output"]
    assert "Permission denied" in result["output"] or "No such file" in result["output"]
    assert not (outside / "planted").exists()


def test_the_chat_banner_names_the_sandbox_and_says_loudly_when_it_is_off() -> None:
    from hermesctl.chat_ui import Style, banner

    def shown(sandbox: dict[str, str]) -> str:
        info = {"daemon_version": "0.1.0", "sandbox": sandbox}
        return banner(info, "m", {"id": "s1"}, [], Style(False), False)

    assert "sandbox: workspace-write (bwrap)" in shown(
        {"mode": "workspace-write", "mechanism": "bwrap"}
    )
    assert "unconfined" in shown({"mode": "off", "mechanism": "off"})
    refused = shown({"mode": "read-only", "mechanism": "unavailable", "reason": "no bwrap"})
    assert "refused" in refused and "no bwrap" in refused


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("network", [True, False])
def test_sandbox_network_false_cuts_tcp(start: Start, mechanism: str, network: bool) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        extra = "" if network else "  network: false\n"
        d = _sandboxed(start, f"  mechanism: {mechanism}\n{extra}")
        probe = (
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5); "
            "print('connected')\""
        )
        output = str(_run(d, probe)["output"])
    finally:
        listener.close()
    assert ("connected" in output) is network, output
    assert d.call("status")["sandbox"]["network"] == ("on" if network else "off")
