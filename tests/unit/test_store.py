"""SessionStore against real SQLite files in temporary directories."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from hermesd.store.dbfile import MessageNotFound, SchemaTooNew, SessionNotFound
from hermesd.store.facade import SessionStore
from hermesd.store.history import INTERRUPTED_RESULT, repair_history
from hermesd.store.migrations import MIGRATIONS
from hermesd.store.search import fts_query


@pytest.fixture
def store(tmp_path: Path):
    s = SessionStore(tmp_path / "home" / "state.db")
    yield s
    s.close()


def call(call_id: str, name: str = "calculate", args: str = "{}") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def add_turn(store: SessionStore, sid: str, text: str, answer: str) -> None:
    store.messages.append(sid, "user", text)
    store.messages.append(sid, "assistant", answer)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# -- file, pragmas, schema ----------------------------------------------------------------------


def test_database_and_its_wal_files_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    store = SessionStore(tmp_path / "state.db")
    os.umask(old)
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "user", "hello")
    store.close()
    store = SessionStore(tmp_path / "state.db")
    store.messages.append(sid, "user", "again")
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        assert mode(tmp_path / name) == 0o600, name
    store.close()


def test_an_existing_world_readable_database_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.touch(mode=0o644)
    os.chmod(path, 0o644)
    SessionStore(path).close()
    assert mode(path) == 0o600


def test_database_uses_wal_and_the_latest_schema(store: SessionStore) -> None:
    db = sqlite3.connect(store.path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


def test_migrates_a_version_1_database_and_indexes_its_old_messages(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + "PRAGMA user_version = 1;")
    db.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES ('old', 1, 1)")
    db.execute(
        "INSERT INTO messages (session_id, seq, role, content, created_at)"
        " VALUES ('old', 1, 'user', 'the ancient aardvark', 1)"
    )
    db.commit()
    db.close()
    store = SessionStore(path)
    assert [h["session_id"] for h in store.search.find("aardvark")] == ["old"]
    store.messages.append("old", "assistant", "still here")
    assert len(store.messages.read("old")) == 2
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


def test_a_database_from_a_newer_hermesd_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    sqlite3.connect(path).execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(SchemaTooNew, match="upgrade hermesd"):
        SessionStore(path)


# -- sessions -------------------------------------------------------------------------------


def test_session_ids_are_short_and_path_safe(store: SessionStore) -> None:
    ids = {store.sessions.create()["id"] for _ in range(20)}
    assert len(ids) == 20
    for sid in ids:
        assert len(sid) <= 24 and all(c.isalnum() or c == "-" for c in sid)


def test_unknown_session_raises_session_not_found(store: SessionStore) -> None:
    for op in (
        lambda: store.sessions.get("nope"),
        lambda: store.sessions.rename("nope", "x"),
        lambda: store.sessions.delete("nope"),
        lambda: store.messages.append("nope", "user", "x"),
        lambda: store.sessions.add_usage("nope", 1, 1),
        lambda: store.messages.history("nope"),
        lambda: store.sessions.fork("nope"),
        lambda: store.sessions.create(parent_id="nope"),
    ):
        with pytest.raises(SessionNotFound, match="Session not found: nope"):
            op()


def test_bad_message_input_is_rejected_clearly(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    with pytest.raises(ValueError, match="role must be one of"):
        store.messages.append(sid, "robot", "x")
    with pytest.raises(ValueError, match="tool_call_id"):
        store.messages.append(sid, "tool", "x")
    with pytest.raises(ValueError, match="session id"):
        store.sessions.create(session_id="../etc")


def test_first_user_message_becomes_the_title(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "user", "  What is\n2 to the power of 16?  ")
    store.messages.append(sid, "user", "second message")
    info = store.sessions.get(sid)
    assert info["title"] == "What is 2 to the power of 16?"
    assert info["message_count"] == 2


def test_rename_sets_the_title(store: SessionStore) -> None:
    sid = store.sessions.create(title="a")["id"]
    assert store.sessions.rename(sid, "  my   session ")["title"] == "my session"


def test_committed_messages_survive_reopening(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "state.db")
    sid = store.sessions.create(model="m")["id"]
    store.messages.append(sid, "user", "persist me", turn_id="t1")
    store.sessions.add_usage(sid, 10, 5)
    # no close(): a killed process never gets to close either
    reopened = SessionStore(tmp_path / "state.db")
    [msg] = reopened.messages.read(sid)
    assert (msg["content"], msg["turn_id"], msg["seq"]) == ("persist me", "t1", 1)
    assert reopened.sessions.get(sid)["total_tokens"] == 15
    reopened.close()
    store.close()


def test_list_is_newest_first_and_pages_with_a_cursor(store: SessionStore) -> None:
    ids = [store.sessions.create()["id"] for _ in range(5)]
    store.messages.append(ids[0], "user", "bump")  # now the most recently updated
    first = store.sessions.page(limit=2)
    assert next(s["id"] for s in first["sessions"]) == ids[0]
    seen = [s["id"] for s in first["sessions"]]
    cursor = first["next_cursor"]
    while cursor:
        page = store.sessions.page(limit=2, before=cursor)
        seen += [s["id"] for s in page["sessions"]]
        cursor = page["next_cursor"]
    assert sorted(seen) == sorted(ids) and len(seen) == 5


def test_delete_removes_messages_and_their_search_entries(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    add_turn(store, sid, "zebra crossing", "ok")
    store.sessions.delete(sid)
    assert store.search.find("zebra") == []
    assert sqlite3.connect(store.path).execute("SELECT count(*) FROM messages").fetchone()[0] == 0


def test_fork_copies_messages_up_to_the_given_one(store: SessionStore) -> None:
    sid = store.sessions.create(title="origin")["id"]
    add_turn(store, sid, "first walrus", "one")
    add_turn(store, sid, "second walrus", "two")
    cut = store.messages.read(sid)[1]["id"]
    fork = store.sessions.fork(sid, cut)
    assert fork["parent_id"] == sid and fork["title"] == "origin (fork)"
    assert [m["content"] for m in store.messages.read(fork["id"])] == ["first walrus", "one"]
    assert fork["message_count"] == 2
    assert {h["session_id"] for h in store.search.find("first walrus")} == {sid, fork["id"]}
    store.sessions.delete(sid)
    assert store.sessions.get(fork["id"])["parent_id"] is None
    assert len(store.search.find("walrus")) == 1


def test_fork_refuses_a_message_of_another_session(store: SessionStore) -> None:
    a, b = store.sessions.create()["id"], store.sessions.create()["id"]
    other = store.messages.append(b, "user", "x")["id"]
    with pytest.raises(MessageNotFound):
        store.sessions.fork(a, other)


# -- search ---------------------------------------------------------------------------------


def test_search_returns_snippets_with_highlights(store: SessionStore) -> None:
    sid = store.sessions.create(title="units")["id"]
    add_turn(store, sid, "how many gigabytes are in 1.5 terabytes", "1536 gigabytes")
    hits = store.search.find("terabytes")
    assert len(hits) == 1
    assert hits[0]["session_title"] == "units" and "«terabytes»" in hits[0]["snippet"]


def on_db(store: SessionStore, sql: str, *args: Any) -> None:
    """Run one statement on the store's connection, in a transaction (on its DB thread, the
    only one sqlite3 lets use it)."""

    def run() -> None:
        with store.transaction() as db:
            db.execute(sql, args)

    store.db.call(run)


def test_search_index_follows_content_updates(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    mid = store.messages.append(sid, "user", "original kestrel")["id"]
    on_db(store, "UPDATE messages SET content = 'renamed falcon' WHERE id = ?", mid)
    assert store.search.find("kestrel") == [] and len(store.search.find("falcon")) == 1


def test_search_prefix_and_session_filter(store: SessionStore) -> None:
    a, b = store.sessions.create()["id"], store.sessions.create()["id"]
    store.messages.append(a, "user", "calculation")
    store.messages.append(b, "user", "calculator")
    assert len(store.search.find("calc*")) == 2
    assert [h["session_id"] for h in store.search.find("calc*", session_id=b)] == [b]


def fts_check(path: Path) -> str:
    """FTS5's own check of the index against the messages table ('ok' when they agree), with
    the messages still listed for indexing indexed first (and rolled back afterwards)."""
    from hermesd.store.search import index_pending

    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN")
        index_pending(db)
        db.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)")
        return "ok"
    except sqlite3.DatabaseError as exc:
        return str(exc)
    finally:
        db.close()


def pending(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT count(*) FROM fts_pending").fetchone()[0])
    finally:
        db.close()


def test_new_messages_wait_for_indexing_yet_search_finds_them(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    add_turn(store, sid, "a wandering albatross", "noted")
    assert pending(store.path) == 2  # written, listed, not indexed yet
    assert [h["session_id"] for h in store.search.find("albatross")] == [sid]
    assert pending(store.path) == 0 and fts_check(store.path) == "ok"


def test_deleting_or_editing_unindexed_messages_keeps_the_index_sound(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    old = store.messages.append(sid, "user", "indexed heron")["id"]
    store.search.index_pending()
    new = store.messages.append(sid, "user", "pending egret")["id"]
    # one edit of each kind of message
    on_db(store, "UPDATE messages SET content = 'indexed crane' WHERE id = ?", old)
    on_db(store, "UPDATE messages SET content = 'pending ibis' WHERE id = ?", new)
    assert fts_check(store.path) == "ok"
    assert store.search.find("heron") == [] and store.search.find("egret") == []
    assert len(store.search.find("crane")) == 1 and len(store.search.find("ibis")) == 1
    store.messages.append(sid, "user", "never indexed stork")
    store.sessions.delete(sid)  # indexed and pending messages go together
    assert pending(store.path) == 0 and fts_check(store.path) == "ok"
    assert store.search.find("crane") == [] and store.search.find("stork") == []


def test_messages_a_killed_process_left_unindexed_are_indexed_at_open(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    script = (
        "import os, sys\n"
        "from hermesd.store.facade import SessionStore\n"
        "s = SessionStore(__import__('pathlib').Path(sys.argv[1]))\n"
        "sid = s.sessions.create(session_id='killed')['id']\n"
        "s.messages.append(sid, 'user', 'orphaned pelican')\n"
        "os._exit(0)\n"
    )  # no close(): what SIGKILL leaves
    subprocess.run(
        [sys.executable, "-c", script, str(path)],
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert pending(path) == 1
    store = SessionStore(path)
    try:
        assert pending(path) == 0 and fts_check(path) == "ok"
        assert [h["session_id"] for h in store.search.find("pelican")] == ["killed"]
    finally:
        store.close()


def test_close_indexes_what_is_pending(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "state.db")
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "user", "closing cormorant")
    store.close()
    assert pending(tmp_path / "state.db") == 0 and fts_check(tmp_path / "state.db") == "ok"


def test_a_failed_indexing_run_at_open_is_logged_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import hermesd.store.search as search_module

    def full(conn: sqlite3.Connection) -> int:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(search_module, "index_pending", full)
    store = SessionStore(tmp_path / "state.db")
    try:
        assert "indexing new messages for search at open failed" in caplog.text
        assert store.sessions.create()["id"]
    finally:
        monkeypatch.undo()
        store.close()


def test_the_db_thread_indexes_every_few_hundred_messages(store: SessionStore) -> None:
    from hermesd.store.search import INDEX_EVERY

    threads: list[str] = []

    def trace(sql: str) -> None:
        if sql.startswith("INSERT INTO messages_fts"):
            threads.append(threading.current_thread().name)

    store.db.call(store.db.conn.set_trace_callback, trace)

    async def main() -> None:
        sid = (await store.run(store.sessions.create))["id"]
        for i in range(INDEX_EVERY):  # the way a turn writes
            await store.run(store.messages.append, sid, "user", f"message {i} of a flock")

    asyncio.run(main())
    assert pending(store.path) == 0  # no search asked for it
    assert threads and all(name.startswith("hermesd-db") for name in threads), threads
    assert fts_check(store.path) == "ok"


def _fail_unlisting(store: SessionStore) -> None:
    """Make the next indexing step fail after it indexed (a real SQLite error mid-step)."""
    store.db.call(
        store.db.conn.execute,
        "CREATE TEMP TRIGGER fail_unlisting BEFORE DELETE ON fts_pending"
        " BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END",
    )


def _heal_unlisting(store: SessionStore) -> None:
    store.db.call(store.db.conn.execute, "DROP TRIGGER temp.fail_unlisting")


def test_a_failed_indexing_step_leaves_index_and_list_as_they_were(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "user", "an indexed gannet")
    store.search.index_pending()
    store.messages.append(sid, "user", "a listed tern")
    _fail_unlisting(store)
    with pytest.raises(sqlite3.DatabaseError, match="full"):
        store.search.index_pending()  # its own transaction

    def inside_a_transaction() -> None:
        with store.transaction() as db:
            db.execute("UPDATE sessions SET title = 'kept?' WHERE id = ?", (sid,))
            store.search.index_pending()  # inside a transaction of the caller's: a savepoint

    with pytest.raises(sqlite3.DatabaseError, match="full"):
        store.db.call(inside_a_transaction)
    _heal_unlisting(store)
    assert pending(store.path) == 1 and fts_check(store.path) == "ok"
    assert store.sessions.get(sid)["title"] != "kept?"
    assert store.search.index_pending() == 1 and len(store.search.find("tern")) == 1


def test_a_search_whose_indexing_fails_searches_what_is_indexed(
    store: SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "user", "an indexed skua")
    store.search.index_pending()
    store.messages.append(sid, "user", "a listed skua")
    _fail_unlisting(store)
    assert len(store.search.find("skua")) == 1  # the indexed one
    assert "searching without the newest messages" in caplog.text
    assert (
        store.sessions.rename(sid, "renamed after the search")["title"]
        == "renamed after the search"
    )
    _heal_unlisting(store)
    assert len(store.search.find("skua")) == 2


def test_a_version_4_database_keeps_its_index_through_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    for version, script in enumerate(MIGRATIONS[:4], start=1):
        db.executescript(f"BEGIN; {script} PRAGMA user_version = {version}; COMMIT;")
    db.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES ('v4', 1, 1)")
    db.execute(
        "INSERT INTO messages (session_id, seq, role, content, created_at)"
        " VALUES ('v4', 1, 'user', 'an indexed puffin', 1)"
    )  # indexed by v4's trigger
    db.commit()
    db.close()
    store = SessionStore(path)
    try:
        assert pending(path) == 0 and fts_check(path) == "ok"
        assert [h["session_id"] for h in store.search.find("puffin")] == ["v4"]
        store.sessions.delete("v4")  # an old, indexed message leaves the index
        assert fts_check(path) == "ok" and store.search.find("puffin") == []
    finally:
        store.close()


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '""',
        "AND OR",
        "*",
        "NEAR(",
        "NEAR(a b",
        'a"b',
        "NOT",
        "-x",
        "(",
        ")",
        "a:b",
        "content:x",
        "^",
        "{x}",
        "'",
        "AND",
        "x OR",
        "\\",
        "",
        "   ",
        "🙂",
        "a AND NOT b",
    ],
)
def test_hostile_queries_never_raise(store: SessionStore, query: str) -> None:
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "user", 'a "quoted" NEAR( AND OR b x')
    assert isinstance(store.search.find(query), list)


def test_query_words_are_quoted_terms() -> None:
    assert fts_query('foo "bar" AND') == '"foo" """bar""" "AND"'
    assert fts_query("pre*") == '"pre"*'
    assert fts_query("* ( )") is None


# -- history for the model ----------------------------------------------------------------------


def test_history_is_openai_shaped(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "user", "2**16?")
    store.messages.append(sid, "assistant", None, tool_calls=[call("c1")])
    store.messages.append(
        sid, "tool", '{"result": 65536}', tool_call_id="c1", tool_name="calculate"
    )
    store.messages.append(sid, "assistant", "65536")
    assert store.messages.history(sid) == [
        {"role": "user", "content": "2**16?"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"result": 65536}'},
        {"role": "assistant", "content": "65536"},
    ]


def test_history_is_every_message_when_nothing_was_compacted(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    for i in range(600):
        add_turn(store, sid, f"q{i}", f"a{i}")
    history = store.messages.history(sid)
    assert len(history) == 1200
    assert history[0] == {"role": "user", "content": "q0"}


def test_a_compaction_is_a_view_the_stored_messages_stay(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    for i in range(5):
        add_turn(store, sid, f"q{i}", f"a{i}")
    summary = {"role": "user", "content": "[summary] q0..q2"}
    store.compactions.record(sid, [summary], 6, engine="test")
    assert store.messages.history(sid) == [
        summary,
        {"role": "user", "content": "q3"},
        {"role": "assistant", "content": "a3"},
        {"role": "user", "content": "q4"},
        {"role": "assistant", "content": "a4"},
    ]
    assert len(store.messages.read(sid)) == 10
    assert [h["session_id"] for h in store.search.find("q1")] == [sid]


def test_undo_into_a_compacted_message_retires_the_compaction(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    for i in range(3):
        add_turn(store, sid, f"q{i}", f"a{i}")
    store.compactions.record(sid, [{"role": "user", "content": "[summary]"}], 6, engine="test")
    store.messages.undo_last_turn(sid)
    assert [m["content"] for m in store.messages.history(sid)] == ["q0", "a0", "q1", "a1"]
    assert store.compactions.listing(sid)[0]["undone"] is True


def test_split_view_keeps_the_unchanged_tail_as_references() -> None:
    from hermesd.store.compactions import split_view

    inputs = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    seqs: list[int | None] = [1, 2, 3, 4, 5, 6]
    summary = {"role": "user", "content": "summary"}
    assert split_view(inputs, seqs, [inputs[0], summary, *inputs[4:]], 0) == (
        [inputs[0], summary],
        4,
    )
    assert split_view(inputs, seqs, list(inputs), 0) is None


def test_repair_answers_unanswered_tool_calls_in_place() -> None:
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "user", "content": "next"},
    ]
    fixed = repair_history(msgs)
    assert [m.get("tool_call_id") for m in fixed] == [None, None, "a", "b", None]
    assert json.loads(fixed[3]["content"]) == {"error": INTERRUPTED_RESULT}


def test_repair_drops_tool_results_that_answer_nothing() -> None:
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "tool", "tool_call_id": "ghost", "content": "1"},
        {"role": "assistant", "content": "hi"},
    ]
    assert repair_history(msgs) == [msgs[0], msgs[2]]


def test_repair_leaves_a_valid_history_alone() -> None:
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "assistant", "content": "ok"},
    ]
    assert repair_history(msgs) == msgs


def test_history_repairs_a_crash_mid_tool(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "user", "q")
    store.messages.append(sid, "assistant", None, tool_calls=[call("a"), call("b")])
    store.messages.append(sid, "tool", "1", tool_call_id="a")
    hist = store.messages.history(sid)
    assert [m.get("tool_call_id") for m in hist] == [None, None, "a", "b"]


def test_closing_dangling_tool_calls_persists_results(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "user", "q")
    store.messages.append(sid, "assistant", None, tool_calls=[call("a"), call("b", "terminal")])
    store.messages.append(sid, "tool", "1", tool_call_id="a")
    assert store.messages.close_dangling_tool_calls(sid, "stopped") == 1
    last = store.messages.read(sid)[-1]
    assert (last["tool_call_id"], last["tool_name"]) == ("b", "terminal")
    assert json.loads(last["content"] or "") == {"error": "stopped"}
    assert store.messages.close_dangling_tool_calls(sid) == 0


def test_usage_accumulates(store: SessionStore) -> None:
    sid = store.sessions.create()["id"]
    store.sessions.add_usage(sid, 10, 2)
    store.sessions.add_usage(sid, 5, 1, 7)
    info = store.sessions.get(sid)
    assert (info["prompt_tokens"], info["completion_tokens"], info["total_tokens"]) == (15, 3, 19)


def test_a_message_carries_the_token_counts_of_the_completion_that_produced_it(
    store: SessionStore,
) -> None:
    sid = store.sessions.create()["id"]
    store.messages.append(sid, "assistant", "one", usage=(10, 2, None))  # total: the sum
    store.messages.append(sid, "assistant", "two", usage=(5, 1, 7))
    store.messages.append(sid, "user", "no counts")
    info = store.sessions.get(sid)
    assert (info["prompt_tokens"], info["completion_tokens"], info["total_tokens"]) == (15, 3, 19)
    assert info["message_count"] == 3


def test_run_runs_methods_on_the_db_thread(store: SessionStore) -> None:
    def where() -> str:
        return threading.current_thread().name

    async def main() -> str:
        sid = (await store.run(store.sessions.create))["id"]
        await store.run(store.messages.append, sid, "user", "hi")
        return await store.run(where)

    assert asyncio.run(main()).startswith("hermesd-db")
