"""``message_images``: a database made before the table upgrades and keeps its messages; images
are kept with their message, copied by a fork and deleted with their session."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hermesd.store.facade import SessionStore
from hermesd.store.images import Image
from hermesd.store.migrations import MIGRATIONS

PNG = Image("image/png", b"\x89PNG\r\n\x1a\n" + b"pixels")


def test_a_database_from_before_images_upgrades_and_keeps_its_messages(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    before = next(n for n, s in enumerate(MIGRATIONS) if "CREATE TABLE message_images" in s)
    for version, script in enumerate(MIGRATIONS[:before], start=1):
        db.executescript(f"BEGIN; {script} PRAGMA user_version = {version}; COMMIT;")
    db.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES ('old', 1, 1)")
    db.execute(
        "INSERT INTO messages (session_id, seq, role, content, created_at)"
        " VALUES ('old', 1, 'user', 'hello', 1)"
    )
    db.commit()
    db.close()
    store = SessionStore(path)
    try:
        [old] = store.messages.read("old")
        assert old["content"] == "hello" and old["images"] == []
        store.messages.append("old", "user", "look", attached=[PNG])
        history = store.messages.history("old")
        assert history[0] == {"role": "user", "content": "hello"}
        assert history[1]["content"][1]["image_url"]["url"] == PNG.data_url()
        fork = store.sessions.fork("old")
        assert store.messages.read(fork["id"])[1]["images"] == [PNG.public()]
        store.sessions.delete("old")
    finally:
        store.close()
    rows = sqlite3.connect(path).execute("SELECT count(*) FROM message_images").fetchone()[0]
    assert rows == 1  # the fork's copy only
