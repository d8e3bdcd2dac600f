"""A chat turn: whole ``hermesctl chat -m``, daemon overhead per model round, 100 sessions at once.

(a) ``hermesctl chat -m "What is 15 * 23?"`` (one ``calculate`` call, two model rounds) as a
    whole process against a running hermesd, vs the reference Hermes Agent (``hermes -z`` from
    ``pip install hermes-agent==0.19.0`` in a throwaway venv outside the repository, REF_VENV,
    default /tmp/refvenv) doing the same turn against the same scripted model server at zero
    latency with the same calculator plugin; interleaved A/B/B/A. Guard: ≥ 25× faster.
(b) Daemon-side overhead per model round with 20 plugins loaded that each register a
    ``pre_llm_call`` and a ``post_tool_call`` hook (and without them), timed from outside with
    one clock (``time.monotonic``, shared by every process): round 1 = client sends
    ``session.send`` → the model server receives the request; round 2 = the model's response
    ends → the next request arrives (the ``calculate`` tool and its hooks included, nothing
    subtracted). Guard: p50 ≤ 2 ms.
(c) 100 sessions × 5 turns at once on one connection, each turn two model rounds with 100 ms
    model latency: total wall vs the ideal 5 × 2 × 100 ms (guard ≤ 1.6×), hermesd's CPU per
    round and the turn latency. The model stand-in runs on one asyncio loop in its own process.

``--versus DIR`` also measures (b) and (c) on the hermesd tree in DIR (a worktree of another
commit, say), interleaved with this one, to show what a change costs; such a run prints its
figures and writes nothing.

    python bench/turn.py [--quick] [--no-write] [--ref-runs N] [--c-runs N] [--versus DIR]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import (
    REPO,
    SOURCE,
    clean_env,
    cpu_seconds,
    interleaved,
    machine,
    median,
    percentile,
    scratch_dir,
    stop_process,
)

from hermesctl.client import Client
from tests.support.daemon import DaemonProcess, start_daemon
from tests.support.modelserver import ScriptedModelServer, calculator_rules

PROMPT = "What is 15 * 23?"
REF_VENV = Path(os.environ.get("REF_VENV", "/tmp/refvenv"))
CALCULATOR = REPO / "plugins" / "calculator"
HOOK_PLUGINS = 20
HOOK_PLUGIN = """\
def _context(user_message, **kwargs):
    return None


def _after_tool(tool_name, result, **kwargs):
    return None


def register(ctx):
    ctx.register_hook("pre_llm_call", _context)
    ctx.register_hook("post_tool_call", _after_tool)
"""
# the guards of issue 17
SPEEDUP_AT_LEAST = 25.0
OVERHEAD_AT_MOST_MS = 2.0
WALL_AT_MOST = 1.6


def model_config(url: str) -> str:
    return f"model:\n  provider: custom\n  base_url: {url}\n  default: scripted-model\n"


def start(url: str, hook_plugins: int = 0, source: Path = SOURCE) -> DaemonProcess:
    """A daemon of the tree ``source`` on ``url``; ``hook_plugins`` plugins each register
    pre_llm_call + post_tool_call."""
    home = None
    if hook_plugins:
        home = scratch_dir("hbh-")
        for i in range(hook_plugins):
            folder = home / "plugins" / f"hook{i:02d}"
            folder.mkdir(parents=True)
            (folder / "plugin.yaml").write_text(f"name: hook{i:02d}\nversion: 1.0.0\n")
            (folder / "__init__.py").write_text(HOOK_PLUGIN)
    return start_daemon(home, config=model_config(url), env={"PYTHONPATH": str(source)})


def run_timed(argv: list[str], env: dict[str, str], cwd: Path, expect: str) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    elapsed = time.perf_counter() - t0
    if done.returncode != 0 or expect not in done.stdout:
        raise RuntimeError(
            f"{argv[:3]} exited {done.returncode}; stdout {done.stdout[-500:]!r}"
            f" stderr {done.stderr[-2000:]!r}"
        )
    return elapsed


def follow(c: Client, sids: set[str]) -> None:
    """Wait until every session in ``sids`` has finished a turn."""
    left = set(sids)
    while left:
        note = c.next_notification(timeout=60)
        if note is None:
            raise RuntimeError("turns stopped progressing")
        ev = note.params[0] if note.params else {}
        if ev.get("type") == "turn.finished":
            left.discard(ev.get("session_id"))


# --- (a) whole process vs the reference ------------------------------------------------------


def reference_home(url: str) -> Path:
    home = scratch_dir("href-")
    (home / "plugins").mkdir()
    shutil.copytree(
        CALCULATOR, home / "plugins" / "calculator", ignore=shutil.ignore_patterns("__pycache__")
    )
    (home / "config.yaml").write_text(model_config(url) + "plugins:\n  enabled: [calculator]\n")
    return home


def bench_whole_process(url: str, rounds: int, ref_rounds: int) -> dict[str, Any]:
    d = start(url)
    scratch = scratch_dir("hbt-")
    ours = [sys.executable, "-m", "hermesctl", "--socket", str(d.socket), "chat", "-m", PROMPT]
    ours_env = clean_env({"PYTHONPATH": str(SOURCE)})
    hermes = REF_VENV / "bin" / "hermes"
    out: dict[str, Any] = {"ours": [], "ref": [], "ref_error": None}
    try:
        for _ in range(2):  # warm: page cache, .pyc files, the daemon's lazy openai import
            run_timed(ours, ours_env, scratch, "345")
        ref_env = None
        if not hermes.exists():
            out["ref_error"] = f"{hermes} does not exist (pip install hermes-agent==0.19.0 there)"
        else:
            ref_env = clean_env({"HERMES_HOME": str(reference_home(url))})
            try:
                run_timed([str(hermes), "-z", PROMPT], ref_env, scratch, "345")
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                out["ref_error"] = str(exc)
                ref_env = None
        for name in interleaved(max(rounds, ref_rounds), ["ours", "ref"]):
            if name == "ours" and len(out["ours"]) < rounds:
                out["ours"].append(run_timed(ours, ours_env, scratch, "345"))
            elif name == "ref" and ref_env is not None and len(out["ref"]) < ref_rounds:
                out["ref"].append(run_timed([str(hermes), "-z", PROMPT], ref_env, scratch, "345"))
    finally:
        d.stop()
    return out


# --- (b) daemon overhead per model round -------------------------------------------------------


def bench_overhead(turns: int, hook_plugins: int = 0, source: Path = SOURCE) -> dict[str, Any]:
    first: list[float] = []
    second: list[float] = []
    with ScriptedModelServer(rules=calculator_rules) as server:
        d = start(server.url, hook_plugins, source)
        try:
            with Client.connect(d.socket, hello=True) as c:
                loaded = [
                    p
                    for p in c.call("plugins.list")["plugins"]
                    if str(p.get("name", "")).startswith("hook") and p.get("state") == "loaded"
                ]
                if len(loaded) != hook_plugins:
                    raise RuntimeError(f"{len(loaded)} of {hook_plugins} hook plugins loaded")
                for i in range(turns + 5):
                    sid = c.call("session.create")["id"]
                    n = len(server.request_times)
                    sent = time.monotonic()
                    c.call("session.send", {"session_id": sid, "message": PROMPT})
                    follow(c, {sid})
                    if i < 5:  # warm-up
                        continue
                    arrivals = server.request_times[n : n + 2]
                    ends = server.response_end_times[n : n + 2]
                    first.append((arrivals[0] - sent) * 1000)
                    second.append((arrivals[1] - ends[0]) * 1000)
        finally:
            d.stop()
    return {"first": first, "second": second}


# --- (c) 100 sessions × 5 turns ---------------------------------------------------------------


def bench_concurrent(
    sessions: int, turns: int, latency: float, source: Path = SOURCE
) -> dict[str, Any]:
    """``sessions`` × ``turns`` at once against the asyncio model stand-in (own process)."""
    argv = [sys.executable, "-m", "tests.support.modelserver", "--engine", "asyncio"]
    argv += ["--port", "0", "--script", "rules", "--latency", str(latency)]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env=clean_env({"PYTHONPATH": str(REPO)}),
    )
    try:
        assert proc.stdout is not None
        d = start(proc.stdout.readline().strip(), source=source)
        try:
            with Client.connect(d.socket, hello=True, timeout=60) as c:
                # outside the measurement: lazy imports, worker threads, kept-alive connections
                warm = [c.call("session.create")["id"] for _ in range(16)]
                for sid in warm:
                    c.send("session.send", {"session_id": sid, "message": PROMPT})
                follow(c, set(warm))
                sids = [c.call("session.create")["id"] for _ in range(sessions)]
                done = dict.fromkeys(sids, 0)
                sent_at: dict[str, float] = {}
                latencies: list[float] = []
                failed = 0
                cpu0 = cpu_seconds(d.proc.pid)
                t0 = time.monotonic()
                for sid in sids:
                    sent_at[sid] = time.monotonic()
                    c.send("session.send", {"session_id": sid, "message": PROMPT})
                remaining = sessions
                while remaining:
                    note = c.next_notification(timeout=60)
                    if note is None:
                        raise RuntimeError("turns stopped progressing")
                    ev = note.params[0] if note.params else {}
                    if ev.get("type") != "turn.finished" or ev.get("session_id") not in done:
                        continue
                    sid = ev["session_id"]
                    latencies.append((time.monotonic() - sent_at[sid]) * 1000)
                    failed += ev["status"] != "completed"
                    done[sid] += 1
                    if done[sid] < turns:
                        sent_at[sid] = time.monotonic()
                        c.send("session.send", {"session_id": sid, "message": PROMPT})
                    else:
                        remaining -= 1
                wall = time.monotonic() - t0
                cpu = cpu_seconds(d.proc.pid) - cpu0
        finally:
            d.stop()
    finally:
        stop_process(proc)
    rounds = sessions * turns * 2
    return {
        "ratio": wall / (turns * 2 * latency),
        "wall": wall,
        "cpu_per_round_ms": cpu * 1000 / rounds,
        "latencies": latencies,
        "failed": failed,
    }


# --- report ------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report_a(whole: dict[str, Any]) -> list[str]:
    ours_ms = median(whole["ours"]) * 1000
    lines = [
        "**(a) One turn with one tool call, whole process** (`hermesctl chat -m "
        f'"{PROMPT}"` against a running hermesd vs the reference `hermes -z "{PROMPT}"`,'
        " hermes-agent 0.19.0 with `model.provider: custom`; same scripted model server at "
        f"zero latency, same calculator plugin; interleaved, {len(whole['ours'])} + "
        f"{len(whole['ref'])} runs after warm-up).",
        "",
        "| command | median | min | max |",
        "|---|---|---|---|",
        f"| `hermesctl chat -m` | {ours_ms:.0f} ms | {min(whole['ours']) * 1000:.0f} ms | "
        f"{max(whole['ours']) * 1000:.0f} ms |",
    ]
    if not whole["ref"]:
        return [*lines, "", f"Reference not measured: {whole['ref_error']}"]
    ref_ms = median(whole["ref"]) * 1000
    speedup = ref_ms / ours_ms
    return [
        *lines,
        f"| `hermes -z` (reference) | {ref_ms:.0f} ms | {min(whole['ref']) * 1000:.0f} ms | "
        f"{max(whole['ref']) * 1000:.0f} ms |",
        "",
        f"hermesctl is **{speedup:.1f}× faster** (guard ≥ {SPEEDUP_AT_LEAST:g}×: "
        f"{verdict(speedup >= SPEEDUP_AT_LEAST)}). The daemon is already running; its start-up "
        "is not part of a turn.",
    ]


def report_b(overhead: dict[int, dict[str, Any]]) -> list[str]:
    runs = len(overhead[HOOK_PLUGINS]["first"])
    lines = [
        f"**(b) Daemon-side overhead per model round** with {HOOK_PLUGINS} plugins loaded that "
        "each register a `pre_llm_call` and a `post_tool_call` hook (plain sync functions), "
        f"and without them; {runs} turns, each in a new session, after 5 warm-up turns; one "
        "monotonic clock across processes. Round 1: the client sends `session.send` → the "
        "model request arrives (socket hop, storing the user message, `pre_llm_call`, building "
        "and sending the request). Round 2: the model's answer ends → the next request arrives "
        "(reading the stream's end, storing the answer, the `calculate` tool itself with its "
        "`post_tool_call` hooks, storing the result, the next request). Both include the HTTP "
        "hop and the model server reading the request.",
        "",
        "| interval | plugins | p50 | p90 | p99 |",
        "|---|---|---|---|---|",
    ]
    for n, found in overhead.items():
        for key, name in (("first", "round 1"), ("second", "round 2")):
            v = found[key]
            lines.append(
                f"| {name} | {n} | {median(v):.2f} ms | {percentile(v, 90):.2f} ms | "
                f"{percentile(v, 99):.2f} ms |"
            )
    worst = max(median(overhead[HOOK_PLUGINS][k]) for k in ("first", "second"))
    return [
        *lines,
        "",
        f"Guard p50 ≤ {OVERHEAD_AT_MOST_MS:g} ms per round with {HOOK_PLUGINS} plugins: "
        f"{verdict(worst <= OVERHEAD_AT_MOST_MS)} (the slower round: {worst:.2f} ms).",
    ]


def report_c(runs: list[dict[str, Any]]) -> list[str]:
    ratios = sorted(r["ratio"] for r in runs)
    mid = sorted(runs, key=lambda r: r["ratio"])[len(runs) // 2]
    every = [x for r in runs for x in r["latencies"]]
    failed = sum(r["failed"] for r in runs)
    return [
        "**(c) 100 sessions × 5 turns at once**, one connection, each turn two model rounds "
        "(a `calculate` call, then the answer) at 100 ms model latency; ideal 1000 ms "
        "(5 × 2 × 100 ms). Before each run 16 one-turn sessions at once warm the daemon "
        "(imports, worker threads, kept-alive model connections). The model stand-in is "
        "`tests.support.modelserver_async` in its own process, sharing the machine's CPUs with "
        f"hermesd and the client. {len(runs)} runs, {failed} failed turns.",
        "",
        "| wall / ideal (each run) | median wall | hermesd CPU per round (median run) | "
        "turn p50 | turn p99 |",
        "|---|---|---|---|---|",
        f"| {', '.join(f'{x:.2f}×' for x in ratios)} | {mid['wall'] * 1000:.0f} ms | "
        f"{mid['cpu_per_round_ms']:.2f} ms | {median(every):.0f} ms | "
        f"{percentile(every, 99):.0f} ms |",
        "",
        f"Guard ≤ {WALL_AT_MOST:g}× the ideal (median run): "
        f"{verdict(mid['ratio'] <= WALL_AT_MOST)}.",
    ]


def report_versus(
    versus: Path, overhead: dict[str, list[dict[str, Any]]], conc: dict[str, list[dict[str, Any]]]
) -> list[str]:
    lines = [
        f"**This tree vs {versus}**, interleaved: (b) with {HOOK_PLUGINS} hook plugins, "
        "medians of each run; (c) each run.",
        "",
        "| tree | (b) round 1 p50 | (b) round 2 p50 | (c) wall / ideal | (c) CPU per round |",
        "|---|---|---|---|---|",
    ]

    def each(values: list[float], unit: str) -> str:
        return ", ".join(f"{v:.2f}" for v in values) + unit

    for name in ("this", "versus"):
        b, c = overhead[name], conc[name]
        lines.append(
            f"| {name} | {each([median(r['first']) for r in b], ' ms')} | "
            f"{each([median(r['second']) for r in b], ' ms')} | "
            f"{each([r['ratio'] for r in c], '×')} | "
            f"{each([r['cpu_per_round_ms'] for r in c], ' ms')} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    parser.add_argument("--ref-runs", type=int, default=None, help="reference runs (default 5)")
    parser.add_argument("--c-runs", type=int, default=None, help="runs of (c) (default 3)")
    parser.add_argument(
        "--versus", type=Path, help="also measure (b) and (c) on the hermesd tree in this directory"
    )
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
    machine_line = machine()
    quick = args.quick
    ref_runs = args.ref_runs if args.ref_runs is not None else (2 if quick else 5)
    c_runs = args.c_runs if args.c_runs is not None else (1 if quick else 3)
    sessions = 20 if quick else 100
    b_turns = 20 if quick else 200

    if args.versus:
        args.no_write = True
        trees = {"this": SOURCE, "versus": args.versus.resolve()}
        b_runs: dict[str, list[dict[str, Any]]] = {"this": [], "versus": []}
        c_found: dict[str, list[dict[str, Any]]] = {"this": [], "versus": []}
        for name in interleaved(c_runs, list(trees)):
            b_runs[name].append(bench_overhead(b_turns // 2, HOOK_PLUGINS, trees[name]))
            c_found[name].append(bench_concurrent(sessions, 5, 0.1, trees[name]))
            print(f"{name}: (c) {c_found[name][-1]['ratio']:.2f}×", flush=True)
        body = "\n".join(report_versus(args.versus, b_runs, c_found))
        common.publish(args, "turn-versus", "", body, started, machine_line)
        return 0

    with ScriptedModelServer(rules=calculator_rules) as server:
        whole = bench_whole_process(server.url, 4 if quick else 20, ref_runs)
    overhead = {n: bench_overhead(b_turns, n) for n in (HOOK_PLUGINS, 0)}
    conc = [bench_concurrent(sessions, 5, 0.1) for _ in range(c_runs)]
    body = "\n".join([*report_a(whole), "", *report_b(overhead), "", *report_c(conc)])
    common.publish(
        args,
        "turn",
        "A chat turn: hermesctl chat, per-round overhead, 100 sessions",
        body,
        started,
        machine_line,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
