"""Turn overhead through the HTTP door versus the msgpack socket, and SSE fan-out to 200.

(a) One hermesd with the HTTP door on loopback and a scripted model answering at once (in its
own process). A turn is sent and waited for, interleaved socket/HTTP/HTTP/socket…: over the
socket ``session.send`` with ``wait: true`` on one connection, over HTTP ``POST
/v1/sessions/{id}/messages`` with ``wait: true`` on one keep-alive connection. Each round runs in
a fresh session. The figure is the p50 added per turn by HTTP (guard: ≤ 2 ms).

(b) 200 SSE readers (``GET /v1/sessions/{id}/events``, one asyncio process) attached to one
session; a turn is sent; the time from sending to the last reader's ``turn.finished``, against
the same turn with one reader.

    python bench/http_door.py [--quick] [--no-write] [--rounds N]

(Not bench/http.py: with bench/ on sys.path that name would hide the standard library's.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import interleaved, machine, median, percentile

from tests.support.daemon import short_tmpdir, start_daemon

TOKEN = "bench-token-0123456789abcdef"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RawHttp:
    """One keep-alive HTTP/1.1 connection that writes each request in one ``sendall`` (with
    TCP_NODELAY), so Nagle and delayed ACKs do not stand between head and body."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + data)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        top, self.buf = self.buf.split(b"\r\n\r\n", 1)
        length = int(top.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(self.buf) < length:
            self.buf += self.sock.recv(65536)
        answer, self.buf = self.buf[:length], self.buf[length:]
        if not top.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(top.decode(errors="replace"))
        result: dict[str, Any] = json.loads(answer)
        return result


def turns(daemon: Any, port: int, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"socket": [], "http": []}
    h = RawHttp(port)
    with daemon.client() as c:
        for door in interleaved(rounds, ["socket", "http"]):
            sid = c.call("session.create", {"attach": False})["id"]
            t0 = time.perf_counter()
            if door == "socket":
                params = {"session_id": sid, "message": "hi", "wait": True}
                c.call("session.send", params, timeout=60)
            else:
                h.post(f"/v1/sessions/{sid}/messages", {"message": "hi", "wait": True})
            times[door].append((time.perf_counter() - t0) * 1000)
    h.sock.close()
    return times


async def fan_out(port: int, sid: str, readers: int) -> float:
    import httpx2

    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx2.Limits(max_connections=readers + 5)
    async with httpx2.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers=headers, limits=limits, timeout=120
    ) as c:
        ready: asyncio.Queue[None] = asyncio.Queue()

        async def one() -> float:
            async with c.stream("GET", f"/v1/sessions/{sid}/events") as r:
                kind = ""
                async for line in r.aiter_lines():
                    if line.startswith("event:"):
                        kind = line[6:].strip()
                        if kind == "attached":
                            ready.put_nowait(None)
                        elif kind == "turn.finished":
                            return time.perf_counter()
            raise RuntimeError("stream ended early")

        tasks = [asyncio.create_task(one()) for _ in range(readers)]
        for _ in range(readers):
            await ready.get()
        t0 = time.perf_counter()
        await c.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
        ends = await asyncio.gather(*tasks)
        return (max(ends) - t0) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    rounds = 20 if args.quick else args.rounds
    started = common.now_utc()
    tokens = short_tmpdir("bh-") / "tokens"
    tokens.write_text(TOKEN + "\n")
    port = _port()
    with common.instant_model() as url:
        config = common.model_config(url) + (
            f"http:\n  listen: 127.0.0.1:{port}\n  token_file: {tokens}\n"
        )
        daemon = start_daemon(config=config)
        try:
            turns(daemon, port, 5)  # warm both paths
            t = turns(daemon, port, rounds)
            fan = {}
            for n in interleaved(3 if args.quick else 5, ["1", "200"]):
                sid = daemon.call("session.create", {"attach": False})["id"]
                fan.setdefault(n, []).append(asyncio.run(fan_out(port, sid, int(n))))
        finally:
            daemon.stop()
    sock50, http50 = median(t["socket"]), median(t["http"])
    body = (
        "| turn, waited for | p50 ms | p90 ms |\n|---|---|---|\n"
        f"| msgpack socket `session.send` | {sock50:.2f} | {percentile(t['socket'], 90):.2f} |\n"
        f"| HTTP `POST /v1/sessions/{{id}}/messages` | {http50:.2f} "
        f"| {percentile(t['http'], 90):.2f} |\n\n"
        f"HTTP adds **{http50 - sock50:+.2f} ms** p50 per turn ({rounds} rounds each, interleaved; "
        f"guard ≤ 2 ms: {'met' if http50 - sock50 <= 2 else 'MISSED'}).\n\n"
        "| SSE readers of one session | send → last `turn.finished`, median ms |\n|---|---|\n"
        f"| 1 | {median(fan['1']):.1f} |\n| 200 | {median(fan['200']):.1f} |\n"
    )
    common.publish(
        args, "http", "HTTP door: turn overhead and SSE fan-out", body, started, machine()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
