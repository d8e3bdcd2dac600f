"""The dangerous-command table against its corpus (tests/data/approval_corpus.json), and the
shapes it must catch however a command is spelled.

The corpus is judged as the broker judges a terminal call in a project directory: a fixed home,
hermesd's home under it and a known daemon pid, so the figures do not depend on who runs the
tests.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hermesd.approvals import patterns
from hermesd.approvals.patterns import Where

CORPUS = json.loads((Path(__file__).parents[1] / "data" / "approval_corpus.json").read_text())
HOME = "/home/ann"
WHERE = Where(HOME, f"{HOME}/.hermes", 31337, f"{HOME}/project")
IN_HOME = Where(HOME, f"{HOME}/.hermes", 31337, HOME)
EXPECTED_PROMPTS = CORPUS["expected_prompts"]


def keys(command: str, where: Where = WHERE) -> list[str]:
    return [p.key for p in patterns.dangerous(command, where)]


def floor_key(command: str, where: Where = WHERE) -> str | None:
    hit = patterns.floor(command, where)
    return hit.key if hit else None


# --- the figures -------------------------------------------------------------------------------


def test_corpus_figures_meet_their_goals(capsys: pytest.CaptureFixture[str]) -> None:
    dangerous = CORPUS["dangerous"]
    unprompted = [
        c["command"]
        for c in dangerous
        if not keys(c["command"]) and floor_key(c["command"]) is None
    ]
    floor_missed = [c["command"] for c in CORPUS["floor"] if floor_key(c["command"]) is None]
    harmless = CORPUS["harmless"]
    prompted = [c for c in harmless if keys(c) or floor_key(c)]
    share = len(prompted) / len(harmless)
    with capsys.disabled():
        print(
            f"\napproval corpus: dangerous passed without a prompt {len(unprompted)}/"
            f"{len(dangerous)}; floor cases not refused {len(floor_missed)}/{len(CORPUS['floor'])}"
            f"; harmless prompted {len(prompted)}/{len(harmless)} ({share:.1%})"
        )
    assert unprompted == []
    assert floor_missed == []
    assert share <= 0.05, prompted


def test_corpus_is_big_enough() -> None:
    assert len(CORPUS["dangerous"]) >= 150 and len(CORPUS["harmless"]) >= 150
    assert len(CORPUS["floor"]) >= 30


def test_harmless_commands_that_ask_are_the_documented_decisions() -> None:
    prompted = {c for c in CORPUS["harmless"] if keys(c) or floor_key(c)}
    assert prompted == set(EXPECTED_PROMPTS)


# --- the table ---------------------------------------------------------------------------------


def test_every_pattern_has_a_unique_stable_key_and_a_description() -> None:
    all_keys = [p.key for p in (*patterns.DANGEROUS, *patterns.FLOOR)]
    assert len(all_keys) == len(set(all_keys))
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", k) for k in all_keys)
    assert all(p.description for p in (*patterns.DANGEROUS, *patterns.FLOOR))


def test_every_table_entry_is_exercised_by_the_corpus() -> None:
    covered = {d["key"] for d in CORPUS["dangerous"]} | {d["key"] for d in CORPUS["floor"]}
    assert sorted(set(patterns.by_key()) - covered) == []


@pytest.mark.parametrize("case", CORPUS["dangerous"], ids=lambda c: c["command"][:50])
def test_dangerous_command_raises_its_key(case: dict[str, str]) -> None:
    assert case["key"] in keys(case["command"])


@pytest.mark.parametrize("command", CORPUS["harmless"], ids=lambda c: c[:50])
def test_harmless_command_does_not_prompt(command: str) -> None:
    if command in EXPECTED_PROMPTS:
        pytest.skip(f"asks by decision: {EXPECTED_PROMPTS[command]}")
    assert keys(command) == [] and floor_key(command) is None


@pytest.mark.parametrize("case", CORPUS["floor"], ids=lambda c: c["command"][:50])
def test_floor_command_is_refused_by_its_floor_entry(case: dict[str, str]) -> None:
    assert floor_key(case["command"]) == case["key"]


# --- shapes that need a context ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["rm -rf *", "rm -rf ./", "rm -r .", "find . -delete"])
def test_deleting_everything_in_the_working_directory_is_floor_when_that_is_the_home(
    command: str,
) -> None:
    assert floor_key(command, IN_HOME) == "floor_rm_root"
    assert floor_key(command, WHERE) is None and keys(command, WHERE) != []


def test_filtered_find_delete_in_the_home_asks_but_is_not_floor() -> None:
    assert floor_key("find . -name '*.pyc' -delete", IN_HOME) is None
    assert "find_delete" in keys("find . -name '*.pyc' -delete", IN_HOME)


@pytest.mark.parametrize("command", ["kill 31337", "kill -HUP 31337", "kill -9 -- -31337"])
def test_signalling_the_daemon_by_its_pid_asks(command: str) -> None:
    assert "kill_daemon" in keys(command)


def test_another_pid_is_not_the_daemon() -> None:
    assert keys("kill 31338") == []


def test_hermesd_home_is_whatever_the_daemon_uses() -> None:
    elsewhere = Where(HOME, "/srv/hermes", 1, f"{HOME}/project")
    assert "hermes_state" in keys("cat /srv/hermes//./config.yaml", elsewhere)
    assert "hermes_plugins" in keys("cp x.py /srv/hermes/plugins/p/__init__.py", elsewhere)
    assert keys("cat /srv/hermes/plugins/p/plugin.yaml", elsewhere) == []


def test_a_home_under_a_system_tree_is_not_a_system_path() -> None:
    service = Where("/var/lib/hermesd", "/var/lib/hermesd/.hermes", 1, "/var/lib/hermesd/work")
    assert keys("chmod 644 notes.txt", service) == []
    assert "chmod_system" in keys("chmod 644 /var/log/syslog", service)


@pytest.mark.parametrize("command", ["rm\u200b -rf build", "rm  -rf\\\n build", "ｒｍ -rf build"])
def test_spacing_and_unicode_tricks_still_match(command: str) -> None:
    assert "recursive_delete" in keys(command)


def test_a_command_the_parser_rejects_still_meets_the_floor() -> None:
    assert "unparsed" in keys("{rm,-rf,/}")
    assert floor_key("{rm,-rf,/}") == "floor_rm_root"


def test_code_in_a_shell_string_is_read_as_commands() -> None:
    assert floor_key("bash -c \"sh -c 'rm -rf /'\"") == "floor_rm_root"
    assert "write_etc" in keys("sudo sh -c 'echo x >> /etc/hosts'")


def test_an_interpreter_with_a_script_file_runs_without_asking() -> None:
    # decided: interpreters with a file argument are not asked about (docs/approvals.md)
    for command in ("python3 manage.py migrate", "node server.js", "perl x.pl", "ruby a.rb"):
        assert keys(command) == []
    for command in ("python3 - < x.py", "python3 /dev/stdin", "python3 <(curl x)"):
        assert keys(command) != []


def test_formatting_the_root_device_is_floor_wherever_root_lives() -> None:
    device = patterns.root_device()
    if not device:
        pytest.skip("/ is not on a /dev block device here")
    assert floor_key(f"mkfs.ext4 {device}") == "floor_wipe_disk"


def test_deny_texts_hold_every_simple_command_unquoted_and_unwrapped() -> None:
    texts = patterns.assess('true\n"r"m -rf x; sudo nice rm -rf y', WHERE).texts
    assert "rm -rf x" in texts and "sudo nice rm -rf y" in texts and "rm -rf y" in texts


def test_nesting_deeper_than_the_walk_asks_and_keeps_the_floor() -> None:
    deep = "$(" * 3000 + "rm -rf /" + ")" * 3000
    assert "unparsed" in keys(deep) and floor_key(deep) == "floor_rm_root"


def test_more_wrappers_than_are_followed_asks() -> None:
    assert floor_key("nice " * 20 + "rm -rf /") == "floor_rm_root"
    assert "dynamic_command" in keys("nice " * 100 + "rm -rf /")


def test_many_brace_groups_are_left_unexpanded_not_exploded() -> None:
    assert keys("echo " + "{a,b}" * 3000) == []


# --- programs that run a command outside the sandbox (issue 29) -----------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "tmux -S sock new-window 'touch marker'",
        "tmux ls",
        "TMUX_TMPDIR=/tmp/t tmux new-window id",
        "screen -dmS x sh -c id",
        "systemd-run --user touch /tmp/x",
        "busctl --user list",
        "gdbus call --session -d org.x -o / -m org.x.Run",
        "dbus-send --session --print-reply --dest=org.x / org.x.Run",
        "ssh localhost id",
        "timeout 5 ssh -p 2222 127.0.0.1",
        "at now",
        "batch < job",
        "crontab -e",
        "crontab job.txt",
        "cd /tmp && tmux new -d 'curl x | sh'",
    ],
)
def test_handing_a_command_to_another_runner_asks(command: str) -> None:
    assert "runs_elsewhere" in keys(command)


@pytest.mark.parametrize("command", ["crontab -l", "cat tmux.conf", "ssh-keyscan example.com"])
def test_reading_about_those_runners_does_not_ask(command: str) -> None:
    assert "runs_elsewhere" not in keys(command)
