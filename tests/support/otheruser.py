"""Connect to a socket as another uid, from a forked child that drops privileges.

The interpreter lives under /root (mode 0700) on these machines, so a process of another uid
cannot exec it; instead the test process forks, the child switches uid/gid with setgroups,
setgid and setuid — a genuinely different peer for SO_PEERCRED — and reports what it saw
through a pipe.
"""

from __future__ import annotations

import contextlib
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


class HeldConnections:
    """Connections held open by a child running as another uid (`hold_connections_as`)."""

    def __init__(self, pid: int, release_fd: int, admitted: int, refused: int, codes: list) -> None:
        self.pid, self._release_fd = pid, release_fd
        self.admitted, self.refused, self.codes = admitted, refused, codes

    def release(self) -> None:
        """Close them all (the child exits)."""
        if self._release_fd >= 0:
            os.close(self._release_fd)
            self._release_fd = -1
            os.waitpid(self.pid, 0)

    def __enter__(self) -> HeldConnections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def hold_connections_as(
    uid: int, gid: int, path: Path, count: int, lifetime: float = 60.0
) -> HeldConnections:
    """Open ``count`` connections as uid/gid and ping on each; keep the admitted ones open
    until ``release()`` (or ``lifetime`` seconds: the child stops itself)."""
    if os.geteuid() != 0:
        raise RuntimeError("switching uid needs root")
    report_r, report_w = os.pipe()
    release_r, release_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        try:
            os.close(report_r)
            os.close(release_w)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            held, refused, codes = [], 0, []
            for n in range(count):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(10)
                sock.connect(str(path))
                with contextlib.suppress(OSError):  # refused and closed: the notice is still there
                    sock.sendall(msgpack.packb([0, n, "ping", []], use_bin_type=True))
                unpacker = msgpack.Unpacker(raw=False)
                answer = None
                while answer is None:
                    try:
                        data = sock.recv(65536)
                    except ConnectionResetError:
                        data = b""
                    if not data:
                        break
                    unpacker.feed(data)
                    answer = next(iter(unpacker), None)
                if answer is not None and answer[0] == 1:
                    held.append(sock)
                else:
                    refused += 1
                    if answer is not None:  # the hermes.error notification
                        codes.append(answer[2][0]["code"])
                    sock.close()
            os.write(report_w, json.dumps([len(held), refused, sorted(set(codes))]).encode())
            os.close(report_w)
            import select

            select.select([release_r], [], [], lifetime)
        except BaseException as exc:  # report, never raise in the child
            os.write(report_w, json.dumps({"child_error": repr(exc)}).encode())
        finally:
            os._exit(0)
    os.close(report_w)
    os.close(release_r)
    chunks = []
    while True:
        chunk = os.read(report_r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(report_r)
    report = json.loads(b"".join(chunks) or b"{}")
    if isinstance(report, dict):
        os.close(release_w)
        os.waitpid(pid, 0)
        raise RuntimeError(f"the child failed: {report}")
    return HeldConnections(pid, release_w, *report)
