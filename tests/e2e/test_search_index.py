"""The deferred search index on a real daemon: messages written by concurrent turns are found
by the next search, sessions deleted meanwhile are not, indexing runs without a search, and the
index matches the messages table afterwards (FTS5's own check)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hermesctl.client import Client
from hermesd.store.search import INDEX_EVERY
from tests.support.daemon import DaemonProcess, short_tmpdir
from tests.support.modelserver import ScriptedModelServer
from tests.support.reliability import db_report, fts_matches, model_config, turn_rules
from tests.support.waiting import wait_until

SESSIONS = 30  # × 3 turns × 4 messages (user, tool call, tool result, answer)


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=turn_rules()) as server:
        yield server


def _token(session: int, turn: int) -> str:
    return f"k{session:02d}x{turn}z"


def _turns(c: Client, sids: dict[int, str], turn: int) -> None:
    """One ``calc`` turn in every session at once (pipelined on one connection)."""
    ids = [
        c.send(
            "session.send",
            {"session_id": sid, "wait": True, "message": f"calc {_token(i, turn)} please"},
        )
        for i, sid in sids.items()
    ]
    assert [c.wait(msgid, timeout=60)["status"] for msgid in ids] == ["completed"] * len(ids)


def _found(c: Client, token: str) -> set[str]:
    return {hit["session_id"] for hit in c.call("session.search", {"query": token})["hits"]}


def _pending(db: Path) -> tuple[int, int]:
    conn = sqlite3.connect(db, timeout=10)
    try:
        return (
            conn.execute("SELECT count(*) FROM fts_pending").fetchone()[0],
            conn.execute("SELECT count(*) FROM messages").fetchone()[0],
        )
    finally:
        conn.close()


def test_concurrent_turns_searches_and_deletes_keep_the_index_exact(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    home = short_tmpdir()
    daemon = start(home, config=model_config(model.url))
    db = home / "state.db"
    with daemon.client(timeout=60) as c, daemon.client(timeout=60) as searcher:
        sids = {i: c.call("session.create", {"attach": False})["id"] for i in range(SESSIONS)}
        _turns(c, sids, 1)
        # Every message of a finished turn is found at once, though nothing indexed it yet.
        assert _pending(db)[0] > 0
        for i, sid in sids.items():
            assert _found(searcher, _token(i, 1)) == {sid}, i
        _turns(c, sids, 2)
        doomed = {i: sid for i, sid in sids.items() if i % 3 == 0}
        kept = {i: sid for i, sid in sids.items() if i % 3}
        # Third turns of the kept sessions run while the doomed ones are deleted and searched.
        ids = [
            c.send(
                "session.send",
                {"session_id": sid, "wait": True, "message": f"calc {_token(i, 3)} please"},
            )
            for i, sid in kept.items()
        ]
        for i, sid in doomed.items():
            searcher.call("session.delete", {"session_id": sid})
            assert _found(searcher, _token(i, 2)) == set(), i
        assert [c.wait(msgid, timeout=60)["status"] for msgid in ids] == ["completed"] * len(ids)
        for i, sid in kept.items():
            for turn in (1, 2, 3):
                assert _found(searcher, _token(i, turn)) == {sid}, (i, turn)
        for i in doomed:
            assert all(_found(searcher, _token(i, turn)) == set() for turn in (1, 2))
    assert daemon.stop() == 0
    assert _pending(db)[0] == 0  # the store indexed the rest when it closed
    report = db_report(db)
    assert report["integrity"] == "ok" and report["fts"] == "ok", report
    assert report["messages"] == report["fts_rows"] == len(kept) * 3 * 4, report
    for i in range(SESSIONS):
        for turn in (1, 2, 3):
            fts, like = fts_matches(db, _token(i, turn))
            assert fts == like, (i, turn, fts, like)


def test_the_db_thread_indexes_without_waiting_for_a_search(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    home = short_tmpdir()
    daemon = start(home, config=model_config(model.url))
    db = home / "state.db"
    sessions = INDEX_EVERY // 4 + 6  # one calc turn each: 4 messages, past INDEX_EVERY in all
    with daemon.client(timeout=60) as c:
        sids = {i: c.call("session.create", {"attach": False})["id"] for i in range(sessions)}
        _turns(c, sids, 1)
        wait_until(
            lambda: _pending(db)[0] < INDEX_EVERY,
            10,
            "the DB thread to index what was written, with no search asking",
        )
        assert _pending(db)[1] == sessions * 4
        assert _found(c, _token(sessions - 1, 1)) == {sids[sessions - 1]}
    assert daemon.stop() == 0
    report = db_report(db)
    assert report["fts"] == "ok" and report["messages"] == report["fts_rows"], report
