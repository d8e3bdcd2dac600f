"""``hermesctl approvals ...`` against a real daemon, and the approval prompt people see."""

from __future__ import annotations

import io
import json
import os

from hermesctl.approval_prompt import ask, request_handler
from tests.support.approvals import Background, client_answering, terminal, wait_pending
from tests.support.daemon import run_hermesctl, short_tmpdir

CONFIG = "terminal:\n  cwd: /tmp\n"
REQUEST = {
    "id": "apr_1",
    "session_id": "s",
    "tool": "terminal",
    "command": "rm -r build",
    "pattern_key": "recursive_delete",
    "description": "recursive delete",
    "choices": ["once", "session", "always", "deny"],
    "deadline": 0,
}


def _ctl(daemon, *args: str):
    return run_hermesctl(["--socket", str(daemon.socket), *args])


def test_pending_then_approve_with_always_lists_and_revokes_the_rule(start) -> None:
    daemon = start(config=CONFIG)
    target = short_tmpdir("ap-")
    caller, _ = client_answering(daemon, None)
    with caller:
        running = Background(terminal, caller, f"rm -r {target}")
        approval = wait_pending(daemon)[0]["id"]
        shown = _ctl(daemon, "approvals", "pending")
        assert shown.returncode == 0
        assert approval in shown.stdout and f"rm -r {target}" in shown.stdout
        assert "recursive delete" in shown.stdout
        done = _ctl(daemon, "approvals", "approve", approval, "--always")
        assert done.returncode == 0 and f"approved {approval} (always)" in done.stdout
        assert running.result()["exit_code"] == 0
    listed = _ctl(daemon, "--json", "approvals", "list")
    assert [r["pattern_key"] for r in json.loads(listed.stdout)] == ["recursive_delete"]
    assert _ctl(daemon, "approvals", "revoke", "recursive_delete").returncode == 0
    assert "no always-rules" in _ctl(daemon, "approvals", "list").stdout


def test_deny_with_a_reason_reaches_the_caller(start) -> None:
    daemon = start(config=CONFIG)
    caller, _ = client_answering(daemon, None)
    with caller:
        running = Background(terminal, caller, f"rm -r {short_tmpdir('ap-')}")
        approval = wait_pending(daemon)[0]["id"]
        done = _ctl(daemon, "approvals", "deny", approval, "wrong", "folder")
        assert done.returncode == 0
        assert "Reason: wrong folder." in running.result()["error"]


def test_approving_an_unknown_id_fails_with_a_sentence(start) -> None:
    daemon = start(config=CONFIG)
    done = _ctl(daemon, "approvals", "approve", "apr_nope")
    assert done.returncode == 1
    assert "no pending approval 'apr_nope'" in done.stderr and "Traceback" not in done.stderr
    revoke = _ctl(daemon, "approvals", "revoke", "nothing")
    assert revoke.returncode == 1 and "no always-rule for 'nothing'" in revoke.stderr


def test_prompt_shows_the_reference_text_and_maps_the_answer() -> None:
    out = io.StringIO()
    assert ask(REQUEST, True, stdin=io.StringIO("s\n"), out=out) == {"choice": "session"}
    assert out.getvalue() == (
        "\n  ⚠️  DANGEROUS COMMAND: recursive delete\n"
        "      rm -r build\n\n"
        "      [o]nce  |  [s]ession  |  [a]lways  |  [d]eny\n\n"
        "      Choice [o/s/a/D]: "
        "      ✓ Allowed for this session\n"
    )


def test_prompt_defaults_to_deny_on_enter_unknown_input_and_end_of_input() -> None:
    for typed in ("\n", "yes please\n", ""):
        answer = ask(REQUEST, True, stdin=io.StringIO(typed), out=io.StringIO())
        assert answer["choice"] == "deny"


def test_without_a_terminal_the_command_line_default_answers() -> None:
    assert ask(REQUEST, False, "once") == {"choice": "once"}
    assert ask(REQUEST, False, "deny")["choice"] == "deny"
    assert ask(REQUEST, False, "always")["choice"] == "deny"  # only deny|once are defaults


def test_request_handler_answers_a_real_daemon_request(start) -> None:
    daemon = start(config=CONFIG)
    target = short_tmpdir("ap-")
    with daemon.client() as client:
        client.on_request = request_handler(False, "once")
        assert terminal(client, f"rm -r {target}")["exit_code"] == 0
    assert not os.path.exists(target)


def test_tools_call_without_a_terminal_is_denied_saying_no_one_could_be_asked(start) -> None:
    daemon = start(config=CONFIG)
    target = short_tmpdir("ap-")
    with daemon.client() as client:
        client.on_request = request_handler(interactive=False)
        result = terminal(client, f"rm -r {target}")
    assert result["error"].startswith("BLOCKED: Command not run: no one could be asked")
    assert "no terminal to ask at" in result["error"]
    assert "by user" not in result["error"]
    assert os.path.exists(target)


def test_tools_call_without_a_terminal_denies_dangerous_commands_by_default(start) -> None:
    daemon = start()
    out = run_hermesctl(
        [
            "--socket",
            str(daemon.socket),
            "tools",
            "call",
            "terminal",
            "command=rm -rf /tmp/hermes-approval-probe",
        ],
        timeout=60,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "BLOCKED: Command not run: no one could be asked" in out.stdout


def test_tools_call_approve_once_runs_an_approvable_command(start) -> None:
    daemon = start()
    probe = daemon.home / "workspace" / "probe-dir"  # the sandbox lets a tool write only there
    probe.mkdir(parents=True)
    out = run_hermesctl(
        [
            "--socket",
            str(daemon.socket),
            "tools",
            "call",
            "--approve",
            "once",
            "terminal",
            f"command=rm -rf {probe}",
        ],
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert not probe.exists()
