"""How handler failures reach the wire, with the real RPC layer and socket server in-process."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from hermesd.rpc.connection import Call, Limits, Router
from hermesd.rpc.protocol import Codes, RpcError
from hermesd.rpc.server import Gatekeeper, SocketServer
from hermesd.store.dbfile import StorageUnavailable
from tests.support.daemon import short_tmpdir


@pytest.fixture
def served() -> Iterator[tuple[Path, dict[str, Any]]]:
    """A socket whose ``ping`` runs ``behaviour["raise"]`` (if set) instead of answering."""
    behaviour: dict[str, Any] = {}

    async def ping(call: Call, p: dict[str, Any]) -> dict[str, Any]:
        if "raise" in behaviour:
            raise behaviour["raise"]
        return {"pong": True}

    router = Router()
    router.bind("ping", ping)
    path = short_tmpdir("re-") / "s.sock"
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    server = SocketServer(router, Limits(), Gatekeeper(None), 16)

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start(path, 0o600, []))
        ready.set()
        loop.run_forever()
        server.stop_accepting()  # and every connection closed, so nothing is left to collect
        loop.run_until_complete(server.drain(1.0))
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield path, behaviour
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_an_error_that_names_its_wire_code_is_sent_as_that_error(
    served: tuple[Path, dict[str, Any]],
) -> None:
    path, behaviour = served
    behaviour["raise"] = StorageUnavailable("the disk holding state.db is full", "full")
    with Client.connect(path) as c:
        with pytest.raises(RpcError) as err:
            c.call("ping")
        assert err.value.code == Codes.STORAGE_UNAVAILABLE
        assert err.value.message == "the disk holding state.db is full"
        assert err.value.data == {"reason": "full"}
        del behaviour["raise"]
        assert c.call("ping") == {"pong": True}  # the connection goes on


def test_any_other_exception_is_internal_without_its_text(
    served: tuple[Path, dict[str, Any]],
) -> None:
    path, behaviour = served
    behaviour["raise"] = KeyError("secret detail")
    with Client.connect(path) as c, pytest.raises(RpcError) as err:
        c.call("ping")
    assert err.value.code == Codes.INTERNAL
    assert "secret detail" not in err.value.message


def test_the_store_names_the_wire_error_the_protocol_declares() -> None:
    assert StorageUnavailable.rpc_code == Codes.STORAGE_UNAVAILABLE
    assert StorageUnavailable("full", "full").rpc_data == {"reason": "full"}


def test_a_code_the_protocol_does_not_declare_is_not_trusted(
    served: tuple[Path, dict[str, Any]],
) -> None:
    path, behaviour = served

    class Odd(Exception):
        rpc_code = "made.up.Code"

    behaviour["raise"] = Odd("whatever")
    with Client.connect(path) as c, pytest.raises(RpcError) as err:
        c.call("ping")
    assert err.value.code == Codes.INTERNAL
