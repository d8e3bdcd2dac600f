"""Shell completion, run in the real shells against a real daemon: the scripts
``hermesctl completion bash|zsh|fish`` prints complete subcommands and flags from the parser,
and session ids, plugin names, tool names and approval ids through ``hermesctl __complete``,
which asks the running daemon."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.support.completion import bash_complete, completion_env, fish_complete, script
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir


@pytest.fixture
def shell_env(daemon: DaemonProcess) -> dict[str, str]:
    """An environment whose `hermesctl` is this checkout's, talking to ``daemon``."""
    return completion_env(daemon)


def test_bash_completes_subcommands_and_their_flags(shell_env: dict[str, str]) -> None:
    assert "sessions" in bash_complete(shell_env, "se")
    assert {"--limit", "--before", "--json"} <= set(
        bash_complete(shell_env, "sessions", "list", "--")
    )


def test_bash_completes_session_ids_from_the_daemon(
    daemon: DaemonProcess, shell_env: dict[str, str]
) -> None:
    sid = daemon.call("session.create")["id"]
    assert sid in bash_complete(shell_env, "sessions", "show", "")
    assert sid in bash_complete(shell_env, "chat", "--session", sid[:10])


def test_bash_completes_tool_and_plugin_names(shell_env: dict[str, str]) -> None:
    assert "terminal" in bash_complete(shell_env, "tools", "call", "term")
    assert "calculator" in bash_complete(shell_env, "plugins", "info", "calc")


def test_fish_completes_subcommands_session_ids_and_approval_ids(
    daemon: DaemonProcess, shell_env: dict[str, str]
) -> None:
    sid = daemon.call("session.create")["id"]
    assert "sessions" in fish_complete(shell_env, "hermesctl se")
    assert sid in fish_complete(shell_env, "hermesctl sessions delete ")
    assert "--limit" in fish_complete(shell_env, "hermesctl sessions list --")


def test_zsh_script_is_valid_and_its_hooks_ask_the_daemon(
    daemon: DaemonProcess, shell_env: dict[str, str]
) -> None:
    sid = daemon.call("session.create")["id"]
    path = script("zsh", shell_env)
    syntax = subprocess.run(["zsh", "-n", str(path)], capture_output=True, text=True, timeout=60)
    assert syntax.returncode == 0, syntax.stderr
    assert "_hermesctl_sessions" in path.read_text()
    # the script's hook, with compadd standing in for the completion system's display
    program = (
        "compdef() { :; }\n"
        f"source {path}\n"
        'compadd() { print -l -- "$@"; }\n'
        "_hermesctl_sessions\n"
    )
    out = subprocess.run(
        ["zsh", "-c", program], env=shell_env, capture_output=True, text=True, timeout=60
    )
    assert sid in out.stdout.split(), out.stderr


def test_approval_ids_of_pending_approvals_complete(
    daemon: DaemonProcess, shell_env: dict[str, str]
) -> None:
    victim = short_tmpdir("victim-")
    with daemon.client() as asker:  # asks, and never answers the approval.request it gets
        asker.send("tools.call", {"name": "terminal", "args": {"command": f"rm -r {victim}"}})
        deadline = time.monotonic() + 15
        pending: list[dict[str, str]] = []
        while not pending and time.monotonic() < deadline:
            pending = daemon.call("approvals.pending")["pending"]
            time.sleep(0.05)
        assert pending, "the approval never became pending"
        offered = bash_complete(shell_env, "approvals", "approve", "apr_")
        assert offered == [pending[0]["id"]]
        assert pending[0]["id"] in fish_complete(shell_env, "hermesctl approvals deny ")
    assert victim.exists()


def test_the_hook_prints_nothing_when_the_daemon_is_down() -> None:
    out = run_hermesctl(
        ["__complete", "sessions"], env={"HERMES_SOCKET": str(short_tmpdir() / "none.sock")}
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")


def test_the_hook_refuses_an_unknown_kind() -> None:
    out = run_hermesctl(["__complete", "nonsense"])
    assert out.returncode == 2 and "usage: hermesctl __complete" in out.stderr


@pytest.mark.parametrize(
    ("shell", "where"),
    [
        ("bash", ".local/share/bash-completion/completions/hermesctl"),
        ("fish", ".config/fish/completions/hermesctl.fish"),
        ("zsh", ".zfunc/_hermesctl"),
    ],
)
def test_completion_install_works_in_a_fresh_home(shell: str, where: str) -> None:
    home = short_tmpdir("home-")
    env = {"HOME": str(home), "XDG_DATA_HOME": "", "XDG_CONFIG_HOME": ""}
    out = run_hermesctl(["completion", shell, "--install"], env=env)
    assert out.returncode == 0, out.stderr
    written = home / where
    assert out.stdout.startswith(f"wrote {written}")
    printed = run_hermesctl(["completion", shell], env=env).stdout
    assert written.read_text() == printed
