"""The hermesctl command line against a real daemon, as a separate process."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir


def test_status_prints_a_summary(daemon: DaemonProcess) -> None:
    out = run_hermesctl(["--socket", str(daemon.socket), "status"])
    assert out.returncode == 0, out.stderr
    assert f"pid {daemon.proc.pid}" in out.stdout
    assert str(daemon.home) in out.stdout


def test_status_json_is_machine_readable(daemon: DaemonProcess) -> None:
    out = run_hermesctl(["--socket", str(daemon.socket), "--json", "status"])
    info = json.loads(out.stdout)
    assert info["pid"] == daemon.proc.pid and info["socket"] == str(daemon.socket)


def test_ping_prints_round_trip_statistics(daemon: DaemonProcess) -> None:
    out = run_hermesctl(["--socket", str(daemon.socket), "ping", "-n", "25"])
    assert out.returncode == 0
    assert out.stdout.startswith("25 pings to ")
    for word in ("min", "p50", "p99", "max", "mean"):
        assert word in out.stdout
    stats = json.loads(
        run_hermesctl(["--socket", str(daemon.socket), "--json", "ping", "-n", "5"]).stdout
    )
    assert stats["count"] == 5 and stats["min_ms"] <= stats["p50_ms"] <= stats["max_ms"]


def test_hermes_socket_environment_variable_is_honoured(daemon: DaemonProcess) -> None:
    out = run_hermesctl(["status"], env={"HERMES_SOCKET": str(daemon.socket)})
    assert out.returncode == 0 and f"pid {daemon.proc.pid}" in out.stdout


def test_socket_is_found_through_hermes_home_like_the_daemon_does(start) -> None:
    home = short_tmpdir()
    daemon = start(home=home, socket_path=home / "hermesd.sock")
    out = run_hermesctl(["status"], env={"HERMES_HOME": str(home)})
    assert out.returncode == 0, out.stderr
    assert f"pid {daemon.proc.pid}" in out.stdout


def test_socket_from_config_is_found(start) -> None:
    home = short_tmpdir()
    sock = short_tmpdir() / "custom.sock"
    (home / "config.yaml").write_text(f"socket:\n  path: {sock}\n")
    daemon = start(home=home, socket_path=sock)
    out = run_hermesctl(["ping", "-n", "1"], env={"HERMES_HOME": str(home)})
    assert out.returncode == 0, out.stderr
    assert str(sock) in out.stdout
    assert daemon.alive()


def test_daemon_not_running_is_one_sentence_and_exit_3() -> None:
    missing = short_tmpdir() / "nothing.sock"
    out = run_hermesctl(["--socket", str(missing), "status"])
    assert out.returncode == 3
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(missing) in lines[0] and "Start it with `hermesd`" in lines[0]
    assert "Traceback" not in out.stderr


def test_daemon_error_prints_its_message_and_exits_1(daemon: DaemonProcess) -> None:
    code = (
        "import sys; import hermesctl.subcommands.core\n"
        "from hermesctl.cli import main, COMMANDS, command\n"
        "@command('status')\n"
        "def bad(args, client):\n"
        "    client.call('no.such.method'); return 0\n"
        f"sys.exit(main(['--socket', {str(daemon.socket)!r}, 'status']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert out.stderr.strip() == "hermesctl: unknown method 'no.such.method'"


def test_no_command_prints_help_and_exits_2() -> None:
    out = run_hermesctl([])
    assert out.returncode == 2 and "usage: hermesctl" in out.stdout


def test_usage_errors_exit_2() -> None:
    out = run_hermesctl(["ping", "-n", "zero"])
    assert out.returncode == 2 and "invalid int value" in out.stderr
    assert run_hermesctl(["ping", "-n", "0"]).returncode == 2


def test_hot_path_does_not_import_asyncio_openai_or_daemon_services(daemon: DaemonProcess) -> None:
    code = (
        "import sys; from hermesctl.cli import main\n"
        f"rc = main(['--socket', {str(daemon.socket)!r}, 'status'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('asyncio', 'openai', 'yaml', 'httpx', 'httpx2') or m in "
        "('hermesd.daemon.main', 'hermesd.rpc.connection', 'hermesd.rpc.server',"
        " 'hermesd.daemon.config'))\n"
        "print(rc, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip().endswith("0 []"), out.stdout + out.stderr


def test_command_index_matches_what_the_area_modules_register() -> None:
    import argparse

    from hermesctl.cli import build_parser
    from hermesctl.subcommands import INDEX

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(sub.choices) == sorted(INDEX)
    for word in INDEX:  # each word's own areas are enough to parse it
        partial = build_parser(word)
        sub = next(a for a in partial._actions if isinstance(a, argparse._SubParsersAction))
        assert word in sub.choices


def test_help_lists_every_command() -> None:
    out = run_hermesctl(["--help"], env={"HERMES_SOCKET": "/nonexistent/hermesd.sock"})
    assert out.returncode == 0
    for word in (
        "status",
        "ping",
        "chat",
        "sessions",
        "plugins",
        "tools",
        "skills",
        "cmd",
        "completion",
        "approvals",
    ):
        assert word in out.stdout
