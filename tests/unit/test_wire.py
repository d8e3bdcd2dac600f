"""The framing layer on its own: shapes, limits and hostile bytes."""

from __future__ import annotations

import msgpack
import pytest

from hermesd.rpc import wire


def test_request_response_and_notification_round_trip() -> None:
    dec = wire.Decoder()
    data = (
        wire.pack_request(7, "ping", [{}])
        + wire.pack_response(7, None, {"pong": True})
        + wire.pack_notification("turn.event", [{"x": 1}])
    )
    msgs = [wire.classify(o) for o in dec.feed(data)]
    assert msgs == [
        wire.Request(7, "ping", [{}]),
        wire.Response(7, None, {"pong": True}),
        wire.Notification("turn.event", [{"x": 1}]),
    ]


def test_messages_split_across_reads_are_reassembled() -> None:
    dec = wire.Decoder()
    data = wire.pack_request(1, "status", [])
    got = []
    for i in range(len(data)):
        got += list(dec.feed(data[i : i + 1]))
    assert [wire.classify(o) for o in got] == [wire.Request(1, "status", [])]


@pytest.mark.parametrize(
    "obj, has_id",
    [
        ({"a": 1}, False),
        ([], False),
        ([9, 1, "x", []], False),
        ([0, "1", "ping", []], False),
        ([0, -1, "ping", []], False),
        ([0, 2**40, "ping", []], False),
        ([0, 1, 5, []], True),
        ([0, 1, "ping", {}], True),
        ([0, 1, "ping"], True),
        ([1, 1, None], False),
        ([2, "m"], False),
        ([2, 5, []], False),
        ([True, 1, "ping", []], False),
    ],
)
def test_wrong_shapes_raise_frame_error(obj: object, has_id: bool) -> None:
    with pytest.raises(wire.FrameError) as err:
        wire.classify(obj)
    assert (err.value.msgid is not None) == has_id


def test_oversized_message_is_a_stream_error() -> None:
    dec = wire.Decoder(max_message=1024)
    with pytest.raises(wire.StreamError) as err:
        list(dec.feed(msgpack.packb([0, 1, "ping", ["x" * 5000]])))
    assert err.value.too_large


def test_small_frame_announcing_a_huge_string_is_refused() -> None:
    dec = wire.Decoder(max_message=1024)
    header = b"\x94\x00\x01\xa4ping\x91\xdb" + (10**6).to_bytes(4, "big")
    with pytest.raises(wire.StreamError):
        list(dec.feed(header + b"x" * 2000))


def test_invalid_utf8_is_a_stream_error() -> None:
    dec = wire.Decoder()
    with pytest.raises(wire.StreamError):
        list(dec.feed(b"\x94\x00\x01\xa2\xff\xfe\x90"))


def test_deep_nesting_is_a_stream_error_not_a_crash() -> None:
    dec = wire.Decoder()
    with pytest.raises(wire.StreamError):
        list(dec.feed(b"\x91" * 100_000 + b"\xc0"))


def test_reserved_byte_is_a_stream_error() -> None:
    with pytest.raises(wire.StreamError):
        list(wire.Decoder().feed(b"\xc1"))


def test_unencodable_values_become_strings() -> None:
    obj = msgpack.unpackb(wire.pack({"s": {3, 1}, "o": object}), raw=False)
    assert obj["s"] == [1, 3] and obj["o"].startswith("<class")
