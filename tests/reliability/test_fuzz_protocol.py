"""Fuzzing the wire: hostile frames must never kill the daemon, leak connections or memory.

A byte-level mutator seeded from valid frames of every declared method, plus hand-made
classes of nasty input (wrong shapes, wrong param types for every parameter, huge ints, deep
nesting, giant headers, invalid UTF-8, stray responses). ``HERMES_FUZZ_FRAMES`` sets the
volume (default 20,000 for the everyday suite; the reliability figures use 100,000).
"""

from __future__ import annotations

import os
import random
import socket
import time
from typing import Any

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermesd.rpc.protocol import METHODS
from tests.support.daemon import DaemonProcess
from tests.support.raw import RawPeer
from tests.support.waiting import wait_until

FRAMES = int(os.environ.get("HERMES_FUZZ_FRAMES", "20000"))
# Methods whose valid calls have side effects a fuzzer must not trigger on purpose.
UNSAFE = {
    "shutdown",
    "config.reload",
    "tools.call",
    "session.send",
    "session.delete",
    "plugins.install",
    "plugins.remove",
    "plugins.update",
    "plugins.enable",
    "plugins.disable",
    "plugins.reload",
    "plugins.set_env",
    "cli.run",
    "command.run",
    "approvals.respond",
    "approvals.revoke",
}
WRONG_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**63,
    -(2**63),
    1.5,
    "",
    "x" * 300,
    b"\xff",
    [],
    [1, [2, [3]]],
    {},
    {"k": {"k": "v"}},
]


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _seeds() -> list[bytes]:
    seeds = []
    for i, (name, spec) in enumerate(sorted(METHODS.items())):
        if name in UNSAFE:
            continue
        params: dict[str, Any] = {}
        for p in spec.params:
            params[p.name] = {
                "str": "abc",
                "int": 3,
                "number": 1.5,
                "bool": True,
                "map": {"a": 1},
                "array": [1],
                "any": "v",
            }[p.type]
        seeds.append(msgpack.packb([0, i, name, [params]], use_bin_type=True))
    seeds.append(msgpack.packb([2, "some.note", [{"x": 1}]], use_bin_type=True))
    seeds.append(msgpack.packb([1, 42, None, {"ok": True}], use_bin_type=True))
    return seeds


def _wrong_type_frames() -> list[bytes]:
    """Every parameter of every safe method, with every wrong-typed value."""
    frames = []
    msgid = 1
    for name, spec in sorted(METHODS.items()):
        if name in UNSAFE:
            continue
        for p in spec.params:
            for value in WRONG_VALUES:
                frames.append(msgpack.packb([0, msgid, name, [{p.name: value}]], use_bin_type=True))
                msgid += 1
    return frames


def _nasty_frames() -> list[bytes]:
    def pk(o):
        return msgpack.packb(o, use_bin_type=True)

    return [
        b"\x94\x00\x01\xa4ping\x91\xdb\xff\xff\xff\xff",  # str32 announcing 4 GiB
        b"\x94\x00\x01\xa4ping\xdd\xff\xff\xff\xff",  # array32 of 4 G elements
        b"\x91" * 5000 + b"\xc0",  # deep nesting
        b"\x94\x00\x01\xa2\xff\xfe\x90",  # invalid UTF-8 method
        b"\xc1",  # reserved byte
        b"\xcf" + b"\xff" * 8,  # a bare uint64
        pk([0, 2**32, "ping", []]),
        pk([0, -5, "ping", []]),  # ids out of range
        pk([0, 1, "ping", [{}], 7]),
        pk([3, 1, "ping", []]),  # wrong shapes
        pk([1, 999999, None, None]),
        pk([1, 7, {"code": "x"}, None]),  # stray responses
        pk([0, 1, "x" * 60000, []]),  # long method name
        pk([0, 1, "ping", [{"data": "y" * 60000}]]),  # big but allowed payload
        pk([0, 1, "ping", [{"data": {str(i): i for i in range(5000)}}]]),
        pk([0, 1, "ping", [{12: "non-string key"}]]),
        pk([2, 1, 2]),
        pk([0, 1, "ping", [None]]),
        pk({"a": 1}),
        pk("just a string"),
    ]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        if op == 0 and buf:  # flip a byte
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif op == 1 and buf:  # truncate
            del buf[rng.randrange(len(buf)) :]
        elif op == 2:  # insert random bytes
            at = rng.randrange(len(buf) + 1)
            buf[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and buf:  # replace a type byte with a container header
            buf[rng.randrange(len(buf))] = rng.choice([0xDC, 0xDD, 0xDE, 0xDF, 0xDA, 0xDB, 0xC6])
        else:  # duplicate a slice
            if buf:
                a = rng.randrange(len(buf))
                buf[a:a] = buf[a : a + rng.randint(1, 16)]
    return bytes(buf)


class _Conn:
    """A fuzzing connection that reconnects when the daemon closes it."""

    def __init__(self, path) -> None:
        self.path = path
        self.sock: socket.socket | None = None
        self.reconnects = 0

    def send(self, data: bytes) -> None:
        for _ in range(3):
            if self.sock is None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(str(self.path))
                self.sock.setblocking(False)
                self.reconnects += 1
            try:
                self.sock.sendall(data)
                self._drain()
                return
            except (BlockingIOError, BrokenPipeError, ConnectionResetError, OSError):
                self.close()

    def _drain(self) -> None:
        assert self.sock is not None
        while True:
            try:
                chunk = self.sock.recv(1 << 20)
            except BlockingIOError:
                return
            if not chunk:
                self.close()
                return

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def test_hostile_frames_never_kill_the_daemon_or_leak(start) -> None:
    daemon: DaemonProcess = start(config="limits:\n  max_message: 65536\n")
    rng = random.Random(20261129)
    seeds = _seeds()
    fixed = _wrong_type_frames() + _nasty_frames()
    conns = [_Conn(daemon.socket) for _ in range(16)]
    rss_before = _rss_kb(daemon.proc.pid)
    sent = 0
    deadline = time.monotonic() + 120
    for frame in fixed:
        conns[sent % len(conns)].send(frame)
        sent += 1
    while sent < FRAMES and time.monotonic() < deadline:
        conn = conns[rng.randrange(len(conns))]
        conn.send(_mutate(rng, rng.choice(seeds)))
        sent += 1
        if sent % 2000 == 0:
            assert daemon.alive(), daemon.log()[-3000:]
    for conn in conns:
        conn.close()
    assert daemon.alive(), daemon.log()[-3000:]
    assert sent >= min(FRAMES, 5000), f"only {sent} frames in the time bound"
    with daemon.client() as c:
        assert c.call("ping")["pong"] is True
        wait_until(
            lambda: c.call("status")["connections"] == 1, 20, "every fuzz connection released"
        )
    rss_after = _rss_kb(daemon.proc.pid)
    assert rss_after - rss_before < 64 * 1024, (rss_before, rss_after)
    crashes = [b.split("\n\n")[0] for b in daemon.log().split("failed\nTraceback")[1:]]
    assert crashes == [], "\n----\n".join(crashes)[:6000]  # no handler crashed
    print(
        f"\nfuzz: {sent} frames, {sum(c.reconnects for c in conns)} connections, "
        f"RSS {rss_before} kB -> {rss_after} kB"
    )


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    obj=st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**64 - 1)
        | st.floats()
        | st.text(max_size=50)
        | st.binary(max_size=50),
        lambda children: (
            st.lists(children, max_size=6)
            | st.dictionaries(st.text(max_size=10), children, max_size=6)
        ),
        max_leaves=30,
    )
)
def test_any_msgpack_object_gets_an_answer_or_is_ignored(shared_daemon, obj: Any) -> None:
    peer = RawPeer(shared_daemon.socket, timeout=5)
    try:
        peer.send(obj)
        reply = peer.request(4242, "ping")
        while reply[0] != 1 or reply[1] != 4242:
            if reply[0] == 1 and reply[2] is not None:  # an answer to the fuzzed frame
                assert reply[2]["code"].startswith("hermes.error.")
            reply = peer.recv()
        assert reply[2] is None
    finally:
        peer.close()


def test_every_wrong_typed_parameter_of_every_method_gets_invalid_params(daemon) -> None:
    """Unsafe methods included: validation rejects a wrong type before any handler runs."""
    from hermesd.rpc.protocol import Codes, Param

    peer = RawPeer(daemon.socket, timeout=10)
    sent: dict[int, str] = {}
    msgid = 1
    for name, spec in sorted(METHODS.items()):
        for p in spec.params:
            for value in WRONG_VALUES:
                if Param(p.name, p.type, nullable=True).check(value) is None:
                    continue  # a value of the right type: not what this test is about
                peer.send([0, msgid, name, [{p.name: value}]])
                sent[msgid] = f"{name}.{p.name}={value!r:.30}"
                msgid += 1
    wrong: list[str] = []
    while sent:
        kind, rid, err, _ = peer.recv()
        label = sent.pop(rid)
        if kind != 1 or err is None or err["code"] != Codes.INVALID_PARAMS:
            wrong.append(f"{label} -> {err}")
    assert wrong == []
    assert daemon.alive() and daemon.call("ping")["pong"]
