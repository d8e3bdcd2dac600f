"""The memory files under load: writers in two sessions and another process at once, and
``kill -9`` while a write is half done.

Real hermesd processes; the writes go through ``tools.call``, the same pipeline as a model's
call. Another process writes with `hermesd.memory.files.MemoryFiles`, as a second daemon or
the reference's CLI on the same home would (it takes the same ``fcntl`` lock).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from hermesctl.client import Client
from hermesd.memory.files import ENTRY_DELIMITER, parse
from tests.support.daemon import REPO, DaemonProcess, short_tmpdir, start_daemon

PER_WRITER = 25

_OTHER_PROCESS = """
import sys
from pathlib import Path
from hermesd.memory import edits
from hermesd.memory.files import Limits, MemoryFiles
files = MemoryFiles(Path(sys.argv[1]), Limits(memory=100_000))
for i in range(int(sys.argv[2])):
    assert edits.add(files, "memory", f"process fact {i}").result["success"]
"""


def _add(client: Client, session_id: str, content: str) -> dict[str, object]:
    params = {
        "name": "memory",
        "args": {"target": "memory", "action": "add", "content": content},
        "session_id": session_id,
    }
    result: dict[str, object] = json.loads(client.call("tools.call", params)["result"])
    return result


def _writer(daemon: DaemonProcess, label: str, failures: list[object]) -> None:
    with daemon.client() as c:
        sid = c.call("session.create", {"attach": False})["id"]
        for i in range(PER_WRITER):
            result = _add(c, sid, f"{label} fact {i}")
            if result.get("success") is not True:
                failures.append(result)


def test_writes_from_two_sessions_and_another_process_all_land() -> None:
    home = short_tmpdir("memc-")
    daemon = start_daemon(home, config="memory:\n  memory_char_limit: 100000\n")
    try:
        failures: list[object] = []
        threads = [
            threading.Thread(target=_writer, args=(daemon, label, failures))
            for label in ("alpha", "beta")
        ]
        other = subprocess.Popen(
            [sys.executable, "-c", _OTHER_PROCESS, str(home), str(PER_WRITER)], cwd=REPO
        )
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert other.wait(120) == 0
        assert failures == []
        entries = parse((home / "memories" / "MEMORY.md").read_text())
        expected = {f"{who} fact {i}" for who in ("alpha", "beta", "process") for i in range(25)}
        assert sorted(entries) == sorted(expected)
    finally:
        daemon.stop()


def _hammer(daemon: DaemonProcess, stop: threading.Event, label: str) -> None:
    try:
        with daemon.client() as c:
            sid = c.call("session.create", {"attach": False})["id"]
            i = 0
            while not stop.is_set():
                # big entries: each write rewrites megabytes, so a kill lands inside one
                _add(c, sid, f"{label}-{i}:" + label[0] * 200_000)
                i += 1
    except Exception:  # the daemon was killed under us: expected
        return


def test_kill_9_during_a_write_leaves_a_whole_file(tmp_path: Path) -> None:
    home = short_tmpdir("memk-")
    config = "memory:\n  memory_char_limit: 40000000\n"
    daemon = start_daemon(home, config=config)
    memories = home / "memories"
    stop = threading.Event()
    writers = [
        threading.Thread(target=_hammer, args=(daemon, stop, label), daemon=True)
        for label in ("apple", "berry")
    ]
    for w in writers:
        w.start()
    deadline = time.monotonic() + 60
    caught_mid_write = False
    while time.monotonic() < deadline:
        entries = (
            (memories / "MEMORY.md").stat().st_size if (memories / "MEMORY.md").exists() else 0
        )
        if entries > 1_000_000 and list(memories.glob(".mem_*.tmp")):
            daemon.signal(signal.SIGKILL)
            caught_mid_write = True
            break
        time.sleep(0.001)
    stop.set()
    daemon.proc.wait(10)
    daemon.stop()
    assert caught_mid_write, "no write was in progress within a minute"

    raw = (memories / "MEMORY.md").read_text()
    entries = parse(raw)
    assert raw == ENTRY_DELIMITER.join(entries)  # round-trips: nothing torn or appended
    for entry in entries:
        label, _, body = entry.partition(":")
        assert body == label[0] * 200_000, f"entry {label} is not whole"

    daemon = start_daemon(home, config=config)
    try:
        assert list(memories.glob(".mem_*.tmp")) == []  # the crash's leftovers are cleared
        with daemon.client() as c:
            result = _add(c, "", "after the crash")
        assert result["success"] is True
        assert parse((memories / "MEMORY.md").read_text())[-1] == "after the crash"
    finally:
        daemon.stop()
