"""The old import names third-party clients may use keep working after the move to rpc/."""

from __future__ import annotations

import hermesd.protocol
import hermesd.rpc.protocol
import hermesd.rpc.wire
import hermesd.wire


def test_hermesd_wire_still_frames_messages() -> None:
    data = hermesd.wire.pack_request(7, "ping", [])
    assert hermesd.wire.Decoder is hermesd.rpc.wire.Decoder
    [obj] = list(hermesd.wire.Decoder().feed(data))
    assert hermesd.wire.classify(obj) == hermesd.rpc.wire.Request(7, "ping", [])


def test_hermesd_protocol_still_names_the_errors_and_methods() -> None:
    assert hermesd.protocol.RpcError is hermesd.rpc.protocol.RpcError
    assert hermesd.protocol.Codes.NOT_FOUND == "hermes.error.NotFound"
    assert "session.send" in hermesd.protocol.METHODS
