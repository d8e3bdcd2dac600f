#!/usr/bin/env python3
"""Sub-agents (``delegate_task``): spawning a child, and 20 children at once, beside the same
work done as top-level sessions.

**Spawn**: a parent's model calls ``delegate_task`` for one task; timed from outside with one
clock (``time.monotonic``, shared by every process): the model's delegating response ends →
the child's first model request arrives (the tool call, the child session's creation, its
hooks and the start of its turn). Beside it, a top-level session: ``session.create`` sent →
its first model request arrives (``session.send`` included). Zero model latency.

**Fan-out**: 20 children in one batch (``delegation.max_concurrent_children: 20``), each one
model round at 100 ms model latency: the delegation window (the delegating response ends →
the parent's next request arrives) against the ideal 100 ms. Beside it, 20 top-level sessions
created and sent at once on one connection: the first ``session.create`` sent → the last
``turn.finished`` received, against the same ideal.

    python bench/subagents.py [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import median, percentile

from hermesctl.client import Client
from tests.support.daemon import DaemonProcess, follow_turn, start_daemon
from tests.support.modelserver import ScriptedModelServer, Step, call_tools, reply, tool_call

CHILDREN = 20
LATENCY = 0.1


def rules(request: dict[str, Any]) -> Step:
    """A parent delegates what its message names; anyone else answers at once."""
    last = request["messages"][-1]
    content = str(last.get("content") or "")
    if last["role"] == "user" and content.startswith("DELEGATE "):
        return call_tools(tool_call("delegate_task", json.loads(content[9:])))
    return reply("ok")


def _config(model: ScriptedModelServer) -> str:
    return (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        f"delegation:\n  max_concurrent_children: {CHILDREN}\n"
    )


def _parent_round(model: ScriptedModelServer, start: int) -> tuple[float, float]:
    """(the delegating response's end, the parent's next request) after request ``start``."""
    delegating = next(
        i
        for i in range(start, len(model.requests))
        if str(model.requests[i]["messages"][-1].get("content") or "").startswith("DELEGATE")
    )
    after = next(
        i
        for i in range(delegating + 1, len(model.requests))
        if model.requests[i]["messages"][-1]["role"] == "tool"
    )
    return model.response_end_times[delegating], model.request_times[after]


def _first_child_request(model: ScriptedModelServer, start: int) -> float:
    return next(
        model.request_times[i]
        for i in range(start, len(model.requests))
        if "You are a sub-agent" in str(model.requests[i]["messages"][1].get("content") or "")
    )


def delegated(client: Client, model: ScriptedModelServer, tasks: int) -> tuple[float, float]:
    """One delegation of ``tasks`` tasks: (spawn seconds, delegation window seconds)."""
    sid = client.call("session.create")["id"]
    client.call("session.attach", {"session_id": sid})
    start = len(model.requests)
    args = {"tasks": [{"goal": f"task {i}"} for i in range(tasks)]}
    turn = client.call(
        "session.send", {"session_id": sid, "message": "DELEGATE " + json.dumps(args)}
    )
    follow_turn(client, turn["turn_id"], timeout=120)
    ended, resumed = _parent_round(model, start)
    return _first_child_request(model, start) - ended, resumed - ended


def top_level_spawn(client: Client, model: ScriptedModelServer) -> float:
    """``session.create`` sent → that session's first model request."""
    start = len(model.requests)
    sent = time.monotonic()
    sid = client.call("session.create")["id"]
    client.call("session.attach", {"session_id": sid})
    turn = client.call("session.send", {"session_id": sid, "message": "hello"})
    follow_turn(client, turn["turn_id"], timeout=60)
    return model.request_times[start] - sent


def top_level_fan_out(client: Client) -> float:
    """20 sessions created and sent at once: first create sent → last turn.finished."""
    sent = time.monotonic()
    sids = [client.call("session.create")["id"] for _ in range(CHILDREN)]
    turns = set()
    for sid in sids:
        client.call("session.attach", {"session_id": sid})
        turns.add(client.call("session.send", {"session_id": sid, "message": "hi"})["turn_id"])
    while turns:
        note = client.next_notification(timeout=60)
        assert note is not None, "a top-level turn did not finish"
        event = note.params[0] if note.method == "session.event" else {}
        if event.get("type") == "turn.finished":
            turns.discard(event.get("turn_id"))
    return time.monotonic() - sent


def measure(rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {k: [] for k in ("spawn", "top_spawn", "fan", "top_fan")}
    with ScriptedModelServer(rules=rules) as fast:
        daemon: DaemonProcess = start_daemon(config=_config(fast))
        try:
            with daemon.client(timeout=60) as client:
                delegated(client, fast, 1)  # warm up: the model SDK, the first turn
                top_level_spawn(client, fast)
                for _ in range(rounds):
                    samples["spawn"].append(delegated(client, fast, 1)[0])
                    samples["top_spawn"].append(top_level_spawn(client, fast))
        finally:
            daemon.stop()
    with ScriptedModelServer(rules=rules, latency=LATENCY) as slow:
        daemon = start_daemon(config=_config(slow))
        try:
            with daemon.client(timeout=60) as client:
                delegated(client, slow, 2)
                for _ in range(max(1, rounds // 4)):
                    samples["fan"].append(delegated(client, slow, CHILDREN)[1])
                    samples["top_fan"].append(top_level_fan_out(client))
        finally:
            daemon.stop()
    return samples


def report(samples: dict[str, list[float]], rounds: int) -> str:
    ms = 1000.0

    def row(name: str, key: str, ideal: float | None = None) -> str:
        values = samples[key]
        p50 = median(values)
        ratio = f"{p50 / ideal:.2f}×" if ideal else "–"
        return (
            f"| {name} | {p50 * ms:.1f} ms | {percentile(values, 90) * ms:.1f} ms | "
            f"{ratio} | {len(values)} |"
        )

    return (
        textwrap.dedent(
            f"""\
        | what | p50 | p90 | vs ideal | runs |
        |---|---|---|---|---|
        {row("spawn: delegating response ends → child's first request", "spawn")}
        {row("top-level: session.create sent → first request", "top_spawn")}
        {row(f"{CHILDREN} children, 1 round each at 100 ms (ideal 100 ms)", "fan", LATENCY)}
        {row(f"{CHILDREN} top-level sessions, same work (ideal 100 ms)", "top_fan", LATENCY)}
        """
        )
        + f"\n{rounds} spawn rounds; the fan-out rows are the delegation window and the wall.\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    rounds = 4 if args.quick else 20
    started, machine_line = common.now_utc(), common.machine()
    body = report(measure(rounds), rounds)
    common.publish(args, "subagents", "Sub-agents: spawn and fan-out", body, started, machine_line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
