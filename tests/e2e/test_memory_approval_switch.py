"""``/memory approval on|off``: the switch that stages the model's memory writes, turned from chat
(the reference's subcommand and sentences), written to config.yaml and applied at once; only
the daemon's owner may turn it. A real daemon with the scripted model.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Iterator

import pytest
import yaml

from tests.e2e.test_memory_people import STAGED, _model_adds, needs_root
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, model_config
from tests.support.otheruser import talk_as


@pytest.fixture
def daemon(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    process = start_daemon(short_tmpdir("mema-"), config=model_config(model.url))
    yield process
    process.stop()


def _run(daemon: DaemonProcess, line: str) -> str:
    with daemon.client() as c:
        return str(c.call("command.run", {"line": line})["output"])


def test_approval_without_a_value_shows_the_switch(daemon: DaemonProcess) -> None:
    assert _run(daemon, "/memory approval") == (
        "memory.write_approval = off\nSet with: /memory approval <on|off>"
    )


def test_approval_on_stages_the_next_write_and_is_kept_in_config(
    daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    assert _run(daemon, "/memory approval on") == "memory.write_approval set to 'on'."
    config = yaml.safe_load((daemon.home / "config.yaml").read_text())
    assert config["memory"]["write_approval"] is True
    with daemon.client() as c:
        _, result = _model_adds(model, c, "User likes tea")
    assert result["staged"] is True and result["message"] == STAGED
    assert _run(daemon, "/memory approval off") == "memory.write_approval set to 'off'."
    with daemon.client() as c:
        _, result = _model_adds(model, c, "User likes coffee")
    assert result["success"] is True and "staged" not in result
    assert "model:" in (daemon.home / "config.yaml").read_text()  # the rest kept as written


@pytest.mark.parametrize(
    ("line", "answer"),
    [
        ("/memory approval maybe", "Invalid value 'maybe'. Use: on or off."),
        ("/memory approval ON; rm -rf /", "Invalid value 'on;'. Use: on or off."),
        (
            "/memory frobnicate",
            "Unknown /memory subcommand. "
            "Use: pending, approve <id>, reject <id>, approval <on|off>.",
        ),
    ],
)
def test_bad_approval_input_changes_nothing(daemon: DaemonProcess, line: str, answer: str) -> None:
    before = (daemon.home / "config.yaml").read_text()
    assert _run(daemon, line) == answer
    assert (daemon.home / "config.yaml").read_text() == before


@needs_root
def test_an_approver_who_is_not_the_owner_may_not_turn_the_switch(
    model: ScriptedModelServer,
) -> None:
    nobody = pwd.getpwnam("nobody")
    group = grp.getgrgid(nobody.pw_gid).gr_name
    config = (
        model_config(model.url)
        + f"socket:\n  group: {group}\napprovals:\n  approvers: [{nobody.pw_uid}]\n"
    )
    daemon = start_daemon(short_tmpdir("memo-"), config=config)
    try:
        os.chmod(daemon.socket.parent, 0o755)
        out = talk_as(
            nobody.pw_uid,
            nobody.pw_gid,
            daemon.socket,
            [[0, 1, "command.run", [{"line": "/memory approval on"}]]],
        )
        [answer] = [m for m in out["received"] if m[0] == 1]
        assert answer[3]["output"].startswith("Only the daemon's owner can change")
        assert "write_approval" not in (daemon.home / "config.yaml").read_text()
    finally:
        daemon.stop()
