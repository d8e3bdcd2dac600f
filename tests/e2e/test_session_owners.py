"""Sessions have owners: a member of ``socket.group`` sees and touches only its own.

One real hermesd per module with ``socket.group`` set; the daemon's owner has a session with a
stored conversation; another uid (``nobody``, a member of the group) talks to the daemon through
``tests.support.otheruser``. Every attempt on the owner's session answers ``NotFound`` (another
user's session looks like a missing one) and leaves it as it was.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
from collections.abc import Iterator
from typing import Any

import pytest

from hermesd.rpc.protocol import Codes
from tests.support.approvals import Background, client_answering, terminal, wait_pending
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, reply
from tests.support.otheruser import talk_as

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")

NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid)
SECRET_WORD = "zanzibarplan"


@pytest.fixture(scope="module")
def shared(model: ScriptedModelServer) -> Iterator[tuple[DaemonProcess, str]]:
    """(daemon, the owner's session id); the session holds a message naming SECRET_WORD."""
    daemon = start_daemon(
        config=f"socket:\n  group: {NOGROUP.gr_name}\n"
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        "terminal:\n  cwd: /tmp\napprovals:\n  timeout: 20\n"
    )
    os.chmod(daemon.socket.parent, 0o755)
    model.push(reply("Noted."))
    with daemon.client() as owner:
        sid = owner.call("session.create", {"title": "owner's plans"})["id"]
        owner.call(
            "session.send",
            {"session_id": sid, "message": f"the {SECRET_WORD} is on", "wait": True},
            timeout=30,
        )
    yield daemon, sid
    daemon.stop()


def as_member(daemon: DaemonProcess, *calls: tuple[str, dict[str, Any]], timeout: float = 5.0):
    """Run ``calls`` as ``nobody``; {msgid: (error, result)} plus "_other": notifications and
    daemon requests the member received."""
    frames = [
        [0, i, method, [params] if params else []] for i, (method, params) in enumerate(calls)
    ]
    out = talk_as(NOBODY.pw_uid, NOBODY.pw_gid, daemon.socket, frames, timeout=timeout)
    assert "received" in out, out
    replies: dict[Any, Any] = {m[1]: (m[2], m[3]) for m in out["received"] if m[0] == 1}
    replies["_other"] = [m for m in out["received"] if m[0] != 1]
    return replies


ATTEMPTS = {
    "session.get": {},
    "session.history": {},
    "session.attach": {},
    "session.send": {"message": "hello"},
    "session.rename": {"title": "mine now"},
    "session.fork": {},
    "session.cancel": {},
    "session.delete": {},
    "session.reset": {},
    "session.search": {"query": SECRET_WORD},
}


@pytest.mark.parametrize("method", sorted(ATTEMPTS))
def test_member_cannot_use_the_owners_session(shared, method: str) -> None:
    daemon, sid = shared
    replies = as_member(daemon, (method, {"session_id": sid, **ATTEMPTS[method]}))
    error, result = replies[0]
    assert error is not None and error["code"] == Codes.NOT_FOUND, (error, result)
    assert sid in error["message"]
    with daemon.client() as owner:
        session = owner.call("session.get", {"session_id": sid})
    assert session["title"] == "owner's plans"
    assert session["attached"] == 0 and session["message_count"] == 2


def test_member_lists_and_searches_only_its_own_sessions(shared) -> None:
    daemon, owner_sid = shared
    replies = as_member(
        daemon,
        ("session.create", {"title": f"member {SECRET_WORD} notes"}),
        ("session.list", {}),
        ("session.search", {"query": SECRET_WORD}),
    )
    created = replies[0][1]
    listed = [s["id"] for s in replies[1][1]["sessions"]]
    assert listed == [created["id"]] and created["owner_uid"] == NOBODY.pw_uid
    assert replies[2][1]["hits"] == []  # the member's session has no messages yet
    with daemon.client() as owner:
        every = [s["id"] for s in owner.call("session.list")["sessions"]]
        hits = owner.call("session.search", {"query": SECRET_WORD})["hits"]
    assert {owner_sid, created["id"]} <= set(every)
    assert [h["session_id"] for h in hits] == [owner_sid]


def test_session_search_tool_called_by_a_member_reads_only_its_sessions(shared) -> None:
    daemon, owner_sid = shared
    call = {"name": "session_search", "args": {"query": SECRET_WORD}}
    replies = as_member(daemon, ("tools.call", call))
    assert json.loads(replies[0][1]["result"])["results"] == []
    with daemon.client() as owner:
        found = json.loads(owner.call("tools.call", call)["result"])["results"]
    assert [r["session_id"] for r in found] == [owner_sid]


def test_session_search_fails_closed_when_the_sessions_owner_is_unknown(shared) -> None:
    daemon, owner_sid = shared
    call = {"name": "session_search", "args": {"query": SECRET_WORD}}
    with daemon.client() as owner:
        unknown = owner.call("tools.call", {**call, "session_id": "no-such-session"})
        known = owner.call("tools.call", {**call, "session_id": owner_sid})
    assert json.loads(unknown["result"])["results"] == []
    assert [r["session_id"] for r in json.loads(known["result"])["results"]] == [owner_sid]


def test_member_cannot_run_tools_or_commands_in_the_owners_session(shared) -> None:
    daemon, sid = shared
    replies = as_member(
        daemon,
        ("tools.call", {"name": "terminal", "args": {"command": "true"}, "session_id": sid}),
        ("command.run", {"line": "/title stolen", "session_id": sid}),
        ("approvals.pending", {"session_id": sid}),
    )
    assert replies[0][0]["code"] == Codes.NOT_FOUND
    assert replies[1][0]["code"] == Codes.NOT_FOUND
    assert replies[2][1] == {"pending": []}


def test_member_sessions_command_lists_only_its_own(shared) -> None:
    daemon, owner_sid = shared
    replies = as_member(daemon, ("command.run", {"line": "/sessions"}))
    assert owner_sid not in replies[0][1]["output"]


def test_reload_plugins_command_is_owner_only(shared) -> None:
    daemon, _ = shared
    replies = as_member(
        daemon, ("command.run", {"line": "/reload-plugins"}), ("plugins.reload", {})
    )
    assert replies[0][0]["code"] == Codes.PERMISSION_DENIED
    assert "owner" in replies[0][0]["message"]
    assert replies[1][0]["code"] == Codes.PERMISSION_DENIED
    assert "may not run /reload-plugins (owner only)" in daemon.log()
    with daemon.client() as owner:
        assert owner.call("command.run", {"line": "/reload-plugins"})["ok"]


def test_choosing_a_model_is_owner_only(shared) -> None:
    daemon, _ = shared
    replies = as_member(daemon, ("session.create", {"title": "mine"}))
    mine = replies[0][1]["id"]
    replies = as_member(
        daemon,
        ("command.run", {"line": "/model expensive-model", "session_id": mine}),
        ("session.create", {"model": "expensive-model"}),
        ("command.run", {"line": "/model", "session_id": mine}),
    )
    assert replies[0][0]["code"] == Codes.PERMISSION_DENIED
    assert replies[1][0]["code"] == Codes.PERMISSION_DENIED
    assert replies[2][1]["output"] == "Model: scripted-model"


def test_member_tools_call_asks_an_approver_and_never_the_member(shared) -> None:
    daemon, _ = shared
    target = short_tmpdir("own-")
    call = {"name": "terminal", "args": {"command": f"rm -r {target}"}}
    running = Background(as_member, daemon, ("tools.call", call), timeout=25)
    pending = wait_pending(daemon)
    assert pending[0]["requested_by_uid"] == NOBODY.pw_uid
    assert target.exists()
    with daemon.client() as owner:
        owner.call("approvals.respond", {"id": pending[0]["id"], "choice": "deny"})
    replies = running.result()
    assert "denied by user" in json.loads(replies[0][1]["result"])["error"]
    assert replies["_other"] == []  # no approval.request was sent to the member
    assert target.exists()


def test_member_harmless_tools_call_runs_as_a_models_would(shared) -> None:
    daemon, _ = shared
    replies = as_member(
        daemon, ("tools.call", {"name": "terminal", "args": {"command": "echo hi"}})
    )
    assert json.loads(replies[0][1]["result"])["output"] == "hi\n"


def test_owners_session_answer_does_not_cover_a_member_in_the_same_session(shared) -> None:
    daemon, _ = shared
    mine = as_member(daemon, ("session.create", {}))[0][1]["id"]
    first, second = short_tmpdir("own-"), short_tmpdir("own-")
    owner, asked = client_answering(daemon, "session")
    with owner:  # the owner may use the member's session; it answers "session" for itself
        assert "error" not in terminal(owner, f"rm -r {first}", mine)
    assert not first.exists() and len(asked.requests) == 1
    call = {"name": "terminal", "args": {"command": f"rm -r {second}"}, "session_id": mine}
    running = Background(as_member, daemon, ("tools.call", call), timeout=25)
    pending = wait_pending(daemon)  # the member's own call is asked again
    assert pending[0]["session_id"] == mine and second.exists()
    with daemon.client() as approver:
        approver.call("approvals.respond", {"id": pending[0]["id"], "choice": "deny"})
    assert "denied by user" in json.loads(running.result()[0][1]["result"])["error"]
    assert second.exists()


def test_member_cannot_reuse_the_owners_session_answer_by_passing_its_session_id(shared) -> None:
    daemon, sid = shared
    first, second = short_tmpdir("own-"), short_tmpdir("own-")
    owner, asked = client_answering(daemon, "session")
    with owner:
        assert "error" not in terminal(owner, f"rm -r {first}", sid)
        assert "error" not in terminal(owner, f"rm -r {short_tmpdir('own-')}", sid)
    assert len(asked.requests) == 1  # the owner's answer covers the owner's next call
    call = {"name": "terminal", "args": {"command": f"rm -r {second}"}, "session_id": sid}
    replies = as_member(daemon, ("tools.call", call))
    assert replies[0][0]["code"] == Codes.NOT_FOUND
    assert second.exists()


@pytest.mark.parametrize("method", ["session.get", "session.history", "session.attach"])
def test_a_prefix_of_the_owners_session_id_is_not_found_for_a_member(shared, method: str) -> None:
    """Id prefixes resolve among the peer's own sessions only: no candidates are named."""
    daemon, sid = shared
    prefix = sid[:-2]  # ids start with a timestamp: only the random tail tells them apart
    replies = as_member(daemon, (method, {"session_id": prefix}))
    error, result = replies[0]
    assert error is not None and error["code"] == Codes.NOT_FOUND, (error, result)
    assert sid not in json.dumps(error)
    with daemon.client() as owner:
        assert owner.call(method, {"session_id": prefix})  # the owner's prefix resolves
