"""The wire protocol, spoken to a real hermesd over its Unix socket."""

from __future__ import annotations

import os

import msgpack
import pytest

from hermesctl.client import Client
from hermesd.rpc.protocol import METHODS, PROTOCOL_VERSION, Codes, RpcError
from tests.support.daemon import DaemonProcess
from tests.support.raw import RawPeer


def test_hello_reports_version_pid_capabilities_and_every_method(daemon: DaemonProcess) -> None:
    with daemon.client(hello=False) as c:
        info = c.hello()
    assert info["protocol"] == PROTOCOL_VERSION
    assert info["pid"] == daemon.proc.pid
    assert info["daemon_version"]
    assert "server-requests" in info["capabilities"]
    assert sorted(info["methods"]) == sorted(METHODS)
    assert info["owner"] is True


def test_hello_with_an_incompatible_major_version_is_a_clear_error(daemon: DaemonProcess) -> None:
    with daemon.client(hello=False) as c:
        with pytest.raises(RpcError) as err:
            c.call("hello", {"protocol": "2.0"})
        assert err.value.code == Codes.INCOMPATIBLE_VERSION
        assert "1.0" in err.value.message and "2.0" in err.value.message
        assert c.call("ping")["pong"] is True  # the connection stays usable


def test_a_generic_client_may_skip_hello(daemon: DaemonProcess) -> None:
    peer = RawPeer(daemon.socket)
    assert peer.request(1, "ping", [{"data": "x"}]) == [1, 1, None, {"pong": True, "data": "x"}]


def test_params_may_be_an_empty_array(daemon: DaemonProcess) -> None:
    peer = RawPeer(daemon.socket)
    _kind, _msgid, err, result = peer.request(3, "status", [])
    assert err is None and result["pid"] == daemon.proc.pid


def test_status_reports_uptime_home_socket_and_counts(daemon: DaemonProcess) -> None:
    info = daemon.call("status")
    assert info["home"] == str(daemon.home)
    assert info["socket"] == str(daemon.socket)
    assert info["uptime_s"] >= 0
    assert info["connections"] == 1
    for key in ("sessions", "plugins", "version", "protocol"):
        assert key in info


def test_unknown_method_is_method_not_found(daemon: DaemonProcess) -> None:
    with daemon.client() as c, pytest.raises(RpcError) as err:
        c.call("no.such.method")
    assert err.value.code == Codes.METHOD_NOT_FOUND
    assert "no.such.method" in err.value.message


@pytest.mark.parametrize(
    "params, fragment",
    [
        ([{"data": 1, "bogus": 2}], "unknown parameter"),
        ([{"delay_ms": "soon"}], "must be int"),
        ([{"delay_ms": True}], "got bool"),
        (["not a map"], "map of named parameters"),
        ([{}, {}], "one map"),
        ([{"delay_ms": -5}], "between 0 and 60000"),
    ],
)
def test_bad_params_are_invalid_params_naming_the_problem(
    daemon: DaemonProcess, params: list, fragment: str
) -> None:
    peer = RawPeer(daemon.socket)
    _, msgid, err, result = peer.request(9, "ping", params)
    assert msgid == 9 and result is None
    assert err["code"] == Codes.INVALID_PARAMS
    assert fragment in err["message"]


def test_many_requests_in_flight_are_answered_out_of_order(daemon: DaemonProcess) -> None:
    with daemon.client() as c:
        slow = c.send("ping", {"data": "slow", "delay_ms": 400})
        fast = [c.send("ping", {"data": i}) for i in range(50)]
        order = []
        while len(order) < 51:
            c._read_once(None)
            for msgid in list(c._responses):
                order.append(msgid)
                c._responses.pop(msgid)
        assert order[-1] == slow
        assert sorted(order[:-1]) == sorted(fast)


def test_garbage_bytes_close_that_connection_only(daemon: DaemonProcess) -> None:
    bystander = daemon.client()
    bad = RawPeer(daemon.socket)
    bad.send_bytes(b"\xc1\xc1\xc1 this is not msgpack")
    note = bad.recv()
    assert note[0] == 2 and note[1] == "hermes.error"
    assert note[2][0]["code"] == Codes.PARSE
    assert bad.closed_by_peer()
    assert bystander.call("ping")["pong"] is True
    assert daemon.alive()
    assert "undecodable msgpack" in daemon.log()


def test_oversized_message_gets_payload_too_large_and_a_close(start) -> None:
    daemon = start(config="limits:\n  max_message: 4096\n")
    bad = RawPeer(daemon.socket)
    bad.send([0, 1, "ping", [{"data": "x" * 10_000}]])
    note = bad.recv()
    assert note[2][0]["code"] == Codes.PAYLOAD_TOO_LARGE
    assert bad.closed_by_peer()
    assert daemon.call("ping")["pong"]


@pytest.mark.parametrize(
    "frame",
    [
        [0, 5, 17, []],
        [0, 5, "ping", "params"],
        [0, 5, "ping"],
        [0, 5, "ping", [], "extra"],
    ],
)
def test_malformed_request_with_readable_id_gets_invalid_request_and_stays_open(
    daemon: DaemonProcess, frame: list
) -> None:
    peer = RawPeer(daemon.socket)
    peer.send(frame)
    reply = peer.recv()
    assert reply[0] == 1 and reply[1] == 5
    assert reply[2]["code"] == Codes.INVALID_REQUEST
    assert peer.request(6, "ping")[3]["pong"] is True


@pytest.mark.parametrize(
    "frame",
    [
        {"not": "an array"},
        [],
        [7],
        "string",
        42,
        [0, "id", "ping", []],
        [1, 99, None, None],
        [2, "some.notification", []],
        [1, 2**33, None, None],
    ],
)
def test_frames_without_a_usable_id_never_break_the_connection(
    daemon: DaemonProcess, frame: object
) -> None:
    peer = RawPeer(daemon.socket)
    peer.send(frame)
    reply = peer.request(77, "ping")
    while reply[0] == 2:  # an error notification about the bad frame may come first
        assert reply[1] == "hermes.error"
        reply = peer.recv()
    assert reply[:3] == [1, 77, None]


def test_responses_from_the_client_to_unknown_ids_are_ignored(daemon: DaemonProcess) -> None:
    peer = RawPeer(daemon.socket)
    for i in range(100):
        peer.send([1, i, None, {"fake": True}])
    assert peer.request(1000, "ping")[3]["pong"]


def test_invalid_utf8_method_name_closes_only_that_connection(daemon: DaemonProcess) -> None:
    peer = RawPeer(daemon.socket)
    peer.send_bytes(b"\x94\x00\x01\xa2\xff\xfe\x90")
    assert peer.recv()[1] == "hermes.error"
    assert peer.closed_by_peer()
    assert daemon.call("ping")["pong"]


def test_binary_where_a_string_is_expected_is_invalid_request(daemon: DaemonProcess) -> None:
    peer = RawPeer(daemon.socket)
    peer.send_bytes(msgpack.packb([0, 4, b"ping", []], use_bin_type=True))
    reply = peer.recv()
    assert reply[1] == 4 and reply[2]["code"] == Codes.INVALID_REQUEST


def test_client_that_disconnects_mid_request_does_not_disturb_others(daemon: DaemonProcess) -> None:
    peer = RawPeer(daemon.socket)
    peer.send([0, 1, "ping", [{"delay_ms": 300}]])
    peer.close()
    with daemon.client() as c:
        assert c.call("ping", {"delay_ms": 400})["pong"]
    assert "Traceback" not in daemon.log()


def test_library_client_can_be_used_from_python(daemon: DaemonProcess) -> None:
    os.environ["HERMES_SOCKET"] = str(daemon.socket)
    try:
        with Client.connect(hello=True) as c:
            assert c.server_info["pid"] == daemon.proc.pid
            assert c.call("ping", {"data": [1, 2, 3]})["data"] == [1, 2, 3]
    finally:
        del os.environ["HERMES_SOCKET"]
