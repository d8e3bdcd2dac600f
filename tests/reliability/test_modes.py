"""Nothing the daemon writes is readable by other users, whatever its umask.

The daemon runs with umask 000 (the most permissive a careless service manager could give);
after a chat turn (state.db with its -wal and -shm files) and ``plugins.set_env`` (.env), every
file and directory it created in HERMES_HOME, and its socket, are private to the owner. hermesd
writes its log to stderr (the journal under systemd), never to a file in HERMES_HOME; the walk
below would catch one.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.daemon import DaemonProcess, short_tmpdir
from tests.support.modelserver import ScriptedModelServer
from tests.support.reliability import model_config, turn_rules

UMASK_000 = ["sh", "-c", 'umask 000; exec "$@"', "sh"]


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=turn_rules()) as server:
        yield server


def _exposed(root: Path, skip: set[Path]) -> list[str]:
    """Everything under ``root`` that its group or others may read, write or enter."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path in skip:
                continue
            mode = stat.S_IMODE(path.lstat().st_mode)
            if mode & 0o077:
                found.append(f"{path.relative_to(root)} {mode:o}")
    return sorted(found)


def test_state_db_env_and_socket_stay_private_under_umask_000(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    home = short_tmpdir() / "home"  # created by the daemon itself
    daemon = start(home, config=None, create_home=False, argv_prefix=UMASK_000)
    (home / "config.yaml").write_text(model_config(model.url))
    os.chmod(home / "config.yaml", 0o600)
    with daemon.client() as c:
        c.call("config.reload")
        sid = c.call("session.create", {"title": "private"})["id"]
        result = c.call(
            "session.send", {"session_id": sid, "message": "calc secret", "wait": True}, timeout=30
        )
        assert result["status"] == "completed", result
        written = c.call("plugins.set_env", {"values": {"MY_TOKEN": "s3cret"}})
        assert written["written"] == ["MY_TOKEN"]
    for name in ("state.db", "state.db-wal", "state.db-shm", ".env"):
        path = home / name
        assert path.exists(), name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, (name, oct(path.stat().st_mode))
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o600
    created = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert {"state.db", ".env"} <= set(created)
    assert _exposed(home, skip={home / "config.yaml"}) == [], created
    assert not [p for p in home.rglob("*.log")], "hermesd wrote a log file into HERMES_HOME"
