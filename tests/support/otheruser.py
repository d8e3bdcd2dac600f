"""Connect to a socket as another uid, from a forked child that drops privileges.

The interpreter lives under /root (mode 0700) on these machines, so a process of another uid
cannot exec it; instead the test process forks, the child switches uid/gid with setgroups,
setgid and setuid — a genuinely different peer for SO_PEERCRED — and reports what it saw
through a pipe.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import msgpack


def talk_as(
    uid: int, gid: int, path: Path, frames: list[list[Any]], timeout: float = 5.0
) -> dict[str, Any]:
    """Send ``frames`` as uid/gid; return ``{"connect_error": ...}`` or ``{"received": [...]}``."""
    if os.geteuid() != 0:
        raise RuntimeError("switching uid needs root")
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        outcome: dict[str, Any] = {}
        try:
            os.close(rfd)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(str(path))
            except OSError as exc:
                outcome = {"connect_error": exc.errno}
            else:
                for frame in frames:
                    try:
                        sock.sendall(msgpack.packb(frame, use_bin_type=True))
                    except OSError:
                        break
                unpacker = msgpack.Unpacker(raw=False)
                received: list[Any] = []
                closed = False
                while True:
                    try:
                        data = sock.recv(65536)
                    except TimeoutError:
                        break
                    except ConnectionResetError:
                        closed = True
                        break
                    if not data:
                        closed = True
                        break
                    unpacker.feed(data)
                    received.extend(unpacker)
                    responses = [m for m in received if m and m[0] == 1]
                    if len(responses) >= len(frames) and frames:
                        break
                outcome = {"received": received, "closed": closed}
            os.write(wfd, json.dumps(outcome, default=str).encode())
        except BaseException as exc:  # report, never raise in the child
            os.write(wfd, json.dumps({"child_error": repr(exc)}).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    chunks = []
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(rfd)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks) or b"{}")
