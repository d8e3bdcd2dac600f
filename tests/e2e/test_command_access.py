"""Slash commands and plugin CLI commands declare who may run them (issue 29 §2).

A plugin's commands are the owner's unless the plugin registers them with ``access="any"``
(or ``"person"``); ``/cron`` is the owner's as every ``cron.*`` method is; ``/memory`` is
never a tool's process's. A member of ``socket.group`` (``nobody``) and a tool's process (a
client in another pid namespace) are refused what the declaration excludes, before the handler
runs: the handler's side effect (a file the plugin writes) never happens.
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

from hermesd.rpc.protocol import Codes
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.otheruser import talk_as
from tests.support.plugin_factory import write_plugin

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
]

BWRAP = ["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--"]  # a tool's sandbox
NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid)

PLUGIN = """\
import os
from pathlib import Path

def mark(name):
    def handler(raw):
        Path(os.environ["HERMES_HOME"], name + ".ran").write_text(raw)
        return name + " ran"
    return handler

def setup(parser):
    parser.add_argument("word", nargs="?", default="")

def handle(args):
    Path(os.environ["HERMES_HOME"], "cli.ran").write_text(args.word)
    print("cli ran")

def register(ctx):
    ctx.register_command("wipe", mark("wipe"), description="changes state: the owner's")
    ctx.register_command("peek", mark("peek"), description="reads", access="any")
    ctx.register_cli_command("purge", "changes state", setup, handle)
    ctx.register_cli_command("look", "reads", setup, handle, access="any")
"""

CLIENT = """\
import json, sys
from hermesctl.client import Client
from hermesd.rpc.protocol import RpcError
client = Client.connect(sys.argv[1], timeout=30, hello=True)
out = []
for method, params in json.loads(sys.argv[2]):
    try:
        client.call(method, params, timeout=30)
        out.append(None)
    except RpcError as exc:
        out.append(exc.code)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    home = short_tmpdir("ca-")
    write_plugin(home / "plugins", "guarded", PLUGIN)
    d = start_daemon(
        home,
        config=f"socket:\n  group: {NOGROUP.gr_name}\n",
        env={"HERMES_BUNDLED_PLUGINS": "/nonexistent"},
    )
    os.chmod(d.socket.parent, 0o755)
    (d.home / "client.py").write_text(CLIENT)
    yield d
    d.stop()


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("command.run", {"line": "/wipe all"}),
    ("command.run", {"line": "/peek"}),
    ("cli.run", {"argv": ["purge", "all"]}),
    ("cli.run", {"argv": ["look"]}),
    ("command.run", {"line": "/cron list"}),
    ("command.run", {"line": "/memory pending"}),
]


def _as_member(d: DaemonProcess) -> list[Any]:
    frames = [[0, i, m, [p]] for i, (m, p) in enumerate(CALLS)]
    out = talk_as(NOBODY.pw_uid, NOBODY.pw_gid, d.socket, frames, timeout=60)
    replies = {m[1]: m[2] for m in out["received"] if m[0] == 1}
    return [replies[i]["code"] if replies[i] else None for i in range(len(CALLS))]


def _as_tool(d: DaemonProcess) -> list[Any]:
    done = subprocess.run(
        [*BWRAP, sys.executable, str(d.home / "client.py"), str(d.socket), json.dumps(CALLS)],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr
    answers: list[Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answers


def _ran(d: DaemonProcess) -> set[str]:
    return {p.name for p in d.home.glob("*.ran")}


def test_a_member_runs_only_what_is_declared_for_anyone(daemon: DaemonProcess) -> None:
    for mark in daemon.home.glob("*.ran"):
        mark.unlink()
    denied = Codes.PERMISSION_DENIED
    assert _as_member(daemon) == [denied, None, denied, None, denied, None]
    assert _ran(daemon) == {"peek.ran", "cli.ran"}
    assert (daemon.home / "cli.ran").read_text() == ""  # look ran, purge did not


def test_a_tools_process_is_refused_the_owners_commands_and_memory(
    daemon: DaemonProcess,
) -> None:
    for mark in daemon.home.glob("*.ran"):
        mark.unlink()
    denied = Codes.PERMISSION_DENIED
    assert _as_tool(daemon) == [denied, None, denied, None, denied, denied]
    assert _ran(daemon) == {"peek.ran", "cli.ran"}


def test_the_owner_runs_them_all(daemon: DaemonProcess) -> None:
    for mark in daemon.home.glob("*.ran"):
        mark.unlink()
    with daemon.client() as owner:
        for method, params in CALLS:
            owner.call(method, params, timeout=30)
    assert _ran(daemon) == {"wipe.ran", "peek.ran", "cli.ran"}
    assert (daemon.home / "wipe.ran").read_text() == "all"


def test_a_plugin_declaring_an_unknown_access_is_not_loaded(daemon: DaemonProcess) -> None:
    write_plugin(
        daemon.home / "plugins",
        "sloppy",
        "def register(ctx):\n    ctx.register_command('x', lambda raw: 'x', access='everyone')\n",
    )
    with daemon.client() as owner:
        owner.call("plugins.reload", timeout=60)
        info = owner.call("plugins.info", {"name": "sloppy"})
    assert info["state"] != "loaded"
    assert "access must be 'owner', 'person' or 'any'" in daemon.log()
