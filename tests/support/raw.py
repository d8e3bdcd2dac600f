"""A raw msgpack-RPC peer for tests that must send what a well-behaved client never would."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import msgpack

from hermesd.rpc import wire

_open: set[RawPeer] = set()


def close_all() -> None:
    """Close every peer a test left open (the conftest calls this after each test)."""
    while _open:
        _open.pop().close()


class RawPeer:
    """Bytes in, decoded objects out; no protocol rules applied."""

    def __init__(self, path: Path, timeout: float = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        _open.add(self)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        self.timeout = timeout

    def send(self, obj: Any) -> None:
        self.sock.sendall(msgpack.packb(obj, use_bin_type=True))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, timeout: float | None = None) -> Any:
        """The next decoded object; raises EOFError when the daemon closed the connection."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for obj in self.unpacker:
                return obj
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("nothing received")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("connection closed by hermesd")
            self.unpacker.feed(data)

    def request(self, msgid: int, method: str, params: list[Any] | None = None) -> Any:
        self.send([wire.REQUEST, msgid, method, params if params is not None else []])
        return self.recv()

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the daemon closes the connection (after anything it still sends)."""
        try:
            while True:
                self.recv(timeout)
        except EOFError:
            return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True

    def close(self) -> None:
        _open.discard(self)
        self.sock.close()
