"""Approval prompts show what will run, on a real hermesd: a command dressed with ANSI and CR
cannot show `ls -la` while `rm -rf` runs, known secrets are hidden with a note, secret-shaped
text is not, and the same display reaches ``approvals.pending``, hermesctl and the log.
Padding, look-alike letters, bidi controls and zero-width characters are flagged as warnings
in the request, and hermesctl shows them (captured and on a pseudo-terminal).

Commands only ever target a scratch directory of the test.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.approvals import Background, client_answering, terminal, wait_pending
from tests.support.daemon import run_hermesctl, short_tmpdir
from tests.support.terminal import Terminal

CONFIG = "terminal:\n  cwd: /tmp\n"
PLANTED = "planted-secret-7c6b5a49"


@pytest.fixture
def target() -> Path:
    """A directory the commands would delete."""
    path = short_tmpdir("apd-") / "doomed"
    (path / "sub").mkdir(parents=True)
    return path


def _spoof(target: Path) -> str:
    # a terminal printing this raw shows only "ls -la": CR returns, ESC[2K erases the line
    return f"rm -rf {target}\r\x1b[2Kls -la"


def test_escape_sequences_are_shown_escaped_with_the_real_command_words(start, target) -> None:
    daemon = start(config=CONFIG)
    client, asked = client_answering(daemon, "deny")
    command = _spoof(target)
    with client:
        result = terminal(client, command)
    assert result["error"].startswith("BLOCKED: Command denied by user.")
    request = asked.requests[0]
    assert request["command"] == f"rm -rf {target}\\r\\e[2Kls -la"
    assert "\r" not in request["command"] and "\x1b" not in request["command"]
    assert request["command_length"] == len(command)
    assert any("escapes" in note for note in request["notes"])
    assert target.exists()


def test_pending_list_hermesctl_and_log_show_the_same_escaped_command(start, target) -> None:
    daemon = start(config=CONFIG)
    caller, _ = client_answering(daemon, None)  # asked, never answers
    with caller:
        running = Background(terminal, caller, _spoof(target))
        pending = wait_pending(daemon)[0]
        assert pending["command"] == f"rm -rf {target}\\r\\e[2Kls -la"
        shown = run_hermesctl(["--socket", str(daemon.socket), "approvals", "pending"])
        with daemon.client() as other:
            other.call("approvals.respond", {"id": pending["id"], "choice": "deny"})
        running.result()
    assert shown.returncode == 0
    assert f"rm -rf {target}\\r\\e[2Kls -la" in shown.stdout
    assert "\x1b" not in shown.stdout and "\r" not in shown.stdout
    assert f"({len(_spoof(target))} characters)" in shown.stdout
    assert f"rm -rf {target}\\r\\e[2Kls -la" in daemon.log()
    assert "\x1b[2K" not in daemon.log()


def test_a_known_secret_is_hidden_with_a_note_and_a_shaped_one_is_not(start, target) -> None:
    home = short_tmpdir()
    (home / ".env").write_text(f"MY_PLANTED={PLANTED}\n")
    daemon = start(home, config=CONFIG)
    client, asked = client_answering(daemon, "deny")
    with client:
        terminal(client, f"rm -rf {target} # {PLANTED}")
        terminal(client, f"DEPLOY_TOKEN=$(rm -rf {target}) true")
    hidden, shaped = asked.requests
    assert PLANTED not in hidden["command"] and "[REDACTED]" in hidden["command"]
    assert hidden["secrets_hidden"] is True
    assert hidden["notes"][0] == (
        "Secret values were hidden from this display; the command runs with them."
    )
    assert shaped["command"] == f"DEPLOY_TOKEN=$(rm -rf {target}) true"
    assert shaped["secrets_hidden"] is False and shaped["notes"] == []
    assert f"DEPLOY_TOKEN=$(rm -rf {target}) true" in daemon.log()
    assert PLANTED not in daemon.log()
    assert target.exists()


def _disguised(target: Path) -> str:
    """A command whose tail is pushed out of sight by padding, with a look-alike word, a
    right-to-left override and a zero-width space."""
    return f"ls /tmp/hоme \u202e# txt.exe\u200b{' ' * 3000}; rm -rf {target}"


def test_padding_look_alikes_bidi_and_zero_width_are_flagged_and_the_tail_shown(
    start, target
) -> None:
    daemon = start(config=CONFIG)
    client, asked = client_answering(daemon, "deny")
    command = _disguised(target)
    with client:
        result = terminal(client, command)
    assert result["error"].startswith("BLOCKED: Command denied by user.")
    request = asked.requests[0]
    assert request["command"] == (f"ls /tmp/hоme \\u202e# txt.exe\\u200b␣×3000; rm -rf {target}")
    assert request["command_length"] == len(command)
    kinds = {w["kind"]: w["message"] for w in request["warnings"]}
    assert set(kinds) == {"bidi", "invisible", "homoglyph", "padding"}
    assert "U+202E" in kinds["bidi"] and "U+200B" in kinds["invisible"]
    assert "'hоme' reads like 'home'" in kinds["homoglyph"]
    assert "CYRILLIC SMALL LETTER O (U+043E)" in kinds["homoglyph"]
    assert "longest 3,000" in kinds["padding"]
    assert "look-alike letters from another script" in daemon.log().lower()
    assert target.exists()


def test_a_plain_command_has_no_warnings(start, target) -> None:
    daemon = start(config=CONFIG)
    client, asked = client_answering(daemon, "deny")
    with client:
        terminal(client, f"rm -rf {target}   # aligned  comment")
    assert asked.requests[0]["warnings"] == []
    assert asked.requests[0]["command"] == f"rm -rf {target}   # aligned  comment"


def test_hermesctl_shows_the_warnings_in_the_pending_list_and_at_the_prompt(start, target) -> None:
    daemon = start(config=CONFIG)
    caller, _ = client_answering(daemon, None)  # asked, never answers
    with caller:
        running = Background(terminal, caller, _disguised(target))
        pending = wait_pending(daemon)[0]
        shown = run_hermesctl(["--socket", str(daemon.socket), "approvals", "pending"])
        with daemon.client() as other:
            other.call("approvals.respond", {"id": pending["id"], "choice": "deny"})
        running.result()
    assert shown.returncode == 0, shown.stderr
    assert f"␣×3000; rm -rf {target}" in shown.stdout
    for kind in ("BIDI", "INVISIBLE", "HOMOGLYPH", "PADDING"):
        assert f"⚠️  {kind}: " in shown.stdout
    assert "\u202e" not in shown.stdout and "\u200b" not in shown.stdout

    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket)]
    t = Terminal([*argv, "tools", "call", "terminal", f"command={_disguised(target)}"], env)
    try:
        t.expect("DANGEROUS COMMAND", timeout=60)
        t.expect(r"Choice \[o/s/a/D\]: ")
        t.wait_reading()
        screen = t.text
        t.sendline("d")
        t.wait(timeout=60)
    finally:
        t.close()
    assert f"␣×3000; rm -rf {target}" in screen
    assert "HOMOGLYPH: Look-alike letters from another script: 'hоme'" in screen
    assert "BIDI: " in screen and "INVISIBLE: " in screen and "PADDING: " in screen
    assert " " * 100 not in screen and "\u202e" not in t.raw
    assert target.exists()
