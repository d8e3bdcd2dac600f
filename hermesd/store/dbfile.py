"""The session store's database file: created private (0600), opened with its pragmas (WAL,
``synchronous=NORMAL``, foreign keys, busy timeout), migrated to the current schema
(``hermesd.store.migrations``), and the errors the store raises, including what an OS or SQLite
error of a full, read-only or failing disk means (`StorageUnavailable`). The store's
`hermesd.store.database.Database` opens the file on its DB thread; callers import the errors
from here. Nothing here knows what a session is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from pathlib import Path

from hermesd.store.migrations import MIGRATIONS

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5000  # how long a write waits for another process's lock (on the DB thread)


class StoreError(Exception):
    """The session store cannot do what was asked."""


class SessionNotFound(StoreError):
    """No session has this id."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session not found: {session_id}")
        self.session_id = session_id


class MessageNotFound(StoreError):
    """No message with this id belongs to the session."""


class SchemaTooNew(StoreError):
    """state.db was written by a newer hermesd."""


class StorageUnavailable(StoreError):
    """The disk refused a write: full (``reason="full"``), read-only or failing (``"io"``).

    Nothing of the refused write is stored; the database stays consistent and the store keeps
    working once the cause is gone.
    """

    #: The error any RPC method hitting this reports (``hermesd.rpc.connection`` reads
    #: ``rpc_code``).
    rpc_code = "hermes.error.StorageUnavailable"

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason

    @property
    def rpc_data(self) -> dict[str, str]:
        return {"reason": self.reason}


class StorageCorrupt(StorageUnavailable):
    """state.db, or the part of it a read reached, is damaged (``reason="corrupt"``).

    The same wire code as the other storage errors; the message says where and how to recover.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, "corrupt")


_FULL, _READONLY, _CANTOPEN = 13, 8, 14  # SQLITE_FULL, SQLITE_READONLY, SQLITE_CANTOPEN
_CORRUPT, _NOTADB = 11, 26  # SQLITE_CORRUPT, SQLITE_NOTADB
#: Written next to state.db once it holds a schema: an empty state.db beside it is a lost
#: database, not a new one.
CREATED_MARKER = ".state-db-created"


def recovery_hint(path: Path) -> str:
    """How to get back what a damaged ``path`` still holds."""
    return (
        f"stop hermesd, keep a copy of {path}, then `sqlite3 {path} .recover > recovered.sql`, "
        f"move {path} aside and `sqlite3 {path} < recovered.sql` (or restore a backup of it)"
    )


def corrupt_error(exc: BaseException, path: Path, what: str = "") -> StorageCorrupt | None:
    """The ``StorageCorrupt`` a sqlite3 error stands for (a damaged page, a file that is not a
    database, text that is not UTF-8), or None; ``what`` names what was being read."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return None
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    text = str(exc).lower()
    damaged = (
        code in (_CORRUPT, _NOTADB)
        or "malformed" in text
        or "not a database" in text
        or "could not decode" in text
    )
    if not damaged:
        return None
    where = f" (reading {what})" if what else ""
    if "could not decode" in text:  # the page is sound, a text cell in it is not UTF-8
        return StorageCorrupt(
            f"{path} is damaged{where}: text that is not valid UTF-8 ({exc}). To recover: "
            f"keep a copy of {path}, then delete the session or restore a backup of the file "
            "(`hermesctl doctor` lists the sessions affected)."
        )
    return StorageCorrupt(f"{path} is damaged{where}: {exc}. To recover: {recovery_hint(path)}.")


def check_not_lost(path: Path) -> None:
    """Refuse an empty ``path`` where a database existed (its WAL has data, or the marker
    written at creation is there): starting empty would silently lose every session."""
    try:
        if path.stat().st_size != 0:
            return
    except FileNotFoundError:
        return
    wal = path.with_name(path.name + "-wal")
    marker = path.with_name(CREATED_MARKER)
    why = (
        f"{wal} still holds data"
        if wal.exists() and wal.stat().st_size > 0
        else f"{marker} says it held one"
        if marker.exists()
        else None
    )
    if why is not None:
        raise StorageCorrupt(
            f"{path} is empty but a database existed ({why}): it was truncated. Restore a "
            f"backup of it; to start afresh on purpose, remove {path} and {marker}."
        )


def storage_error(
    exc: BaseException, path: Path, *, request: bool = True
) -> StorageUnavailable | None:
    """The ``StorageUnavailable`` a sqlite3/OS error stands for, or None if it is not one."""
    import errno

    if isinstance(exc, OSError):
        reason = {
            errno.ENOSPC: "full",
            errno.EDQUOT: "full",
            errno.EROFS: "readonly",
            errno.EACCES: "readonly",
            errno.EPERM: "readonly",
        }.get(exc.errno or 0, "io")
        detail = exc.strerror or str(exc)
    elif isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        text = str(exc).lower()
        if code == _FULL or "disk is full" in text:
            reason = "full"
        elif code == _READONLY or "readonly" in text or "read-only" in text:
            reason = "readonly"
        elif code == _CANTOPEN or "disk i/o" in text or "unable to open" in text:
            reason = "io"
        else:
            return None
        detail = str(exc)
    else:
        return None
    what = {
        "full": "the disk holding it is full; free some space",
        "readonly": "it is read-only; make it writable",
        "io": "the disk reported an error; check it",
    }[reason]
    tail = " Nothing of this request was stored." if request else ""
    return StorageUnavailable(f"cannot write {path} ({detail}): {what}, then retry.{tail}", reason)


def open_db_file(path: Path) -> sqlite3.Connection:
    """Create ``path`` private (0600) if needed, connect, set pragmas, migrate the schema.

    A disk that is full, read-only or failing raises ``StorageUnavailable``; a damaged file,
    or an empty one where a database existed, ``StorageCorrupt``.
    """
    check_not_lost(path)
    try:
        conn = _open_db_file(path)
    except (OSError, sqlite3.DatabaseError) as exc:
        mapped = storage_error(exc, path, request=False) or corrupt_error(exc, path)
        if mapped is None:
            raise
        raise mapped from exc
    marker = path.with_name(CREATED_MARKER)
    if not marker.exists():
        with contextlib.suppress(OSError):  # only a safeguard: its absence loses nothing
            marker.touch(mode=0o600)
    return conn


def _open_db_file(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600))
    os.chmod(path, 0o600)
    # used only by the thread that opens it (the store's DB thread): sqlite3 refuses any other
    conn = sqlite3.connect(path, check_same_thread=True, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    migrate(conn)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.chmod(side, 0o600)
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    """Apply the migrations this database lacks, one transaction each; return the version."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > len(MIGRATIONS):
        raise SchemaTooNew(
            f"state.db has schema version {version}, newer than this hermesd "
            f"understands ({len(MIGRATIONS)}); upgrade hermesd"
        )
    for index in range(version, len(MIGRATIONS)):
        try:
            conn.executescript(
                f"BEGIN IMMEDIATE;\n{MIGRATIONS[index]}\n"
                f"PRAGMA user_version = {index + 1};\nCOMMIT;"
            )
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        log.info("state.db migrated to schema version %d", index + 1)
    return len(MIGRATIONS)
