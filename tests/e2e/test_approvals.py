"""Approvals owned by the daemon, end to end: scopes, timeout, rules, races, re-attach, restart.

Each test drives a real hermesd over its socket; dangerous commands are run through
``tools.call`` (the same pipeline as a model's call) by clients that answer
``approval.request`` in a scripted way.
"""

from __future__ import annotations

import os
import pwd
import time
from pathlib import Path

import pytest

from hermesctl.client import Client
from hermesd.rpc.protocol import Codes, RpcError
from tests.support.approvals import (
    Answering,
    Background,
    client_answering,
    terminal,
    tool,
    wait_pending,
)
from tests.support.daemon import short_tmpdir, start_daemon
from tests.support.waiting import wait_until

CONFIG = "terminal:\n  cwd: /tmp\n"


@pytest.fixture
def work() -> Path:
    """A scratch directory for commands to delete."""
    return short_tmpdir("ap-")


def _tree(work: Path, name: str = "doomed") -> Path:
    target = work / name
    (target / "sub").mkdir(parents=True, exist_ok=True)
    return target


def test_harmless_command_runs_without_asking(start) -> None:
    daemon = start(config=CONFIG)
    client, asked = client_answering(daemon, "deny")
    with client:
        assert terminal(client, "echo hello")["output"] == "hello\n"
    assert asked.requests == []


def test_once_runs_the_command_and_asks_again_next_time(start, work: Path) -> None:
    daemon = start(config=CONFIG)
    client, asked = client_answering(daemon, "once")
    with client:
        target = _tree(work)
        assert terminal(client, f"rm -r {target}")["exit_code"] == 0
        assert not target.exists()
        _tree(work)
        terminal(client, f"rm -r {target}")
    assert len(asked.requests) == 2
    request = asked.requests[0]
    assert request["method"] == "approval.request"
    assert request["pattern_key"] == "recursive_delete"
    assert request["description"] == "recursive delete"
    assert request["command"] == f"rm -r {target}"
    assert request["choices"] == ["once", "session", "always", "deny"]
    assert request["deadline"] > time.time()


def test_deny_blocks_with_the_reference_text_and_the_reason(start, work: Path) -> None:
    daemon = start(config=CONFIG)
    client, _ = client_answering(daemon, "deny", "keep my files")
    target = _tree(work)
    with client:
        result = terminal(client, f"rm -r {target}")
    assert result["error"].startswith("BLOCKED: Command denied by user.")
    assert "keep my files" in result["error"]
    assert "The user has NOT consented to this action." in result["error"]
    assert target.exists()


def test_session_answer_is_remembered_for_that_session_only(start, work: Path) -> None:
    daemon = start(config=CONFIG)
    client, asked = client_answering(daemon, "session")
    with client:
        first = client.call("session.create")["id"]
        second = client.call("session.create")["id"]
        terminal(client, f"rm -r {_tree(work)}", first)
        terminal(client, f"rm -r {_tree(work)}", first)
        assert len(asked.requests) == 1
        terminal(client, f"rm -r {_tree(work)}", second)
        assert len(asked.requests) == 2
        fresh = client.call("session.reset", {"session_id": first})["id"]
        terminal(client, f"rm -r {_tree(work)}", fresh)
        assert len(asked.requests) == 3


def test_always_rule_is_persisted_listed_and_survives_a_restart(work: Path) -> None:
    home = short_tmpdir()
    daemon = start_daemon(home, config=CONFIG)
    try:
        client, asked = client_answering(daemon, "always")
        with client:
            terminal(client, f"rm -r {_tree(work)}")
            rules = client.call("approvals.list")["rules"]
        assert [r["pattern_key"] for r in rules] == ["recursive_delete"]
        me = pwd.getpwuid(os.geteuid()).pw_name
        assert rules[0]["decided_by"] == f"{me} (uid {os.geteuid()})"
        assert rules[0]["description"] == "recursive delete"
        assert rules[0]["created_at"] <= time.time()
    finally:
        daemon.stop()
    daemon = start_daemon(home, config=CONFIG)
    try:
        client, asked = client_answering(daemon, "deny")
        with client:
            target = _tree(work)
            assert terminal(client, f"rm -r {target}")["exit_code"] == 0
            assert asked.requests == []
            assert client.call("approvals.revoke", {"pattern_key": "recursive_delete"}) == {
                "revoked": True,
                "pattern_key": "recursive_delete",
            }
            assert client.call("approvals.list")["rules"] == []
            assert "error" in terminal(client, f"rm -r {_tree(work)}")
            assert len(asked.requests) == 1
    finally:
        daemon.stop()


def test_revoking_an_unknown_rule_is_not_found(start) -> None:
    daemon = start(config=CONFIG)
    with daemon.client() as client:
        with pytest.raises(RpcError) as err:
            client.call("approvals.revoke", {"pattern_key": "no_such_rule"})
        assert err.value.code == Codes.NOT_FOUND
        assert client.call("ping")["pong"]


def test_unanswered_approval_times_out_as_a_denial(start, work: Path) -> None:
    daemon = start(config=CONFIG + "approvals:\n  timeout: 0.5\n")
    client, asked = client_answering(daemon, None)  # answers with an error: not an answer
    target = _tree(work)
    with client:
        started = time.monotonic()
        result = terminal(client, f"rm -r {target}")
        waited = time.monotonic() - started
        assert client.call("approvals.pending")["pending"] == []
    assert result["error"].startswith(
        "BLOCKED: Command timed out without user response. "
        "The user has NOT consented to this action."
    )
    assert 0.4 < waited < 5
    assert len(asked.requests) == 1
    assert target.exists()


def test_deny_glob_beats_an_always_rule(start, work: Path) -> None:
    daemon = start(config=CONFIG + "approvals:\n  deny: ['*keepme*']\n")
    client, asked = client_answering(daemon, "always")
    with client:
        terminal(client, f"rm -r {_tree(work)}")
        kept = _tree(work, "keepme")
        result = terminal(client, f"rm -r {kept}")
    assert "approvals.deny rule '*keepme*'" in result["error"]
    assert kept.exists()
    assert len(asked.requests) == 1


def test_command_allowlist_keys_never_prompt(start, work: Path) -> None:
    daemon = start(config=CONFIG + "command_allowlist: [recursive_delete]\n")
    client, asked = client_answering(daemon, "deny")
    with client:
        assert terminal(client, f"rm -r {_tree(work)}")["exit_code"] == 0
    assert asked.requests == []


@pytest.mark.parametrize(
    "command", ["rm -rf /", ":(){ :|:& };:", "chmod -R 777 /", "dd if=/dev/zero of=/dev/sda"]
)
def test_floor_is_refused_even_with_mode_off_and_an_approving_client(start, command) -> None:
    daemon = start(config=CONFIG + "approvals:\n  mode: 'off'\n")
    client, asked = client_answering(daemon, "always")
    with client:
        result = terminal(client, command)
    assert "hard floor" in result["error"]
    assert asked.requests == []


def test_mode_off_runs_dangerous_commands_without_asking(start, work: Path) -> None:
    daemon = start(config=CONFIG + "approvals:\n  mode: 'off'\n")
    client, asked = client_answering(daemon, "deny")
    target = _tree(work)
    with client:
        assert terminal(client, f"rm -r {target}")["exit_code"] == 0
    assert asked.requests == [] and not target.exists()


def test_required_tools_ask_even_in_mode_off(start, work: Path) -> None:
    daemon = start(config=CONFIG + "approvals:\n  mode: 'off'\n  require: [read_file]\n")
    (work / "note.txt").write_text("hello\n")
    client, asked = client_answering(daemon, "deny")
    with client:
        result = tool(client, "read_file", {"path": str(work / "note.txt")})
    assert result["error"].startswith("BLOCKED: Command denied by user.")
    assert asked.requests[0]["pattern_key"] == "tool:read_file"
    assert asked.requests[0]["tool"] == "read_file"


def _until_asked(client: Client, asked: Answering, timeout: float = 15) -> None:
    """Read ``client``'s messages until it has been asked (and has answered)."""

    def answered() -> bool:
        client.pump(0.1)
        return bool(asked.requests)

    wait_until(answered, timeout, "the approval request to reach this client")


def test_two_clients_race_first_answer_wins_and_the_other_is_told(start, work: Path) -> None:
    daemon = start(config=CONFIG)
    fast, fast_asked = client_answering(daemon, "once")
    slow, slow_asked = client_answering(daemon, "deny")
    caller, _ = client_answering(daemon, None)
    with fast, slow, caller:
        sid = caller.call("session.create", {"attach": False})["id"]
        fast.call("session.attach", {"session_id": sid})
        slow.call("session.attach", {"session_id": sid})
        target = _tree(work)
        running = Background(terminal, caller, f"rm -r {target}", sid)
        wait_pending(daemon)
        _until_asked(fast, fast_asked)  # reads and answers the request
        assert running.result()["exit_code"] == 0
        note = slow.next_notification(timeout=5)  # answers too late, then hears who won
        assert note is not None and note.method == "approval.resolved"
        assert note.params[0]["choice"] == "once"
        assert note.params[0]["by_uid"] == os.geteuid()
        assert note.params[0]["id"] == fast_asked.requests[0]["id"]
        assert fast.next_notification(timeout=0.3) is None  # the winner gets no resolved
    assert not target.exists()
    assert len(slow_asked.requests) == 1


def test_pending_approval_survives_a_disconnect_and_is_asked_again_on_attach(
    start, work: Path
) -> None:
    daemon = start(config=CONFIG)
    caller, _ = client_answering(daemon, None)
    with caller:
        sid = caller.call("session.create", {"attach": False})["id"]
        leaving, leaving_asked = client_answering(daemon, "once")
        leaving.call("session.attach", {"session_id": sid})
        target = _tree(work)
        running = Background(terminal, caller, f"rm -r {target}", sid)
        pending = wait_pending(daemon)
        leaving.close()  # never read the request: it answers nothing
        time.sleep(0.2)
        assert [p["id"] for p in wait_pending(daemon)] == [pending[0]["id"]]
        assert not running.done() and target.exists()
        returning, returning_asked = client_answering(daemon, "once")
        with returning:
            returning.call("session.attach", {"session_id": sid})
            _until_asked(returning, returning_asked)
            assert running.result()["exit_code"] == 0
        assert returning_asked.requests[0]["id"] == pending[0]["id"]
    assert leaving_asked.requests == [] and not target.exists()


def test_approvals_respond_answers_a_pending_call_from_another_client(start, work: Path) -> None:
    daemon = start(config=CONFIG)
    caller, _ = client_answering(daemon, None)
    target = _tree(work)
    with caller, daemon.client() as other:
        running = Background(terminal, caller, f"rm -r {target}")
        pending = wait_pending(daemon)
        assert pending[0]["session_id"] == "" and pending[0]["tool"] == "terminal"
        assert other.call("approvals.respond", {"id": pending[0]["id"], "choice": "once"}) == {
            "id": pending[0]["id"],
            "choice": "once",
        }
        assert running.result()["exit_code"] == 0
        with pytest.raises(RpcError) as err:
            other.call("approvals.respond", {"id": pending[0]["id"], "choice": "once"})
        assert err.value.code == Codes.NOT_FOUND
    assert not target.exists()


def test_approvals_respond_rejects_a_bad_choice_and_keeps_serving(start, work: Path) -> None:
    daemon = start(config=CONFIG)
    caller, _ = client_answering(daemon, None)
    with caller, daemon.client() as other:
        running = Background(terminal, caller, f"rm -r {_tree(work)}")
        pending = wait_pending(daemon)
        with pytest.raises(RpcError) as err:
            other.call("approvals.respond", {"id": pending[0]["id"], "choice": "maybe"})
        assert err.value.code == Codes.INVALID_PARAMS
        with pytest.raises(RpcError) as err:
            other.call("approvals.respond", {"id": pending[0]["id"]})
        assert err.value.code == Codes.INVALID_PARAMS
        other.call("approvals.respond", {"id": pending[0]["id"], "choice": "d", "reason": "no"})
        assert "Reason: no." in running.result()["error"]


def test_invalid_client_answer_is_ignored_and_the_call_keeps_waiting(start, work: Path) -> None:
    daemon = start(config=CONFIG)
    caller, _ = client_answering(daemon, "perhaps")
    with caller, daemon.client() as other:
        running = Background(terminal, caller, f"rm -r {_tree(work)}")
        pending = wait_pending(daemon)
        time.sleep(0.2)
        assert not running.done()
        other.call("approvals.respond", {"id": pending[0]["id"], "choice": "deny"})
        assert running.result()["error"].startswith("BLOCKED: Command denied by user.")


def test_slash_approve_and_deny_answer_the_sessions_oldest_approval(start, work: Path) -> None:
    daemon = start(config=CONFIG)
    caller, _ = client_answering(daemon, None)
    with caller, daemon.client() as chat:
        sid = caller.call("session.create", {"attach": False})["id"]
        assert (
            chat.call("command.run", {"line": "/approve", "session_id": sid})["output"]
            == "No pending approvals."
        )
        target = _tree(work)
        running = Background(terminal, caller, f"rm -r {target}", sid)
        wait_pending(daemon)
        out = chat.call("command.run", {"line": "/approve session", "session_id": sid})
        assert out["output"] == f"✓ Approved for this session: rm -r {target}"
        assert running.result()["exit_code"] == 0
        terminal(caller, f"rm -r {_tree(work)}", sid)  # remembered: no prompt, no wait
        running = Background(terminal, caller, f"rm -r {_tree(work)}")  # no session
        wait_pending(daemon)
        out = chat.call("command.run", {"line": "/deny not now"})
        assert out["output"].startswith("✗ Denied")
        assert "Reason: not now." in running.result()["error"]


def test_config_reload_applies_new_approval_settings(start, work: Path) -> None:
    daemon = start(config=CONFIG)
    client, asked = client_answering(daemon, "once")
    with client:
        assert terminal(client, f"rm -r {_tree(work)}")["exit_code"] == 0
        (daemon.home / "config.yaml").write_text(CONFIG + "approvals:\n  deny: ['rm -r *']\n")
        assert client.call("config.reload")["reloaded"] is True
        result = terminal(client, f"rm -r {_tree(work)}")
    assert "approvals.deny rule 'rm -r *'" in result["error"]
    assert len(asked.requests) == 1


@pytest.mark.parametrize(
    "command",
    [
        "true\nrm -rf ~",
        '"r"m -rf "$HOME"',
        "sh -c 'cd && rm -rf *'",
        "echo ~ | xargs rm -rf",
        "X=rm; $X -rf ~/",
        "env -i /bin/rm -rf ${HOME}/*",
        "echo " + "x" * 600 + "\nrm -rf ~",  # long: judged on a worker thread
    ],
    ids=["second-line", "quoted", "sh-c-cd", "xargs", "variable", "env-glob", "long"],
)
def test_floor_holds_however_the_command_is_spelled(start, command) -> None:
    # HOME is a scratch directory: were the floor to fail, only it would go
    home = short_tmpdir("fh-")
    (home / "keep").write_text("still here\n")
    daemon = start(config=CONFIG + "approvals:\n  mode: 'off'\n", env={"HOME": str(home)})
    client, asked = client_answering(daemon, "always")
    with client:
        result = terminal(client, command)
    assert "hard floor" in result["error"]
    assert asked.requests == [] and (home / "keep").exists()


def test_deny_globs_meet_each_command_unquoted_and_unwrapped(start, work: Path) -> None:
    daemon = start(config=CONFIG + "approvals:\n  mode: 'off'\n  deny: ['rm -rf *']\n")
    target = _tree(work)
    client, _ = client_answering(daemon, "once")
    with client:
        spelled = terminal(client, f'true\n"r"m -rf {target}')
        wrapped = terminal(client, f"nice -n 5 rm -rf {target}")
    assert "approvals.deny rule 'rm -rf *'" in spelled["error"]
    assert "approvals.deny rule 'rm -rf *'" in wrapped["error"]
    assert target.exists()
