"""The IPC baseline: the least a Python asyncio msgpack-RPC server on a Unix socket can do.

One ``asyncio.Protocol`` with a ``msgpack.Unpacker``; every request ``[0, id, method, params]``
is answered at once with ``[1, id, None, {"pong": True, "data": None}]``, the same bytes hermesd
sends for a ``ping``. No validation, no limits, no peer checks: hermesd over this is the price
of everything it does per request. Run: ``python bench/echo_server.py SOCKET``; SIGTERM stops it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import msgpack


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.unpacker = msgpack.Unpacker(raw=False)

    def data_received(self, data: bytes) -> None:
        self.unpacker.feed(data)
        for msg in self.unpacker:
            self.transport.write(msgpack.packb([1, msg[1], None, {"pong": True, "data": None}]))


async def serve(path: str) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.create_future()

    def request_stop() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, request_stop)
    server = await loop.create_unix_server(Echo, path)
    try:
        await stop
    finally:
        server.close()
        os.unlink(path)


def main(argv: list[str]) -> Any:
    if len(argv) != 2:
        print("usage: echo_server.py SOCKET", file=sys.stderr)
        return 2
    asyncio.run(serve(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
