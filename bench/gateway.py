"""Chat users over Matrix versus the same turns over the socket: turn latency and daemon RSS.

A real synapse (tests/support/synapse.py) on 127.0.0.1, a scripted model answering after
``--model-ms`` (100 ms), and one hermesd whose gateway has a Matrix bot account. ``--users``
people (50) in ``--rooms`` rooms (20, two or three people each, all owners, one session each)
send ``--turns`` messages one after another, all people at once; a turn is timed from sending
the message to seeing the bot's answer in the room (each answer names its message). Then a
fresh hermesd without the gateway gets the same load over the msgpack socket (one connection
and session per person, ``session.send`` with ``wait``). RSS is the daemon's after its load.
The Matrix figure includes synapse (event persistence, the sync long-poll to both sides) on
the same machine: it is the turn a person sees, not the gateway's own cost. The echo bot row
(a bare client answering after the same delay, no hermesd) shows how much of it is synapse.
The same three doors are first measured with one person alone (``--solo-turns`` turns in a
direct chat), where nothing queues.

    python bench/gateway.py [--quick] [--no-write] [--users N] [--rooms N] [--turns N]
                            [--solo-turns N] [--model-ms MS]
"""

from __future__ import annotations

import argparse
import atexit
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import machine, median, percentile

from tests.support.daemon import DaemonProcess, remove_scratch_dirs, start_daemon
from tests.support.matrix_gateway import matrix_config, wait_connected
from tests.support.modelserver import ScriptedModelServer, model_config, reply
from tests.support.synapse import Homeserver, MatrixUser, synapse_python

_TAG = re.compile(r"tag-[0-9a-z-]+")


def _answer(request: dict[str, Any]) -> Any:
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    found = _TAG.search(str(users[-1].get("content"))) if users else None
    return reply(f"re {found.group(0) if found else 'none'}")


def rss_mib(daemon: DaemonProcess) -> float:
    for line in Path(f"/proc/{daemon.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _run_all(work: list[Any]) -> None:
    threads = [threading.Thread(target=fn, daemon=True) for fn in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)


def _rooms(
    people: list[MatrixUser], bot: MatrixUser, rooms: int, bot_joins: bool
) -> dict[str, str]:
    """Each person's room: ``rooms`` rooms of two or three people and the bot."""
    room_of: dict[str, str] = {}
    for r in range(rooms):
        members = people[r::rooms]
        room = members[0].create_room([bot.user_id, *(p.user_id for p in members[1:])])
        for p in members[1:]:
            p.join(room)
        if bot_joins:
            bot.join(room)
        deadline = time.monotonic() + 60
        while bot.user_id not in members[0].members(room):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the bot did not join {room}")
            time.sleep(0.1)
        room_of.update((p.user_id, room) for p in members)
    for p in people:
        p.sync(0)
    return room_of


def _chat(
    people: list[MatrixUser], room_of: dict[str, str], turns: int, bot: MatrixUser
) -> list[float]:
    """Every person sends ``turns`` messages one after another, all at once, each addressed to
    the bot (a group room answers only what mentions it); times in ms."""
    times: list[float] = []

    def person(p: MatrixUser) -> None:
        room = room_of[p.user_id]
        for i in range(turns):
            tag = f"tag-{p.user_id[1:].split(':')[0]}-{i}"
            t0 = time.perf_counter()
            p.send(room, f"{bot.user_id}: please answer {tag}")
            p.wait_for(room, lambda e, tag=tag: f"re {tag}" in e["content"].get("body", ""))
            times.append((time.perf_counter() - t0) * 1000)

    _run_all([lambda p=p: person(p) for p in people])
    return times


def matrix_phase(
    server: Homeserver, model: ScriptedModelServer, users: int, rooms: int, turns: int
) -> tuple[list[float], float]:
    """The people talk to hermesd's Matrix adapter."""
    bot = server.register()
    people = [server.register() for _ in range(users)]
    config = model_config(model.url) + matrix_config(
        server, bot, owners=[p.user_id for p in people]
    )
    daemon = start_daemon(config=config)
    try:
        wait_connected(daemon)
        times = _chat(people, _rooms(people, bot, rooms, bot_joins=False), turns, bot)
        rss = rss_mib(daemon)
    finally:
        daemon.stop()
    return times, rss


def echo_phase(
    server: Homeserver, users: int, rooms: int, turns: int, model_s: float
) -> list[float]:
    """The same people talk to a bare echo bot (a plain client answering after the model's
    delay): what synapse and the clients cost without hermesd."""
    bot = server.register()
    people = [server.register() for _ in range(users)]
    room_of = _rooms(people, bot, rooms, bot_joins=True)
    bot.sync(0)
    stop = threading.Event()

    def answer(room: str, tag: str) -> None:
        time.sleep(model_s)
        bot.send(room, f"re {tag}")

    def echo() -> None:
        while not stop.is_set():
            bot.sync(timeout_ms=1000)
            while bot.seen:
                room, event = bot.seen.pop(0)
                found = _TAG.search(str(event["content"].get("body", "")))
                if found and event["sender"] != bot.user_id:
                    threading.Thread(target=answer, args=(room, found.group(0))).start()

    loop = threading.Thread(target=echo, daemon=True)
    loop.start()
    try:
        return _chat(people, room_of, turns, bot)
    finally:
        stop.set()
        loop.join(10)


def socket_phase(model: ScriptedModelServer, users: int, turns: int) -> tuple[list[float], float]:
    daemon = start_daemon(config=model_config(model.url))
    times: list[float] = []
    try:

        def person(n: int) -> None:
            with daemon.client(timeout=120) as c:
                sid = c.call("session.create", {"attach": False})["id"]
                for i in range(turns):
                    t0 = time.perf_counter()
                    params = {"session_id": sid, "message": f"please answer tag-s{n}-{i}"}
                    done = c.call("session.send", {**params, "wait": True}, timeout=120)
                    assert f"tag-s{n}-{i}" in str(done.get("final_text")), done
                    times.append((time.perf_counter() - t0) * 1000)

        _run_all([lambda n=n: person(n) for n in range(users)])
        rss = rss_mib(daemon)
    finally:
        daemon.stop()
    return times, rss


def run_phases(
    server: Homeserver, model_s: float, users: int, rooms: int, turns: int
) -> dict[str, tuple[list[float], float]]:
    """Matrix, echo bot and socket for one load; (times in ms, daemon RSS MiB) of each."""
    with ScriptedModelServer(rules=_answer, latency=model_s) as model:
        matrix = matrix_phase(server, model, users, rooms, turns)
        echo = echo_phase(server, users, rooms, turns, model_s)
        socket = socket_phase(model, users, turns)
    return {"matrix": matrix, "echo": (echo, 0.0), "socket": socket}


def table(runs: dict[str, tuple[list[float], float]], n: int) -> str:
    """The three doors side by side, and their ratios."""
    (mx, mx_rss), (echo, _), (so, so_rss) = runs["matrix"], runs["echo"], runs["socket"]

    def row(name: str, times: list[float], rss: str) -> str:
        p50, p95 = median(times), percentile(times, 95)
        return f"| {name} | {len(times)}/{n} | {p50:.0f} | {p95:.0f} | {rss} |\n"

    return (
        "| door | turns | p50 ms | p95 ms | daemon RSS MiB |\n|---|---|---|---|---|\n"
        + row("Matrix (through synapse)", mx, f"{mx_rss:.0f}")
        + row("Matrix, a bare echo bot instead of hermesd", echo, "–")
        + row("msgpack socket", so, f"{so_rss:.0f}")
        + f"\nMatrix / socket: p50 ×{median(mx) / median(so):.2f}, "
        f"p95 ×{percentile(mx, 95) / percentile(so, 95):.2f}, RSS ×{mx_rss / so_rss:.2f}; "
        f"Matrix / echo bot: p50 ×{median(mx) / median(echo):.2f}.\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--rooms", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--solo-turns", type=int, default=10)
    parser.add_argument("--model-ms", type=float, default=100.0)
    args = parser.parse_args()
    if args.quick:
        args.users, args.rooms, args.turns, args.solo_turns = 6, 3, 2, 3
    python = synapse_python()
    if python is None:
        print("matrix-synapse is not installed in .venv/synapse (scripts/bootstrap)")
        return 1
    started = common.now_utc()
    # the homeserver's, the daemons' and the token files' directories go when the run ends
    atexit.register(remove_scratch_dirs)
    server = Homeserver(python)
    server.start()
    model_s = args.model_ms / 1000
    try:
        solo = run_phases(server, model_s, 1, 1, args.solo_turns)
        load = run_phases(server, model_s, args.users, args.rooms, args.turns)
    finally:
        server.stop()
    body = (
        f"The model answers after {args.model_ms:.0f} ms.\n\n"
        f"One person alone in a direct chat, {args.solo_turns} turns one after another:\n\n"
        + table(solo, args.solo_turns)
        + f"\n{args.users} people in {args.rooms} rooms, {args.turns} turns each, all at once:\n\n"
        + table(load, args.users * args.turns)
    )
    common.publish(
        args, "gateway", "Gateway: Matrix chat users vs the socket", body, started, machine()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
