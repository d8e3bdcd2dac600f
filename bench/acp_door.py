"""Turn overhead through the ACP bridge (``hermesctl acp``) versus the msgpack socket.

One hermesd and a scripted model answering at once (in its own process). One bridge process
is spawned with the ACP SDK's client side (``acp.spawn_agent_process``, as an editor would) and
kept for the run. Each round opens a fresh session outside the timing, then times one turn,
interleaved socket/ACP/ACP/socket…: over the socket ``session.send`` with ``wait: true`` on
one connection; over ACP ``session/prompt`` until its answer (the bridge sends the turn and
streams its updates back). The figure is the p50 added per turn by ACP (guard: ≤ 2 ms).

    python bench/acp_door.py [--quick] [--no-write] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import interleaved, machine, median, percentile

from tests.support.daemon import DaemonProcess, checkout_pythonpath, start_daemon


class Editor:
    """The editor's side of the bench: takes updates, never asked for permission here."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        """Updates stream in during a prompt; the bench only waits for the answer."""

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the bench's turns call no tool")


async def rounds_of(daemon: DaemonProcess, rounds: int) -> dict[str, list[float]]:
    import acp

    times: dict[str, list[float]] = {"socket": [], "acp": []}
    env = {"PYTHONPATH": checkout_pythonpath(None), "PATH": "/usr/bin:/bin"}
    argv = ["-m", "hermesctl", "--socket", str(daemon.socket), "acp"]
    async with acp.spawn_agent_process(Editor(), sys.executable, *argv, env=env) as (conn, _):  # type: ignore[arg-type]
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        with daemon.client() as c:
            for door in interleaved(rounds, ["socket", "acp"]):
                if door == "socket":
                    sid = c.call("session.create", {"attach": False})["id"]
                    t0 = time.perf_counter()
                    params = {"session_id": sid, "message": "hi", "wait": True}
                    c.call("session.send", params, timeout=60)
                else:
                    session = await conn.new_session(cwd="/tmp", mcp_servers=[])
                    t0 = time.perf_counter()
                    await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("hi")])
                times[door].append((time.perf_counter() - t0) * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    rounds = 20 if args.quick else args.rounds
    started = common.now_utc()
    with common.instant_model() as url:
        daemon = start_daemon(config=common.model_config(url))
        try:
            asyncio.run(rounds_of(daemon, 5))  # warm both paths
            t = asyncio.run(rounds_of(daemon, rounds))
        finally:
            daemon.stop()
    sock50, acp50 = median(t["socket"]), median(t["acp"])
    body = (
        "| turn, waited for | p50 ms | p90 ms |\n|---|---|---|\n"
        f"| msgpack socket `session.send` | {sock50:.2f} | {percentile(t['socket'], 90):.2f} |\n"
        f"| ACP `session/prompt` through `hermesctl acp` | {acp50:.2f} "
        f"| {percentile(t['acp'], 90):.2f} |\n\n"
        f"ACP adds **{acp50 - sock50:+.2f} ms** p50 per turn ({rounds} rounds each, "
        f"interleaved; guard ≤ 2 ms: {'met' if acp50 - sock50 <= 2 else 'MISSED'}).\n"
    )
    common.publish(args, "acp", "ACP door: turn overhead", body, started, machine())
    return 0


if __name__ == "__main__":
    sys.exit(main())
