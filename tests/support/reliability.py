"""Helpers for the reliability suites: a slow plugin tool, a model script that exercises every
kind of turn, checks of a state.db after a crash, and a mixed-request load driver.

The load driver is shared by ``tests/reliability/test_load.py`` (small) and ``bench/load.py``
(50 clients x 1,000 requests).
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermesctl.client import Client
from hermesd.rpc.protocol import RpcError
from hermesd.store.facade import SessionStore
from hermesd.store.search import index_pending
from tests.support.modelserver import Step, call_tools, reply, tool_call
from tests.support.modelserver import model_config as _server_config

# A plugin with one tool that sleeps in its worker thread: tool calls stay in flight.
SLOW_PLUGIN = """
import json, time

def register(ctx):
    def slow_tool(args, **kw):
        time.sleep(float(args.get("seconds") or 1))
        return json.dumps({"slept": args.get("seconds")})

    ctx.register_tool("slow_tool", "slowpoke", {"name": "slow_tool",
        "description": "Sleep a while", "parameters": {"type": "object",
        "properties": {"seconds": {"type": "string"}}}}, slow_tool)
"""

_WORD = re.compile(r"^(\w+)\s+(\S+)\s*(.*)$", re.DOTALL)


def model_config(url: str, extra: str = "") -> str:
    """config.yaml pointing at a scripted model server, plus ``extra`` YAML lines."""
    return _server_config(url, timeout=30, max_retries=0) + f"terminal:\n  cwd: /tmp\n{extra}"


def turn_rules(
    *, delay: float = 0.0, slow_seconds: float = 30.0, chunk_delay: float = 0.0
) -> Callable[[dict[str, Any]], Step]:
    """A model script keyed on the first word of the user message.

    ``slow TOKEN`` calls ``slow_tool`` (``slow_seconds``); ``calc TOKEN`` calls ``calculate``;
    ``danger TOKEN PATH`` runs ``rm -rf PATH`` through the terminal tool (needs an approval);
    ``stream TOKEN`` answers with a slowly streamed text; anything else is echoed. A tool result
    is answered with ``done TOKEN``. Every answer carries the TOKEN, for full-text checks.
    """

    def rules(request: dict[str, Any]) -> Step:
        messages = request.get("messages") or [{}]
        users = [m for m in messages if m.get("role") == "user"]
        text = str(users[-1].get("content") or "") if users else ""
        match = _WORD.match(text.strip())
        kind, token, rest = match.groups() if match else ("echo", "none", "")
        if messages[-1].get("role") == "tool":
            return reply(f"done {token} after the tool", delay=delay)
        if kind == "slow":
            return call_tools(tool_call("slow_tool", {"seconds": str(slow_seconds)}), delay=delay)
        if kind == "calc":
            return call_tools(tool_call("calculate", {"expression": "6 * 7"}), delay=delay)
        if kind == "danger":
            return call_tools(
                tool_call("terminal", {"command": f"rm -rf {rest.strip()}"}), delay=delay
            )
        if kind == "stream":
            return reply(
                f"streamed {token} " + "lorem ipsum " * 40,
                delay=delay,
                chunk_delay=chunk_delay or 0.05,
                chunk_chars=16,
            )
        return reply(f"echo {token}", delay=delay)

    return rules


# --- checks of a state.db ------------------------------------------------------------------


def history_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Why an OpenAI message list would be refused by a model API (empty list: valid)."""
    problems: list[str] = []
    pending: set[str] = set()
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id not in pending:
                problems.append(f"#{i}: tool result {call_id} answers no pending call")
            pending.discard(call_id)
            continue
        if pending:
            problems.append(f"#{i}: {role} message while calls {sorted(pending)} are unanswered")
            pending.clear()
        if role not in ("system", "user", "assistant"):
            problems.append(f"#{i}: unknown role {role!r}")
        for call in msg.get("tool_calls") or ():
            pending.add(str(call.get("id")))
    if pending:
        problems.append(f"end: calls {sorted(pending)} are unanswered")
    return problems


def db_report(path: Path) -> dict[str, Any]:
    """Integrity of ``state.db``: SQLite, FTS index vs messages table, counters, duplicates."""
    conn = sqlite3.connect(path, timeout=10, isolation_level=None)
    try:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        conn.execute("BEGIN")
        try:  # rank 1: also compare the index with the external content table, once the
            # messages still listed for indexing are in it (rolled back: nothing written)
            index_pending(conn)
            conn.execute(
                "INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)"
            )
            fts = "ok"
        except sqlite3.DatabaseError as exc:
            fts = str(exc)
        conn.execute("ROLLBACK")
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        fts_rows = conn.execute("SELECT count(*) FROM messages_fts").fetchone()[0]
        counters = conn.execute(
            "SELECT count(*) FROM sessions s WHERE message_count !="
            " (SELECT count(*) FROM messages m WHERE m.session_id = s.id)"
        ).fetchone()[0]
        duplicates = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM messages WHERE role IN ('user', 'tool')"
            " GROUP BY session_id, turn_id, role, coalesce(tool_call_id, ''), content"
            " HAVING count(*) > 1)"
        ).fetchone()[0]
    finally:
        conn.close()
    return {
        "integrity": integrity,
        "fts": fts,
        "messages": messages,
        "fts_rows": fts_rows,
        "bad_counters": counters,
        "duplicates": duplicates,
    }


def fts_matches(path: Path, token: str) -> tuple[int, int]:
    """(FTS hits, LIKE hits) for one token: equal when the index matches the table."""
    conn = sqlite3.connect(path, timeout=10, isolation_level=None)
    try:
        conn.execute("BEGIN")  # as a search would see it: pending messages indexed first
        index_pending(conn)
        fts = conn.execute(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", (f'"{token}"',)
        ).fetchone()[0]
        like = conn.execute(
            "SELECT count(*) FROM messages WHERE content LIKE ?", (f"%{token}%",)
        ).fetchone()[0]
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return fts, like


def committed(path: Path) -> dict[int, tuple[str, int, str, str | None]]:
    """Every committed message: id -> (session, seq, role, content)."""
    conn = sqlite3.connect(path, timeout=10)
    try:
        rows = conn.execute("SELECT id, session_id, seq, role, content FROM messages").fetchall()
    finally:
        conn.close()
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}


def model_histories(path: Path, session_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """``store.messages.history()`` of each session: what its next model call would be sent."""
    store = SessionStore(path)
    try:
        return {sid: store.messages.history(sid) for sid in session_ids}
    finally:
        store.close()


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# --- load --------------------------------------------------------------------------------

MIX = ("ping", "status", "tools.call", "session.list", "chat")


def _one(c: Client, kind: str, sid: str, n: int) -> None:
    if kind == "ping":
        assert c.call("ping", {"data": n})["data"] == n
    elif kind == "status":
        assert "sessions" in c.call("status")
    elif kind == "tools.call":
        result = c.call("tools.call", {"name": "calculate", "args": {"expression": f"{n}+1"}})
        assert str(n + 1) in result["result"], result
    elif kind == "session.list":
        assert "sessions" in c.call("session.list", {"limit": 20})
    else:
        result = c.call(
            "session.send",
            {"session_id": sid, "message": f"echo load{n}", "wait": True},
            timeout=60,
        )
        assert result["status"] == "completed", result


def run_load(socket: Path, clients: int, requests: int, chat_every: int = 10) -> dict[str, Any]:
    """``clients`` threads, each with its own connection and session, each sending ``requests``
    requests: every ``chat_every``-th a chat turn, the rest cycling through the other methods.
    Returns per-method latencies (ms), errors and the wall time."""
    latencies: dict[str, list[float]] = {k: [] for k in MIX}
    errors: list[str] = []
    lock = threading.Lock()
    start_gate = threading.Barrier(clients + 1)

    def worker(index: int) -> None:
        mine: dict[str, list[float]] = {k: [] for k in MIX}
        try:
            with Client.connect(socket, timeout=60) as c:
                sid = c.call("session.create", {"title": f"load {index}", "attach": False})["id"]
                start_gate.wait()
                for n in range(requests):
                    kind = "chat" if n % chat_every == chat_every - 1 else MIX[n % 4]
                    t0 = time.perf_counter()
                    try:
                        _one(c, kind, sid, n)
                    except (RpcError, AssertionError, OSError) as exc:
                        with lock:
                            errors.append(f"{kind}: {exc}")
                        continue
                    mine[kind].append((time.perf_counter() - t0) * 1000)
                    while c.next_notification(timeout=0) is not None:
                        pass
        except threading.BrokenBarrierError:
            return
        except Exception as exc:
            with lock:
                errors.append(f"client {index}: {exc!r}")
            start_gate.abort()
        with lock:
            for k, v in mine.items():
                latencies[k].extend(v)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        start_gate.wait(timeout=120)
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "latencies": latencies,
        "errors": errors,
        "wall_s": wall,
        "requests": sum(len(v) for v in latencies.values()) + len(errors),
    }


def percentiles(values: list[float]) -> tuple[float, float]:
    """(p50, p99) in the units given; (nan, nan) when empty."""
    if not values:
        return float("nan"), float("nan")
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def load_table(result: dict[str, Any]) -> str:
    """A markdown table of count, p50 and p99 per method."""
    lines = ["| method | requests | p50 ms | p99 ms |", "|---|---:|---:|---:|"]
    for kind in MIX:
        values = result["latencies"][kind]
        p50, p99 = percentiles(values)
        name = "session.send (chat turn, wait)" if kind == "chat" else kind
        lines.append(f"| {name} | {len(values)} | {p50:.1f} | {p99:.1f} |")
    return "\n".join(lines)


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


# --- small filesystems -------------------------------------------------------------------


def mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` at ``path``; None on success, else why it is not possible."""
    import subprocess

    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        check=False,
        capture_output=True,
        text=True,
    )
    return None if done.returncode == 0 else (done.stderr.strip() or "mount failed")


def remount(path: Path, option: str) -> None:
    import subprocess

    subprocess.run(["mount", "-o", f"remount,{option}", str(path)], check=True)


def unmount(path: Path) -> None:
    import subprocess

    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill_disk(path: Path) -> int:
    """Write ``path`` until the filesystem is full; returns the bytes written."""
    import errno

    written = 0
    with open(path, "wb", buffering=0) as fh:
        for size in (1 << 20, 1 << 16, 1 << 12, 512):
            block = b"\0" * size
            while True:
                try:
                    fh.write(block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
                written += size
    return written
