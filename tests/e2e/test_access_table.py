"""Every method × every kind of caller → the outcome its declaration in METHODS names.

Generated from ``hermesd.rpc.protocol.METHODS``: each method is called with the parameters its
declaration requires (and, for a session method, a session of the daemon's owner) by

- the daemon's **owner** (this test's uid, from a process without a controlling terminal),
- a **member** of ``socket.group`` (``nobody``, `tests.support.otheruser`),
- a **tool's process** (a client in another pid namespace, as a bubblewrap sandbox runs it:
  `hermesd.rpc.peer_trust` counts it as a tool's, like ``test_nested_clients``).

What is checked is the access layer's verdict: ``PermissionDenied`` carrying the declared
``access`` for a caller the declaration excludes, ``NotFound`` for the owner's session asked by
someone else, neither for a caller it admits (a handler may still refuse for its own reasons,
e.g. a member that is not an approver). A call that widens what tools may do is refused to the
owner too here, for want of a terminal to confirm on (docs/protocol.md, "Access").
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from hermesd.rpc.protocol import METHODS, Access, Codes, MethodSpec
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.otheruser import talk_as

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
]

NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid)
NEW_SESSION = "$NEW_SESSION"  # the owner's script puts a fresh session of its own here
SAMPLE = {"str": "x", "int": 1, "number": 1, "bool": False, "map": {}, "array": [], "any": "x"}
# a value the handler accepts far enough to answer something other than a missing parameter
SPECIFIC: dict[str, dict[str, Any]] = {
    "session.send": {"message": "hi"},
    "command.run": {"line": "/help"},
    "cli.run": {"argv": ["no-such-command"]},
    "tools.call": {"name": "no_such_tool"},
}

CLIENT = """\
import json, sys
from hermesctl.client import Client
from hermesd.rpc.protocol import RpcError
client = Client.connect(sys.argv[1], timeout=30, hello=True)
out = []
for method, params in json.load(open(sys.argv[2])):
    for key, value in params.items():
        if value == "$NEW_SESSION":
            params[key] = client.call("session.create", {"attach": False})["id"]
    try:
        client.call(method, params, timeout=30)
        out.append(None)
    except RpcError as exc:
        out.append({"code": exc.code, "message": exc.message, "data": exc.data})
print(json.dumps(out))
"""


def _params(spec: MethodSpec, sid: str) -> dict[str, Any]:
    params = {p.name: SAMPLE[p.type] for p in spec.params if p.required}
    params.update(SPECIFIC.get(spec.name, {}))
    if spec.access == Access.SESSION:
        params[spec.session_param] = sid
    return params


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    d = start_daemon(
        short_tmpdir("acc-"),
        config=f"socket:\n  group: {NOGROUP.gr_name}\n",
        env={"HERMESD_CONFIRM_WIDENING": "on"},  # the rule as it ships
    )
    os.chmod(d.socket.parent, 0o755)
    (d.home / "client.py").write_text(CLIENT)
    yield d
    d.stop()


def _run_script(d: DaemonProcess, prefix: list[str], calls: list[tuple[str, Any]]) -> list[Any]:
    (d.home / "calls.json").write_text(json.dumps(calls))
    done = subprocess.run(
        [
            *prefix,
            sys.executable,
            str(d.home / "client.py"),
            str(d.socket),
            str(d.home / "calls.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    answers: list[Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answers


def _as_member(d: DaemonProcess, calls: list[tuple[str, Any]]) -> list[Any]:
    frames = [[0, i, m, [p] if p else []] for i, (m, p) in enumerate(calls)]
    out = talk_as(NOBODY.pw_uid, NOBODY.pw_gid, d.socket, frames, timeout=60)
    assert "received" in out, out
    replies = {m[1]: m[2] for m in out["received"] if m[0] == 1}
    assert len(replies) == len(calls), out
    return [replies[i] for i in range(len(calls))]


def _edge_denied(spec: MethodSpec, error: Any) -> bool:
    """The access layer refused the caller (not a handler's own rule)."""
    return (
        isinstance(error, dict)
        and error.get("code") == Codes.PERMISSION_DENIED
        and (error.get("data") or {}).get("access") == spec.access
    )


def _session_hidden(error: Any, sid: str) -> bool:
    """Another user's session answered like one that does not exist."""
    return (
        isinstance(error, dict)
        and error.get("code") == Codes.NOT_FOUND
        and (error.get("data") or {}).get("session_id") == sid
    )


def _own_session_hidden(error: Any) -> bool:
    """The owner was told its own fresh session does not exist."""
    return (
        isinstance(error, dict)
        and error.get("code") == Codes.NOT_FOUND
        and bool((error.get("data") or {}).get("session_id"))
    )


def _expected(spec: MethodSpec, trust: str) -> str:
    """The declared outcome for a caller: "allowed", "denied" or "hidden"."""
    if spec.access == Access.OWNER:
        return "allowed" if trust == "owner" else "denied"
    if spec.access == Access.PERSON:
        return "denied" if trust == "tool" else "allowed"
    if spec.access == Access.SESSION:
        return "allowed" if trust == "owner" else "hidden"
    return "allowed"


def _outcome(spec: MethodSpec, error: Any, sid: str) -> str:
    if _edge_denied(spec, error):
        return "denied"
    if _session_hidden(error, sid):
        return "hidden"
    return "allowed"


def test_every_method_answers_each_kind_of_caller_as_declared(daemon: DaemonProcess) -> None:
    with daemon.client() as owner:
        sid = owner.call("session.create", {"title": "the owner's", "attach": False})["id"]
    names = [n for n in METHODS if n != "shutdown"]  # the owner's shutdown ends the test
    others = [(n, _params(METHODS[n], sid)) for n in [*names, "shutdown"]]
    by_member = _as_member(daemon, others)
    by_tool = _run_script(daemon, ["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--"], others)
    mine = [(n, _params(METHODS[n], NEW_SESSION)) for n in names]
    by_owner = _run_script(daemon, ["setsid", "-w"], mine)

    wrong = []
    for (name, _), member, tool in zip(others, by_member, by_tool, strict=True):
        spec = METHODS[name]
        for trust, error in (("member", member), ("tool", tool)):
            if _outcome(spec, error, sid) != _expected(spec, trust):
                wrong.append((name, trust, _expected(spec, trust), error))
    for (name, _), error in zip(mine, by_owner, strict=True):
        spec = METHODS[name]
        if spec.widens is not None and spec.widens(_params(spec, sid)):
            # no terminal to confirm on: refused, saying what it would widen
            if not (error and error["code"] == Codes.PERMISSION_DENIED and error["data"]["widens"]):
                wrong.append((name, "owner", "needs a terminal", error))
        elif _edge_denied(spec, error) or _own_session_hidden(error):
            wrong.append((name, "owner", "allowed", error))
    print(f"\n{len(METHODS)} methods x 3 callers checked; {len(wrong)} wrong")
    assert wrong == []
    with daemon.client() as owner:
        assert owner.call("shutdown")["stopping"] is True


def test_the_table_declares_who_may_call_every_method() -> None:
    assert {spec.access for spec in METHODS.values()} <= set(Access.ALL)
    assert all(
        spec.access == Access.OWNER for name, spec in METHODS.items() if spec.widens is not None
    ), "a call that widens what tools may do is the owner's"
