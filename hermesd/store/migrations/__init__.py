"""The schema of ``state.db``, as an ordered list of migrations.

``MIGRATIONS[i]`` takes a database from ``PRAGMA user_version = i`` to ``i + 1``. Append only:
a migration that shipped is never edited, because databases in the field already ran it.
``hermesd.store.dbfile.migrate`` applies the missing ones in one transaction each at open time.
"""

from __future__ import annotations

# v1: sessions and their messages. Timestamps are Unix seconds (REAL).
_V1 = """
CREATE TABLE sessions (
    id                TEXT PRIMARY KEY,
    title             TEXT,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    model             TEXT,
    platform          TEXT NOT NULL DEFAULT 'cli',
    parent_id         TEXT REFERENCES sessions(id) ON DELETE SET NULL,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens      INTEGER NOT NULL DEFAULT 0,
    message_count     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_update ON sessions(updated_at DESC, id DESC);

CREATE TABLE messages (
    id           INTEGER PRIMARY KEY,
    session_id   TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    turn_id      TEXT,
    role         TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content      TEXT,
    tool_calls   TEXT,
    tool_call_id TEXT,
    tool_name    TEXT,
    created_at   REAL NOT NULL,
    UNIQUE (session_id, seq)
);
"""

# v2: full-text search over message content. External-content FTS5 table kept in sync by
# triggers; the rebuild indexes messages written by a v1 database.
_V2 = """
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, content='messages', content_rowid='id', tokenize='unicode61'
);
CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, coalesce(new.content, ''));
END;
CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content)
        VALUES ('delete', old.id, coalesce(old.content, ''));
END;
CREATE TRIGGER messages_fts_au AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content)
        VALUES ('delete', old.id, coalesce(old.content, ''));
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, coalesce(new.content, ''));
END;
INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
"""

# v3: remembered approval decisions ("always" rules), filled in by the approvals issue.
_V3 = """
CREATE TABLE approvals (
    pattern_key TEXT PRIMARY KEY,
    decision    TEXT NOT NULL DEFAULT 'always',
    decided_by  TEXT,
    description TEXT,
    created_at  REAL NOT NULL
);
"""

# v4: deleting a session sets its forks' parent_id to NULL; without an index on parent_id that
# foreign-key action scans every session on each delete. Partial: most sessions have no parent.
_V4 = """
CREATE INDEX sessions_by_parent ON sessions(parent_id) WHERE parent_id IS NOT NULL;
"""

# v5: messages are indexed for search in batches, not one by one as they are written. Indexing a
# message cost as much as writing it, on the event loop, in every model round; now a new row is
# only listed in fts_pending, and hermesd.store.search indexes what is listed (on the store's thread
# every few hundred messages, before every search, when the store opens and closes). Deleting
# or editing a message that was never indexed must not tell the index to forget it: for an
# external-content table that would corrupt the index.
_V5 = """
CREATE TABLE fts_pending (id INTEGER PRIMARY KEY);
DROP TRIGGER messages_fts_ai;
DROP TRIGGER messages_fts_ad;
DROP TRIGGER messages_fts_au;
CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN
    INSERT INTO fts_pending(id) VALUES (new.id);
END;
CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content)
        SELECT 'delete', old.id, coalesce(old.content, '')
        WHERE NOT EXISTS (SELECT 1 FROM fts_pending WHERE id = old.id);
    DELETE FROM fts_pending WHERE id = old.id;
END;
CREATE TRIGGER messages_fts_au AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content)
        SELECT 'delete', old.id, coalesce(old.content, '')
        WHERE NOT EXISTS (SELECT 1 FROM fts_pending WHERE id = old.id);
    INSERT OR IGNORE INTO fts_pending(id) VALUES (new.id);
END;
"""

# v6: who a session belongs to (the uid of the peer that created it; NULL for sessions made
# before, which count as the daemon owner's) and the working directory its tools run in (the
# creating client's, when the owner gave one; NULL: the configured default).
_V6 = """
ALTER TABLE sessions ADD COLUMN owner_uid INTEGER;
ALTER TABLE sessions ADD COLUMN cwd TEXT;
"""

# v7: /undo takes a turn out of what the model is sent but keeps it in the record: the time it
# was undone (NULL: part of the conversation).
_V7 = """
ALTER TABLE messages ADD COLUMN undone_at REAL;
"""

# v8: the memory blocks a session's system prompt was started with (hermesd.memory.snapshot,
# JSON), so the prompt stays the same across a restart; NULL until its first turn.
_V8 = """
ALTER TABLE sessions ADD COLUMN memory_snapshot TEXT;
"""

# v9: scheduled jobs (hermesd.cron). The job record is JSON in ``doc``; what the scheduler
# selects on has its own column: ``next_run_at`` (Unix seconds, NULL: never again), ``state``,
# and the fire claim (``claimed_by``, ``claim_until``: a lease, so a daemon killed mid-run does
# not leave the job claimed forever, and a restarted one never starts the same run twice).
# cron_runs keeps each run's outcome and output, the newest cron.output_retention per job.
_V9 = """
CREATE TABLE cron_jobs (
    id          TEXT PRIMARY KEY,
    doc         TEXT NOT NULL,
    state       TEXT NOT NULL,
    next_run_at REAL,
    claimed_by  TEXT,
    claim_until REAL,
    created_at  REAL NOT NULL
);
CREATE INDEX cron_jobs_due ON cron_jobs(next_run_at)
    WHERE state = 'scheduled' AND next_run_at IS NOT NULL;
CREATE INDEX cron_jobs_claimed ON cron_jobs(claimed_by) WHERE claimed_by IS NOT NULL;
CREATE TABLE cron_runs (
    id          INTEGER PRIMARY KEY,
    job_id      TEXT NOT NULL REFERENCES cron_jobs(id) ON DELETE CASCADE,
    session_id  TEXT,
    scheduled_for REAL,
    started_at  REAL NOT NULL,
    finished_at REAL,
    status      TEXT NOT NULL DEFAULT 'running',
    kind        TEXT NOT NULL DEFAULT 'on_time',
    missed      INTEGER NOT NULL DEFAULT 0,
    silent      INTEGER NOT NULL DEFAULT 0,
    output      TEXT,
    error       TEXT
);
CREATE INDEX cron_runs_by_job ON cron_runs(job_id, id);
"""

# v10: deliveries to the external memory provider not yet made (hermesd.memory.providers): a
# completed turn's sync_turn and a built-in write's on_memory_write are journalled before they
# are handed to the provider and removed once it answered, so a restart makes those a killed
# daemon left behind. ``payload`` is the call's arguments as JSON.
_V10 = """
CREATE TABLE memory_deliveries (
    id          INTEGER PRIMARY KEY,
    provider    TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    created_at  REAL NOT NULL
);
CREATE INDEX memory_deliveries_by_provider ON memory_deliveries(provider, id);
"""

# usage: one row per model request (hermesd.store.usage): its tokens by bucket and its cost in
# US dollars (NULL: unknown, the model has no price). ``session_id`` is not a foreign key on
# purpose: deleting a session must not take back what its requests spent today (budgets), so
# its rows stay. Sessions made before keep their counters in ``sessions`` and have no rows.
_USAGE = """
CREATE TABLE usage (
    id                 INTEGER PRIMARY KEY,
    session_id         TEXT,
    turn_id            TEXT,
    model              TEXT NOT NULL DEFAULT '',
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens   INTEGER NOT NULL DEFAULT 0,
    request_count      INTEGER NOT NULL DEFAULT 1,
    reported           INTEGER NOT NULL DEFAULT 1,
    cost_usd           REAL,
    created_at         REAL NOT NULL
);
CREATE INDEX usage_by_time ON usage(created_at, cost_usd);
CREATE INDEX usage_by_session ON usage(session_id, created_at);
"""

# memory deliveries count their attempts (each start that makes one again adds one), so that
# one a provider never answers is given up after a few instead of being repeated forever.
_MEMORY_DELIVERY_ATTEMPTS = """
ALTER TABLE memory_deliveries ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;
"""

# compactions (hermesd.store.compactions, docs/sessions.md "The view model"): what a context
# engine made of a session's older messages. The model is sent ``view`` (a JSON list of
# OpenAI-shaped messages) followed by the stored messages after ``upto_seq``; the messages
# themselves are never changed or deleted. ``undone_at`` is set when /undo reaches into the
# messages a compaction replaced, which retires it.
_COMPACTIONS = """
CREATE TABLE compactions (
    id          INTEGER PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    upto_seq    INTEGER NOT NULL,
    view        TEXT NOT NULL,
    engine      TEXT NOT NULL,
    summary     TEXT,
    replaced    INTEGER NOT NULL DEFAULT 0,
    fallback    INTEGER NOT NULL DEFAULT 0,
    focus       TEXT,
    reason      TEXT,
    created_at  REAL NOT NULL,
    undone_at   REAL
);
CREATE INDEX compactions_by_session ON compactions(session_id, id) WHERE undone_at IS NULL;
"""

# todos (hermesd.store.todos): each session's task list, written by the ``todo`` tool, as one
# JSON list. Deleted with its session; a fork (a new session with a parent) starts with a copy
# of its parent's list, as it starts with copies of its messages.
_TODOS = """
CREATE TABLE todos (
    session_id  TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    items       TEXT NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE TRIGGER todos_fork AFTER INSERT ON sessions WHEN new.parent_id IS NOT NULL BEGIN
    INSERT INTO todos (session_id, items, updated_at)
        SELECT new.id, items, updated_at FROM todos WHERE session_id = new.parent_id;
END;
"""

# message_images (hermesd.store.images): the images a client attached to a message, as BLOBs
# apart from the text (search never sees them), in the order sent; deleted with their message.
_MESSAGE_IMAGES = """
CREATE TABLE message_images (
    message_id  INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    n           INTEGER NOT NULL,
    mime        TEXT NOT NULL,
    data        BLOB NOT NULL,
    PRIMARY KEY (message_id, n)
);
"""

MIGRATIONS: list[str] = [
    _V1,
    _V2,
    _V3,
    _V4,
    _V5,
    _V6,
    _V7,
    _V8,
    _V9,
    _V10,
    _USAGE,
    _MEMORY_DELIVERY_ATTEMPTS,
    _COMPACTIONS,
    _TODOS,
    _MESSAGE_IMAGES,
]
