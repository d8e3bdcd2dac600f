"""hermesctl behaves like the command lines people know (git, docker): a closed pipe ends it
quietly, NO_COLOR is honoured, --json goes anywhere, usage errors show the subcommand's usage,
search takes several words, session ids accept unique prefixes, ``sessions show`` prints the
message ids ``fork --upto`` takes, and uptime reads the same everywhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.daemon import (
    DaemonProcess,
    run_hermesctl,
    send_and_follow,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import ScriptedModelServer, calculator_rules, model_config
from tests.support.terminal import Terminal

UPTIME = r"up \d+[dhms]( \d+[hms])?\b"


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=calculator_rules) as server:
        yield server


@pytest.fixture(scope="module")
def cli(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    daemon = start_daemon(short_tmpdir(), config=model_config(model.url))
    yield daemon
    daemon.stop()


def ctl(d: DaemonProcess, *args: str, input: str | None = "") -> subprocess.CompletedProcess[str]:
    return run_hermesctl(
        ["--socket", str(d.socket), *args], env={"HERMES_HOME": str(d.home)}, input=input
    )


def chatted(d: DaemonProcess, *messages: str) -> str:
    sid: str = d.call("session.create")["id"]
    with d.client() as c:
        for message in messages:
            send_and_follow(c, sid, message)
    return sid


def test_a_closed_pipe_ends_hermesctl_without_a_traceback(cli: DaemonProcess) -> None:
    chatted(cli, "fill the list")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone, as after `| head -1`
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hermesctl",
            "--socket",
            str(cli.socket),
            "--json",
            "sessions",
            "list",
        ],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HERMES_HOME": str(cli.home)},
        timeout=60,
    )
    os.close(write_end)
    assert proc.stderr == ""
    assert proc.returncode == 141


def test_no_color_turns_every_colour_off_in_the_repl(cli: DaemonProcess) -> None:
    sgr = re.compile(r"\x1b\[[0-9;]*m")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(cli.home), TERM="xterm")
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(cli.socket), "chat"]
    for no_color, coloured in (("", True), ("1", False)):
        t = Terminal(argv, {**env, "NO_COLOR": no_color})
        try:
            t.expect("› ")
            t.sendline("colours?")
            t.expect("You said: colours?")
            t.expect("› ")
            t.sendline("/quit")
            assert t.wait() == 0
            assert bool(sgr.search(t.raw)) is coloured
        finally:
            t.close()


def test_json_is_accepted_after_the_subcommand(cli: DaemonProcess) -> None:
    sid = chatted(cli, "json anywhere")
    listed = ctl(cli, "sessions", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sid in [s["id"] for s in json.loads(listed.stdout)]
    status = ctl(cli, "status", "--json")
    assert json.loads(status.stdout)["pid"] == cli.proc.pid


def test_a_usage_error_prints_the_subcommands_usage(cli: DaemonProcess) -> None:
    out = ctl(cli, "chat", input="")
    assert out.returncode == 2
    assert out.stderr.startswith("usage: hermesctl chat ")
    assert "stdin was empty" in out.stderr


def test_sessions_search_takes_several_words(cli: DaemonProcess) -> None:
    sid = chatted(cli, "purple elephants dance")
    out = ctl(cli, "sessions", "search", "purple", "elephants", "--session", sid, "--json")
    assert out.returncode == 0, out.stderr
    assert {hit["session_id"] for hit in json.loads(out.stdout)} == {sid}


def test_a_unique_prefix_of_a_session_id_names_that_session(cli: DaemonProcess) -> None:
    sid = chatted(cli, "find me by prefix")
    out = ctl(cli, "sessions", "show", sid[:-1])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(sid)
    assert "find me by prefix" in out.stdout


def test_an_ambiguous_prefix_is_an_error_listing_the_candidates(cli: DaemonProcess) -> None:
    first, second = chatted(cli), chatted(cli)
    common = next(first[:i] for i in range(len(first)) if first[i] != second[i])
    out = ctl(cli, "sessions", "show", common)
    assert out.returncode == 1
    assert "ambiguous" in out.stderr and first in out.stderr and second in out.stderr
    assert "Traceback" not in out.stderr
    assert cli.call("status")["pid"] == cli.proc.pid


def test_sessions_show_prints_the_message_ids_fork_upto_takes(cli: DaemonProcess) -> None:
    sid = chatted(cli, "first words", "second words")
    messages = cli.call("session.history", {"session_id": sid})["messages"]
    out = ctl(cli, "sessions", "show", sid)
    assert f"#{messages[0]['id']} [user] first words" in out.stdout
    assert f"#{messages[2]['id']} [user] second words" in out.stdout
    forked = ctl(cli, "sessions", "fork", sid, "--upto", str(messages[1]["id"]), "--json")
    assert json.loads(forked.stdout)["message_count"] == 2


def test_uptime_reads_the_same_in_status_and_the_status_command(cli: DaemonProcess) -> None:
    status = ctl(cli, "status").stdout
    command = ctl(cli, "cmd", "/status").stdout
    assert re.search(UPTIME, status) and re.search(UPTIME, command)


def test_an_unknown_flag_prints_the_subcommands_usage(cli: DaemonProcess) -> None:
    out = ctl(cli, "sessions", "list", "--bogus")
    assert out.returncode == 2
    assert out.stderr.startswith("usage: hermesctl sessions list ")
    assert "unrecognized arguments: --bogus" in out.stderr
