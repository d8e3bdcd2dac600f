"""The store's behaviour at scale: schema v4 (parent index), bounded search, session scoping."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from hermesd.store import search as fts
from hermesd.store.facade import SessionStore
from hermesd.store.migrations import MIGRATIONS
from tests.support.daemon import DaemonProcess


def v3_database(path: Path) -> None:
    """A database exactly as schema version 3 left it, with a session and a fork of it."""
    db = sqlite3.connect(path)
    db.executescript("".join(MIGRATIONS[:3]) + "PRAGMA user_version = 3;")
    db.execute("INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('p', 'x', 1, 1)")
    db.execute(
        "INSERT INTO sessions (id, created_at, updated_at, parent_id) VALUES ('child', 2, 2, 'p')"
    )
    db.execute(
        "INSERT INTO messages (session_id, seq, role, content, created_at)"
        " VALUES ('p', 1, 'user', 'an old platypus question', 1)"
    )
    db.commit()
    db.close()


def test_upgrade_from_version_3_keeps_data_and_indexes_parent_ids(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    v3_database(path)
    store = SessionStore(path)
    try:
        assert store.sessions.get("child")["parent_id"] == "p"
        assert [h["session_id"] for h in store.search.find("platypus")] == ["p"]
        plan = store.db.call(
            lambda: store.db.conn.execute(
                "EXPLAIN QUERY PLAN SELECT id FROM sessions WHERE parent_id = ?", ("p",)
            ).fetchall()
        )
        assert "sessions_by_parent" in str([tuple(r) for r in plan])
        store.sessions.delete("p")
        assert store.sessions.get("child")["parent_id"] is None
    finally:
        store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


def test_upgraded_version_3_database_is_served_by_a_daemon(
    tmp_path: Path, start: Callable[..., DaemonProcess]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    v3_database(home / "state.db")
    daemon = start(home)
    ids = [s["id"] for s in daemon.call("session.list")["sessions"]]
    assert ids == ["child", "p"]
    assert daemon.call("session.search", {"query": "platypus"})["hits"][0]["session_id"] == "p"


@pytest.fixture
def small_rank_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(fts, "RANKED_MATCHES", 5)
    return 5


def test_search_matching_more_than_the_ranked_limit_lists_the_newest_matches(
    tmp_path: Path, small_rank_limit: int
) -> None:
    store = SessionStore(tmp_path / "state.db")
    try:
        sid = store.sessions.create()["id"]
        ids = [
            store.messages.append(sid, "user", f"common word number {i}")["id"] for i in range(12)
        ]
        hits = store.search.find("common", limit=3)
        assert [h["message_id"] for h in hits] == ids[::-1][:3]
        assert "«common»" in hits[0]["snippet"]
    finally:
        store.close()


def test_search_matching_few_messages_is_ranked_best_first(
    tmp_path: Path, small_rank_limit: int
) -> None:
    store = SessionStore(tmp_path / "state.db")
    try:
        sid = store.sessions.create()["id"]
        best = store.messages.append(sid, "user", "kestrel kestrel kestrel")["id"]
        for i in range(3):
            store.messages.append(
                sid,
                "user",
                f"a kestrel among many other words here {i} and more filler text to make it longer",
            )
        assert store.search.find("kestrel")[0]["message_id"] == best
    finally:
        store.close()


def test_search_in_one_session_finds_only_its_messages_beyond_the_ranked_limit(
    tmp_path: Path, small_rank_limit: int
) -> None:
    store = SessionStore(tmp_path / "state.db")
    try:
        a = store.sessions.create()["id"]
        b = store.sessions.create()["id"]
        for i in range(8):  # interleaved, so b's id range spans a's messages
            store.messages.append(a, "user", f"shared topic a{i}")
            store.messages.append(b, "user", f"shared topic b{i}")
        hits = store.search.find("shared", limit=20, session_id=b)
        assert len(hits) == 8
        assert {h["session_id"] for h in hits} == {b}
        assert store.search.find("shared", session_id="no-such-session") == []
    finally:
        store.close()
