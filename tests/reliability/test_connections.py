"""Many connections and a client that never reads: others are served, memory stays bounded.

1,000 idle connections stay open while a slow reader attaches to a session whose model streams
megabytes of text and never reads its notifications: the daemon disconnects it once its queued
output passes ``limits.max_output``, keeps answering everyone else (``ping`` latency measured
during the flood), and its RSS stays bounded. The connection limit itself answers with a clear
error (``tests/e2e/test_socket.py`` covers it for a tiny limit; here it is hit with 1,000 open).
"""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from hermesd.rpc import wire
from hermesd.rpc.protocol import Codes
from tests.support.daemon import DaemonProcess
from tests.support.modelserver import ScriptedModelServer, reply
from tests.support.raw import RawPeer
from tests.support.reliability import model_config, rss_kb, turn_rules
from tests.support.waiting import wait_until

IDLE = 1000
LIMIT = 1010
MAX_OUTPUT = 256 * 1024


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=turn_rules()) as server:
        yield server


@pytest.fixture(autouse=True)
def _enough_descriptors() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE + 200
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"the hard open-files limit ({hard}) is below {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    for _ in range(200):
        try:
            sock.connect(path)
            return sock
        except BlockingIOError:  # the accept queue is full for a moment
            time.sleep(0.01)
    raise AssertionError("hermesd stopped accepting connections")


def _request(
    sock: socket.socket, unpacker: msgpack.Unpacker, msgid: int, method: str, params: dict[str, Any]
) -> Any:
    sock.sendall(msgpack.packb([wire.REQUEST, msgid, method, [params]], use_bin_type=True))
    while True:
        for obj in unpacker:
            if obj[0] == wire.RESPONSE and obj[1] == msgid:
                assert obj[2] is None, obj
                return obj[3]
        unpacker.feed(sock.recv(65536))


def _drained_until_closed(sock: socket.socket, timeout: float) -> bool:
    """Read everything queued; True when the daemon closed the connection."""
    sock.settimeout(timeout)
    try:
        while sock.recv(1 << 20):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_slow_reader_is_dropped_while_1000_idle_connections_and_others_are_served(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    daemon = start(
        config=model_config(
            model.url, f"limits:\n  max_output: {MAX_OUTPUT}\n  max_connections: {LIMIT}\n"
        )
    )
    path = str(daemon.socket)
    rss_start = rss_kb(daemon.proc.pid)
    idle = [_connect(path) for _ in range(IDLE)]
    with daemon.client() as c:
        wait_until(
            lambda: c.call("status")["connections"] == IDLE + 1,
            20,
            "the daemon to accept every idle connection",
        )
    rss_idle = rss_kb(daemon.proc.pid)

    slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.settimeout(10)
    slow.connect(path)
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    sid = _request(slow, unpacker, 1, "session.create", {"title": "flood"})["id"]
    model.push(reply("flood " * 700_000, chunk_chars=4000))  # ~4 MB in ~1,000 text deltas
    _request(slow, unpacker, 2, "session.send", {"session_id": sid, "message": "flood me"})

    pings: list[float] = []
    with daemon.client() as c:
        other = c.call("session.create", {"title": "other"})["id"]
        deadline = time.monotonic() + 30
        while "is not reading its messages" not in daemon.log():
            assert time.monotonic() < deadline, daemon.log()[-2000:]
            t0 = time.perf_counter()
            assert c.call("ping")["pong"] is True
            pings.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.005)
        result = c.call(
            "session.send",
            {"session_id": other, "message": "echo served", "wait": True},
            timeout=30,
        )
        assert result["status"] == "completed" and result["final_text"] == "echo served"
        wait_until(
            lambda: not c.call("session.get", {"session_id": sid})["running"],
            30,
            "the flooding turn to finish without its reader",
        )
        # The answer is stored (not read back here: one 4 MB result exceeds max_output).
        assert c.call("session.get", {"session_id": sid})["message_count"] == 2
    assert _drained_until_closed(slow, 10)
    slow.close()
    rss_flood = rss_kb(daemon.proc.pid)

    for sock in idle[::100]:  # idle connections are still served
        peer_unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        answer = _request(sock, peer_unpacker, 7, "ping", {"data": "still here"})
        assert answer["data"] == "still here"
    # Fill the remaining slots: the next connection gets the limit's clear error.
    extra = [_connect(path) for _ in range(LIMIT - IDLE)]
    time.sleep(0.3)
    refused = RawPeer(daemon.socket)
    note = refused.recv(timeout=5)
    assert note[0] == wire.NOTIFICATION and note[2][0]["code"] == Codes.TOO_MANY_CONNECTIONS
    assert refused.closed_by_peer()
    for sock in idle + extra:
        sock.close()
    with daemon.client() as c:
        wait_until(lambda: c.call("status")["connections"] == 1, 20, "idle connections to close")
    assert daemon.alive()
    per_idle = (rss_idle - rss_start) / IDLE
    assert per_idle < 128, f"{per_idle:.0f} kB of RSS per idle connection"
    assert rss_flood - rss_idle < 64 * 1024, f"the flood grew RSS by {rss_flood - rss_idle} kB"
    pings.sort()
    print(
        f"\nconnections: RSS {rss_start} kB -> {rss_idle} kB with {IDLE} idle -> {rss_flood} kB"
        f" after the flood; ping during the flood p50 {pings[len(pings) // 2]:.1f} ms,"
        f" max {pings[-1]:.1f} ms over {len(pings)} pings"
    )


def test_daemon_raises_its_open_files_soft_limit_to_the_hard_limit(
    start: Callable[..., DaemonProcess],
) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard open-files limit ({hard}) leaves nothing to raise")
    daemon = start(argv_prefix=["sh", "-c", 'ulimit -Sn 256; exec "$@"', "sh"])
    limits = Path(f"/proc/{daemon.proc.pid}/limits").read_text()
    soft_now, hard_now = next(
        line.split()[3:5] for line in limits.splitlines() if line.startswith("Max open files")
    )
    assert soft_now == hard_now
    assert f"open-files limit raised from 256 to {hard_now}" in daemon.log()


def test_a_burst_of_500_connects_is_queued_not_refused(start: Callable[..., DaemonProcess]) -> None:
    daemon = start()
    socks = []
    try:
        for _ in range(500):  # faster than the daemon accepts: the kernel queue must hold them
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)  # non-blocking connect underneath: EAGAIN if the queue is full
            socks.append(sock)
            sock.connect(str(daemon.socket))
        with daemon.client() as c:
            wait_until(lambda: c.call("status")["connections"] == 501, 20, "every connection")
    finally:
        for sock in socks:
            sock.close()
