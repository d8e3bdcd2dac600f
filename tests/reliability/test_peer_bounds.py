"""Resource bounds per peer: what one client (or one uid) can make the daemon hold.

Each test attacks a real hermesd over its socket and reads the daemon's own account in
``status`` (requests in flight, handlers cancelled on disconnect, budget bytes held and
refused, connections closed as overdue, connections per uid), never the clock: a
disconnected client's handlers are cancelled, a flood of connections from another uid leaves
room for the owner, a stalled partial message and an idle connection are closed while attached
and waiting clients are not, and a client past a memory budget gets a structured error or
loses its connection while the daemon keeps serving everyone else.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from hermesd.rpc import wire
from hermesd.rpc.protocol import Codes
from tests.support.approvals import Background, client_answering, terminal, wait_pending
from tests.support.daemon import DaemonProcess, short_tmpdir
from tests.support.otheruser import hold_connections_as
from tests.support.raw import RawPeer
from tests.support.reliability import rss_kb
from tests.support.waiting import wait_until

Start = Callable[..., DaemonProcess]
NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")
KIB = 1024


def _status(daemon: DaemonProcess) -> dict[str, Any]:
    status: dict[str, Any] = daemon.call("status")
    return status


def _held(daemon: DaemonProcess) -> dict[str, int]:
    return {kind: v["held"] for kind, v in _status(daemon)["budgets"].items()}


def _half_frame(size: int) -> bytes:
    """The first half of a request carrying ``size`` bytes of data."""
    frame = msgpack.packb([wire.REQUEST, 1, "ping", [{"data": b"x" * size}]], use_bin_type=True)
    return frame[: len(frame) // 2]


# --- a client that goes away -------------------------------------------------------------------


def test_disconnect_cancels_the_connections_handlers_and_frees_their_params(
    start: Start,
) -> None:
    daemon = start()
    peer = RawPeer(daemon.socket)
    peer.send([wire.REQUEST, 1, "ping", [{"delay_ms": 60_000, "data": b"x" * (4 << 20)}]])
    wait_until(lambda: _held(daemon)["inflight"] > 4 << 20, 10, "the request to be in flight")
    assert _status(daemon)["requests_in_flight"] >= 1
    peer.close()
    wait_until(
        lambda: _status(daemon)["requests_cancelled_on_disconnect"] == 1,
        10,
        "the handler to be cancelled",
    )
    status = _status(daemon)
    assert status["requests_in_flight"] == 0
    assert status["budgets"]["inflight"]["held"] < 64 * KIB
    assert "went away: 1 request(s) cancelled" in daemon.log()


def test_large_requests_then_leaving_hold_at_most_the_budget_and_nothing_after(
    start: Start,
) -> None:
    """The issue's case: one client sends large requests that wait, then disconnects."""
    daemon = start()  # default budgets: 64 MiB in flight per uid
    baseline = rss_kb(daemon.proc.pid)
    peer = RawPeer(daemon.socket, timeout=20)
    big = b"x" * (6 << 20)
    for n in range(20):  # 120 MiB of parameters, each waiting 60 s
        peer.send([wire.REQUEST, n, "ping", [{"delay_ms": 60_000, "data": big}]])
    refused = [peer.recv(20) for _ in range(10)]  # past 64 MiB: answered at once
    assert {r[2]["code"] for r in refused} == {Codes.OVER_BUDGET}
    held = _held(daemon)["inflight"]
    peak = rss_kb(daemon.proc.pid)
    peer.close()
    wait_until(lambda: _held(daemon)["inflight"] < 64 * KIB, 10, "the handlers cancelled")
    after = rss_kb(daemon.proc.pid)
    print(
        f"\n20 x 6 MiB requests: {len(refused)} refused, {held / 2**20:.1f} MiB held in flight;"
        f" RSS {baseline / 1024:.1f} -> {peak / 1024:.1f} -> {after / 1024:.1f} MiB after leaving"
    )
    assert held <= 64 << 20
    assert _status(daemon)["requests_cancelled_on_disconnect"] == 10
    assert after - baseline < 48 * 1024  # KiB: what the handlers held is gone


# --- connections per uid -----------------------------------------------------------------------


@needs_root
def test_a_flood_of_connections_from_another_uid_is_bounded_per_uid(start: Start) -> None:
    daemon = start(config=f"socket:\n  group: {NOGROUP.gr_name}\n")  # default: 64 per uid
    os.chmod(daemon.socket.parent, 0o755)
    with hold_connections_as(NOBODY.pw_uid, NOBODY.pw_gid, daemon.socket, 300) as flood:
        assert (flood.admitted, flood.refused) == (64, 236)
        assert flood.codes == [Codes.TOO_MANY_CONNECTIONS]
        assert _status(daemon)["connections_by_uid"][str(NOBODY.pw_uid)] == 64
        owners = [daemon.client() for _ in range(20)]
        assert all(c.call("ping")["pong"] for c in owners)
    for client in owners:
        client.close()
    wait_until(
        lambda: str(NOBODY.pw_uid) not in _status(daemon)["connections_by_uid"],
        10,
        "the flood's connections to be gone",
    )


@needs_root
def test_the_last_connection_slots_are_kept_for_the_owner(start: Start) -> None:
    daemon = start(
        config=f"socket:\n  group: {NOGROUP.gr_name}\n"
        "limits:\n  max_connections: 120\n  max_connections_per_uid: 0\n"
        "  owner_reserved_connections: 20\n"
    )
    os.chmod(daemon.socket.parent, 0o755)
    with hold_connections_as(NOBODY.pw_uid, NOBODY.pw_gid, daemon.socket, 200) as flood:
        assert flood.admitted == 100 and flood.refused == 100
        owners = [daemon.client() for _ in range(19)]  # +1 for each status call below
        assert all(c.call("ping")["pong"] for c in owners)
        assert _status(daemon)["connections"] == 120
    for client in owners:
        client.close()


# --- timeouts ----------------------------------------------------------------------------------


def test_a_stalled_partial_message_is_closed_after_frame_timeout(start: Start) -> None:
    daemon = start(config="limits:\n  frame_timeout: 0.3\n")
    stalled = RawPeer(daemon.socket, timeout=10)
    stalled.send_bytes(_half_frame(1000))
    notice = stalled.recv(10)
    assert notice[0] == wire.NOTIFICATION and notice[1] == "hermes.error"
    assert notice[2][0]["code"] == Codes.TIMEOUT
    assert "partial message" in notice[2][0]["message"]
    assert stalled.closed_by_peer(10)
    status = _status(daemon)
    assert status["connections_expired"] == {"partial_message": 1}
    assert status["budgets"]["input"]["held"] < KIB  # what is left: this status request


def test_an_idle_connection_is_closed_but_attached_and_waiting_ones_stay(start: Start) -> None:
    daemon = start(config="limits:\n  idle_timeout: 0.3\n")
    attached = daemon.client()
    sid = attached.call("session.create")["id"]  # attaches
    waiting = RawPeer(daemon.socket, timeout=10)
    waiting.send([wire.REQUEST, 1, "ping", [{"delay_ms": 60_000}]])
    wait_until(lambda: _status(daemon)["requests_in_flight"] == 1, 10, "the ping in flight")
    idle = RawPeer(daemon.socket, timeout=10)  # opened last: the others are older
    notice = idle.recv(10)
    assert notice[2][0]["code"] == Codes.TIMEOUT and "idle" in notice[2][0]["message"]
    assert idle.closed_by_peer(10)
    # idle_timeout has passed for the older two as well; they are still served
    assert attached.call("session.get", {"session_id": sid})["attached"] == 1
    assert waiting.request(2, "ping")[3]["pong"]
    assert _status(daemon)["connections_expired"].get("idle", 0) >= 1


# --- memory budgets ----------------------------------------------------------------------------


def test_partial_messages_past_the_uid_budget_close_that_connection_only(start: Start) -> None:
    daemon = start(config=f"limits:\n  input_per_uid: {1600 * KIB}\n")
    first = RawPeer(daemon.socket, timeout=10)
    first.send_bytes(_half_frame(1200 * KIB))  # 600 KiB waiting for the rest
    wait_until(lambda: _held(daemon)["input"] >= 600 * KIB, 10, "the first half to be held")
    second = RawPeer(daemon.socket, timeout=10)
    with contextlib.suppress(BrokenPipeError):  # closed before it finished sending
        second.send_bytes(_half_frame(2400 * KIB))
    notice = second.recv(10)
    assert notice[2][0]["code"] == Codes.OVER_BUDGET
    assert notice[2][0]["data"] == {"budget": "input"}
    assert second.closed_by_peer(10)
    first.send_bytes(
        msgpack.packb(
            [wire.REQUEST, 1, "ping", [{"data": b"x" * (1200 * KIB)}]], use_bin_type=True
        )[len(_half_frame(1200 * KIB)) :]
    )
    assert first.recv(10)[3]["data"] == b"x" * (1200 * KIB)
    budget = _status(daemon)["budgets"]["input"]
    assert budget["held"] < KIB and budget["refused"] == 1


def test_requests_in_flight_past_the_budget_get_a_structured_error(start: Start) -> None:
    daemon = start(config=f"limits:\n  inflight_per_uid: {1024 * KIB}\n")
    peer = RawPeer(daemon.socket, timeout=10)
    big = b"x" * (600 * KIB)
    peer.send([wire.REQUEST, 1, "ping", [{"delay_ms": 60_000, "data": big}]])
    peer.send([wire.REQUEST, 2, "ping", [{"delay_ms": 60_000, "data": big}]])
    refused = peer.recv(10)
    assert refused[1] == 2 and refused[2]["code"] == Codes.OVER_BUDGET
    assert refused[2]["data"]["budget"] == "inflight" and refused[2]["data"]["scope"] == "uid"
    assert peer.request(3, "ping", [{"data": "small"}])[3]["data"] == "small"
    peer.close()
    wait_until(lambda: _held(daemon)["inflight"] < 64 * KIB, 10, "the budget to be given back")


def test_a_slow_reader_past_the_output_budget_is_dropped_and_others_are_served(
    start: Start,
) -> None:
    daemon = start(config=f"limits:\n  output_total: {1024 * KIB}\n")
    reader = RawPeer(daemon.socket, timeout=10)
    payload = b"x" * (256 * KIB)
    with contextlib.suppress(BrokenPipeError):  # dropped before it finished sending
        for n in range(24):  # 6 MiB of answers it never reads
            reader.send([wire.REQUEST, n, "ping", [{"data": payload}]])
    wait_until(
        lambda: _status(daemon)["budgets"]["output"]["refused"] >= 1, 20, "the reader dropped"
    )
    assert reader.closed_by_peer(10)
    assert daemon.call("ping", {"data": "still here"})["data"] == "still here"
    assert _held(daemon)["output"] < 64 * KIB
    assert "not reading its messages" in daemon.log()


def test_a_client_waiting_for_an_approval_is_not_idle(start: Start) -> None:
    daemon = start(config="limits:\n  idle_timeout: 0.3\nterminal:\n  cwd: /tmp\n")
    target = short_tmpdir("pb-")
    caller, _ = client_answering(daemon, None)  # its own prompt declines to answer
    with caller:
        running = Background(terminal, caller, f"rm -r {target}")
        approval = wait_pending(daemon)[0]["id"]
        idle = RawPeer(daemon.socket, timeout=10)  # opened after the caller went quiet
        assert idle.closed_by_peer(10)
        with daemon.client() as owner:
            owner.call("approvals.respond", {"id": approval, "choice": "deny"})
        assert "denied by user" in running.result()["error"]
        assert caller.call("ping")["pong"]
    assert target.exists()
