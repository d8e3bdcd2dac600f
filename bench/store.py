"""The session store at scale: 10,000 sessions and 1,000,000 messages, measured through hermesd.

Generates a ``state.db`` (cached in /tmp, keyed by schema version, generator version and size)
with synthetic chat text drawn from a Zipf-distributed vocabulary, so full-text search has very
common and very rare terms; one session holds 10,000 messages, the rest share the remainder.
Then a real hermesd opens a copy of it and, over its socket, against ``ping`` in the same run:

- ``session.list`` first page (50 sessions) p50, target ≤ 20 ms;
- ``session.search`` (FTS5) p50 on a common, a rare and a two-word term, target ≤ 20 ms;
- ``session.history`` of the 10,000-message session (newest 400, what the RPC gives a client);

and in this process, on the same file while the daemon runs: ``store.messages.history()`` of that
session, which is what a turn loads (never compacted here: every stored message; a compacted
session loads its view instead, bench/context.py), target ≤ 100 ms;
plus the database size per message and the daemon's start-up time on the big database.

    python bench/store.py [--quick] [--no-write] [--sessions N] [--messages N]

``--quick`` uses 1,000 sessions and 100,000 messages (a 1,000-message big session) and few
requests; the default is the full size (generation takes about a minute the first time).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import SOURCE, interleaved, machine, median, now_utc, percentile

from hermesd.store.dbfile import open_db_file
from hermesd.store.facade import SessionStore
from hermesd.store.migrations import MIGRATIONS
from hermesd.store.search import fts_query
from tests.support.daemon import short_tmpdir, start_daemon

GENERATOR = 1  # bump when the generated data changes
CACHE = Path(os.environ.get("BENCH_STORE_CACHE", "/tmp"))
VOCABULARY = 20_000
BIG_SESSION = "bench-big-session"
SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ner",
    "tu",
    "sa",
    "ve",
    "ri",
    "on",
    "da",
    "pe",
    "zu",
    "ti",
    "ma",
    "go",
    "ha",
    "el",
    "bi",
    "xo",
    "fa",
    "qui",
    "nu",
    "ro",
    "se",
)


def vocabulary(rng: random.Random, size: int) -> list[str]:
    """``size`` distinct pseudo-words, 2–4 syllables; rank 0 is the most frequent."""
    words: dict[str, None] = {}
    while len(words) < size:
        words["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


def cache_path(sessions: int, messages: int) -> Path:
    return CACHE / (f"hermesd-bench-store-s{len(MIGRATIONS)}-g{GENERATOR}-{sessions}x{messages}.db")


def generate(path: Path, sessions: int, messages: int, big: int) -> float:
    """Write the database at ``path`` in bulk transactions; returns seconds taken."""
    started = time.perf_counter()
    tmp = path.with_suffix(".tmp")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    open_db_file(tmp).close()  # the real schema, through the real migrations
    db = sqlite3.connect(tmp, isolation_level=None)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    rng = random.Random(9)
    words = vocabulary(rng, VOCABULARY)
    cum: list[float] = []
    total = 0.0
    for rank in range(1, len(words) + 1):
        total += 1.0 / rank
        cum.append(total)
    now = time.time()
    per_session = (messages - big) // max(1, sessions - 1)
    extra = (messages - big) - per_session * (sessions - 1)
    counts = [big] + [per_session + (1 if i < extra else 0) for i in range(sessions - 1)]
    db.execute("BEGIN")
    for n, count in enumerate(counts):
        sid = BIG_SESSION if n == 0 else f"bench-{n:06d}"
        created = now - 90 * 86400 * rng.random()
        updated = created + rng.random() * 3600
        db.execute(
            "INSERT INTO sessions (id, title, created_at, updated_at, model, platform,"
            " message_count, prompt_tokens, completion_tokens, total_tokens)"
            " VALUES (?, ?, ?, ?, 'bench-model', 'cli', ?, ?, ?, ?)",
            (
                sid,
                " ".join(rng.choices(words[:2000], k=5)),
                created,
                updated,
                count,
                count * 300,
                count * 80,
                count * 380,
            ),
        )
        rows = []
        text = rng.choices(words, cum_weights=cum, k=count * 24)
        lengths = rng.choices(range(4, 45), k=count)
        pos = 0
        seq = 0
        turn = 0
        while seq < count:
            turn += 1
            turn_id = f"turn-{n}-{turn}"
            # a turn: user, then either an answer, or a tool call, its result and an answer
            shape = (
                ("user", "assistant")
                if rng.random() < 0.6
                else ("user", "call", "tool", "assistant")
            )
            for role in shape:
                if seq >= count:
                    break
                seq += 1
                length = lengths[seq - 1]
                content = " ".join(text[pos : pos + length])
                pos = (pos + length) % max(1, len(text) - 45)
                calls = call_id = tool_name = None
                if role == "call":
                    role = "assistant"
                    call_id = f"call_{n}_{seq}"
                    arguments = json.dumps({"pattern": content[:30]})
                    calls = json.dumps(
                        [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": "search_files", "arguments": arguments},
                            }
                        ]
                    )
                    content = ""
                elif role == "tool":
                    call_id = f"call_{n}_{seq - 1}"
                    tool_name = "search_files"
                rows.append(
                    (
                        sid,
                        seq,
                        turn_id,
                        role,
                        content,
                        calls,
                        call_id if role == "tool" else None,
                        tool_name,
                        created + seq * 5.0,
                    )
                )
        db.executemany(
            "INSERT INTO messages (session_id, seq, turn_id, role, content, tool_calls,"
            " tool_call_id, tool_name, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        if n % 500 == 499:
            db.execute("COMMIT")
            db.execute("BEGIN")
    db.execute("COMMIT")
    # what the daemon's deferred indexing (hermesd.store.search) would do, as one rebuild (faster
    # in bulk)
    db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
    db.execute("DELETE FROM fts_pending")
    db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
    db.execute("PRAGMA journal_mode=WAL")
    db.close()
    tmp.replace(path)
    return time.perf_counter() - started


def terms(path: Path) -> dict[str, str]:
    """Search queries: the most common word, a word in about 100 messages, and both together."""
    rng = random.Random(9)
    words = vocabulary(rng, VOCABULARY)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:

        def hits(text: str) -> int:
            return int(
                db.execute(
                    "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?",
                    (fts_query(text),),
                ).fetchone()[0]
            )

        rare = words[-1]
        return {
            f"common (`{words[0]}`, {hits(words[0]):,} messages)": words[0],
            f"rare (`{rare}`, {hits(rare):,} messages)": rare,
            f"common + rare (`{words[0]} {rare}`)": f"{words[0]} {rare}",
            f"prefix (`{words[1][:3]}*`, {hits(words[1][:3] + '*'):,} messages)": words[1][:3]
            + "*",
        }
    finally:
        db.close()


def timed(client: Any, method: str, params: dict[str, Any] | None, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        client.call(method, params, timeout=60)
        out.append((time.perf_counter() - t) * 1000)
    return out


def measure(db_path: Path, rounds: int, per_round: int) -> dict[str, Any]:
    home = short_tmpdir("hbs-")
    shutil.copyfile(db_path, home / "state.db")
    os.chmod(home / "state.db", 0o600)
    results: dict[str, Any] = {}
    started = time.perf_counter()
    daemon = start_daemon(home, env={"PYTHONPATH": str(SOURCE)}, timeout=120)
    results["ready_ms"] = (time.perf_counter() - started) * 1000
    try:
        queries = terms(home / "state.db")
        cases: dict[str, tuple[str, dict[str, Any] | None]] = {
            "`ping`": ("ping", None),
            "`session.list` first page (50)": ("session.list", {}),
            "`session.list` page 20 (cursor)": ("session.list", {"before": None}),
        }
        for label, query in queries.items():
            cases[f"`session.search` {label}"] = ("session.search", {"query": query})
        cases["`session.history` of the 10,000-message session, newest 400"] = (
            "session.history",
            {"session_id": BIG_SESSION, "limit": 400},
        )
        samples: dict[str, list[float]] = {name: [] for name in cases}
        with daemon.client() as client:
            cursor = None
            for _ in range(19):
                cursor = client.call("session.list", {"before": cursor})["next_cursor"]
            cases["`session.list` page 20 (cursor)"] = ("session.list", {"before": cursor})
            for method, params in cases.values():  # warm the page cache
                client.call(method, params, timeout=60)
            for name in interleaved(rounds, list(cases)):
                method, params = cases[name]
                samples[name] += timed(client, method, params, per_round)
        store = SessionStore(home / "state.db")
        try:
            loads = []
            for _ in range(rounds * per_round):
                t = time.perf_counter()
                store.messages.history(BIG_SESSION)
                loads.append((time.perf_counter() - t) * 1000)
            results["history_len"] = len(store.messages.history(BIG_SESSION))
            results["big_count"] = store.sessions.get(BIG_SESSION)["message_count"]
        finally:
            store.close()
        results["samples"] = samples
        results["history_ms"] = loads
    finally:
        daemon.stop()
        shutil.rmtree(home, ignore_errors=True)
    return results


def sizes(path: Path) -> dict[str, int]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out = {
            "file": path.stat().st_size,
            "messages": int(db.execute("SELECT count(*) FROM messages").fetchone()[0]),
            "sessions": int(db.execute("SELECT count(*) FROM sessions").fetchone()[0]),
            "text": int(db.execute("SELECT sum(length(content)) FROM messages").fetchone()[0]),
        }
        try:
            for name, size in db.execute(
                "SELECT CASE WHEN name LIKE 'messages_fts%' THEN 'fts'"
                " ELSE name END, sum(pgsize) FROM dbstat GROUP BY 1"
            ):
                out[f"table:{name}"] = int(size)
        except sqlite3.OperationalError:  # SQLite without dbstat
            pass
        return out
    finally:
        db.close()


def report(args: argparse.Namespace, db_path: Path, gen_s: float | None, r: dict[str, Any]) -> str:
    size = sizes(db_path)
    n = size["messages"]
    lines = [
        f"Database: {size['sessions']:,} sessions, {n:,} messages (one session of "
        f"{r['big_count']:,}; the rest share the remainder), synthetic text from a "
        f"{VOCABULARY:,}-word Zipf vocabulary (~24 words a message), cached as "
        f"`{db_path}` "
        + (
            f"(generated in {gen_s:.0f} s this run)."
            if gen_s is not None
            else "(generated by an earlier run)."
        ),
        "",
        f"Requests on one connection to a real hermesd over its socket, "
        f"{args.rounds} interleaved rounds of {args.per_round} each, after one warm-up "
        "call of each.",
        "",
        "| request | p50 | p90 | p50 / ping | target |",
        "|---|---|---|---|---|",
    ]
    ping = median(r["samples"]["`ping`"])
    for name, values in r["samples"].items():
        p50 = median(values)
        target = ""
        if name.startswith(("`session.list` first", "`session.search`")):
            target = f"≤ 20 ms: {'met' if p50 <= 20 else 'MISSED'}"
        lines.append(
            f"| {name} | {p50:.2f} ms | {percentile(values, 90):.2f} ms | "
            f"{p50 / ping:.0f}× | {target} |"
        )
    h = median(r["history_ms"])
    lines += [
        "",
        f"**Loading the 10,000-message session for a turn** (`store.messages.history()` in "
        f"this process on the daemon's file, {len(r['history_ms'])} times): "
        f"**{h:.1f} ms p50**, {percentile(r['history_ms'], 90):.1f} ms p90, "
        f"{r['history_len']} messages returned (target ≤ 100 ms: "
        f"{'met' if h <= 100 else 'MISSED'}). The session was never compacted, so every "
        "stored message is read; a compacted one reads its view and the messages after it "
        '(bench:context; docs/sessions.md, "The view model").',
        "",
        f"**Size**: {size['file'] / 2**20:,.0f} MiB, **{size['file'] / n:,.0f} bytes per "
        f"message** ({size['text'] / n:,.0f} bytes of text each)",
    ]
    parts = {k[6:]: v for k, v in size.items() if k.startswith("table:")}
    if parts:
        top = sorted(parts.items(), key=lambda kv: -kv[1])[:5]
        lines[-1] += (
            "; by table/index: "
            + ", ".join(f"`{k}` {v / n:,.0f} B" for k, v in top)
            + " per message"
        )
    lines[-1] += "."
    lines += [
        "",
        f"**Start-up on this database** (spawn → READY=1, one start): {r['ready_ms']:.0f} ms.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--messages", type=int)
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 6)")
    parser.add_argument("--per-round", type=int, help="requests per case and round (default 50)")
    args = parser.parse_args()
    sessions = args.sessions or (1_000 if args.quick else 10_000)
    messages = args.messages or (100_000 if args.quick else 1_000_000)
    big = min(10_000 if not args.quick else 1_000, messages // 2)
    rounds, per_round = (2, 10) if args.quick else (6, 50)
    args.rounds, args.per_round = args.rounds or rounds, args.per_round or per_round
    started, machine_line = now_utc(), machine()
    path = cache_path(sessions, messages)
    gen_s = None
    if not path.exists():
        print(f"generating {path} ({sessions:,} sessions, {messages:,} messages)…", flush=True)
        gen_s = generate(path, sessions, messages, big)
        print(f"generated in {gen_s:.0f} s", flush=True)
    r = measure(path, args.rounds, args.per_round)
    body = report(args, path, gen_s, r)
    common.publish(
        args,
        "store",
        "Session store at scale: list, search, history, size",
        body,
        started,
        machine_line,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
