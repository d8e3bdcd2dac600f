"""A tool's process talking back to the daemon is never its owner or an approver (issue 18).

The hostile model runs ``hermesctl … tools call terminal --args '{"command": "rm -rf …"}'
--approve once`` from inside ``terminal``: directly, after ``setsid``, and from a double fork
(orphaned, in a new session). It calls owner-only methods (``shutdown``, ``config.reload``,
``plugins.install``, ``approvals.respond``, ``approvals.revoke``) with a small client. With
``sandbox.mode: off`` the socket is reachable and the connection is recognised by the seccomp
marker; under bubblewrap and Landlock the sandbox's seccomp filter refuses a Unix socket
altogether (issue 29), and under bubblewrap the socket is not even there. Afterwards the
victim folders still exist, no approval was answered, and the daemon serves. A peer in
another pid namespace without the marker (bubblewrap run by the test itself) is refused too,
and the same client run directly is the owner (the control). Printed (``-s``): "nested-client
approvals accepted: 0 of N".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermesd.rpc.protocol import Codes
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.hostile import hostile_turn, output_of
from tests.support.modelserver import ScriptedModelServer

MODES = ["landlock", "off", "bwrap"]
FIGURES: dict[str, list[int]] = {}

NESTED_CALL = """\
import json, sys
from hermesctl.client import Client
from hermesd.rpc.protocol import RpcError
asked = []
def answer(method, params):
    asked.append(method)
    return {"choice": "once"}
try:
    client = Client.connect(sys.argv[1], timeout=30, hello=True)
except Exception as exc:  # not there (bubblewrap hides it), or refused
    print(json.dumps({"unreachable": str(exc)}))
    sys.exit(0)
client.on_request = answer
owner = client.call("hello", {"protocol": "1.0"}).get("owner")
try:
    print(json.dumps({"result": client.call(sys.argv[2], json.loads(sys.argv[3]), timeout=30),
                      "owner": owner, "asked": asked}))
except RpcError as exc:
    print(json.dumps({"error": exc.code, "owner": owner, "asked": asked}))
"""

APPROVE = """\
{python} -m hermesctl --socket {socket} tools call terminal \\
  --args "{{\\"command\\": \\"rm -rf {workspace}/victim-$1\\"}}" --approve once
"""

APPROVAL_CASES = {
    "direct": "sh approve.sh direct",
    "setsid": "setsid -w sh approve.sh setsid",
    "double fork": (
        "( (setsid sh approve.sh fork > fork.out 2>&1; touch fork.done) & ); "
        "while [ ! -e fork.done ]; do sleep 0.1; done; cat fork.out"
    ),
}
OWNER_ONLY = {
    "shutdown": {},
    "config.reload": {},
    "plugins.install": {"source": "/nonexistent"},
    "approvals.respond": {"id": "apr_000000000000", "choice": "once"},
    "approvals.revoke": {"pattern_key": "rm -r"},
    # writes .env and config.yaml: a way to plant a key or switch the memory provider
    "memory.setup": {"provider": "evil", "values": {"API_KEY": "x"}},
}


def _config(model: ScriptedModelServer, mode: str) -> str:
    sandbox = "  mode: 'off'\n" if mode == "off" else f"  mechanism: {mode}\n"
    return (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        f"approvals:\n  timeout: 2\nsandbox:\n{sandbox}"
        "terminal:\n  env_passthrough: [PYTHONPATH]\n"
    )


@pytest.fixture(scope="module", params=MODES)
def nested(request: pytest.FixtureRequest, model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = short_tmpdir("nc-")
    daemon = start_daemon(home, config=_config(model, request.param))
    workspace = home / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "nested_call.py").write_text(NESTED_CALL)
    (workspace / "approve.sh").write_text(
        APPROVE.format(python=sys.executable, socket=daemon.socket, workspace=workspace)
    )
    yield daemon
    daemon.stop()


def _mode(d: DaemonProcess) -> str:
    sandbox = d.call("status")["sandbox"]
    return "off" if sandbox["mode"] == "off" else str(sandbox["mechanism"])


def test_nested_hermesctl_cannot_approve_its_own_command(
    nested: DaemonProcess, model: ScriptedModelServer
) -> None:
    workspace = nested.home / "workspace"
    for case in ("direct", "setsid", "fork"):
        (workspace / f"victim-{case}").mkdir(exist_ok=True)
    # the owner approves the outer commands (``sh approve.sh`` asks); only the nested client
    # could approve the nested call, which belongs to no session
    results = hostile_turn(nested, model, list(APPROVAL_CASES.values()), approve="once")
    outputs = [output_of(r) for r in results]
    log = nested.log()
    nested_ids = re.findall(r"approval (apr_\w+): terminal .* waits for an answer.*rm -rf", log)
    accepted = [
        i for i in nested_ids if re.search(rf"approval {i} answered (once|session|always)", log)
    ]
    deleted = [v for v in ("direct", "setsid", "fork") if not (workspace / f"victim-{v}").exists()]
    mode = _mode(nested)
    FIGURES[f"{mode}.approvals"] = [len(accepted), len(APPROVAL_CASES)]
    print(f"\n[{mode}] nested-client approvals accepted: {len(accepted)} of {len(APPROVAL_CASES)}")
    assert not deleted, outputs
    assert not accepted, outputs
    if mode == "off":  # the socket was reachable: the call was made and waited, unasked
        assert len(nested_ids) == len(APPROVAL_CASES), outputs
        assert all("timed out without user response" in out for out in outputs), outputs


def test_nested_client_is_refused_every_owner_only_method(
    nested: DaemonProcess, model: ScriptedModelServer
) -> None:
    commands = [
        f"{sys.executable} nested_call.py {nested.socket} {method} '{json.dumps(params)}'"
        for method, params in OWNER_ONLY.items()
    ]
    results = [output_of(r) for r in hostile_turn(nested, model, commands, approve="once")]
    mode = _mode(nested)
    accepted = []
    for method, out in zip(OWNER_ONLY, results, strict=True):
        answer = json.loads(out.strip().splitlines()[-1])
        if "unreachable" in answer:
            assert mode != "off", out
            continue
        assert answer["owner"] is False and answer["asked"] == [], out
        if answer.get("error") != Codes.PERMISSION_DENIED:
            accepted.append(method)
    FIGURES[f"{mode}.owner_only"] = [len(accepted), len(OWNER_ONLY)]
    print(f"[{mode}] owner-only calls accepted from a tool: {len(accepted)} of {len(OWNER_ONLY)}")
    assert not accepted, results
    assert nested.alive() and nested.call("ping")["pong"] is True


# Never a tool's process (Access.PERSON): memory is written "as a person", approvals answered
PERSON_ONLY = {
    "memory.write": {"target": "memory", "action": "add", "content": "forged by a tool"},
    "memory.approve": {"id": "all"},
    "command.run": {"line": "/memory approve all"},
}


def test_nested_client_cannot_write_memory_as_a_person(
    nested: DaemonProcess, model: ScriptedModelServer
) -> None:
    commands = [
        f"{sys.executable} nested_call.py {nested.socket} {method} '{json.dumps(params)}'"
        for method, params in PERSON_ONLY.items()
    ]
    results = [output_of(r) for r in hostile_turn(nested, model, commands, approve="once")]
    for out in results:
        answer = json.loads(out.strip().splitlines()[-1])
        if "unreachable" in answer:  # the sandbox refuses Unix sockets (issue 29)
            assert _mode(nested) != "off", out
            continue
        assert answer.get("error") == Codes.PERMISSION_DENIED, out
    memory = nested.call("memory.show", {"target": "memory"})
    assert "forged by a tool" not in json.dumps(memory)


def _run_client(d: DaemonProcess, prefix: list[str], method: str) -> dict[str, object]:
    script = d.home / "workspace" / "nested_call.py"
    done = subprocess.run(
        [*prefix, sys.executable, str(script), str(d.socket), method, "{}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def test_a_peer_in_another_pid_namespace_is_not_the_owner(start: object) -> None:
    home = short_tmpdir("ns-")
    d = start_daemon(home)
    try:
        (home / "workspace").mkdir(exist_ok=True)
        (home / "workspace" / "nested_call.py").write_text(NESTED_CALL)
        bwrap = ["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--"]
        refused = _run_client(d, bwrap, "config.reload")
        assert refused["owner"] is False and refused["error"] == Codes.PERMISSION_DENIED
        control = _run_client(d, [], "config.reload")
        assert control["owner"] is True and "result" in control
    finally:
        d.stop()


@pytest.fixture(scope="module", autouse=True)
def _write_figures() -> Iterator[None]:
    yield
    out = os.environ.get("HERMES_RELIABILITY_FIGURES")
    if out and FIGURES:
        Path(out).write_text(json.dumps(FIGURES, indent=1, sort_keys=True))
