"""The library's file on disk: its schema, its creation and opening, and a damaged file told apart.

The file is readable by its owner only (0600, and SQLite gives its -wal and -shm the same mode).
A new file is created whole, under a temporary name renamed into place, so an existing file
of 0 bytes is never one this code left: it is refused as damaged like a file whose header or
pages are broken (`DamagedFile`), never opened as a new, empty library. What the rows mean and
how they are written: `dsonet.library.store.rows`.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import NamedTuple

from dsonet.library.errors import DamagedFile, StorageError

ANY_SIGNER = "*"  # a tombstone or eviction that covers every signer's row of an id
SCHEMA_VERSION = 2  # 1: one row per id (migrated on open)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS baselines (id INTEGER PRIMARY KEY, digest TEXT UNIQUE NOT NULL, vector BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS experiences (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL, signer TEXT NOT NULL, text TEXT NOT NULL, domain TEXT NOT NULL, confidence REAL NOT NULL,
    model TEXT NOT NULL, timestamp_ms INTEGER NOT NULL, iteration INTEGER NOT NULL, lineage TEXT NOT NULL,
    signs BLOB NOT NULL, scales BLOB NOT NULL, baseline_id INTEGER NOT NULL REFERENCES baselines(id),
    code_digest TEXT NOT NULL, received INTEGER NOT NULL,
    vector BLOB, published INTEGER NOT NULL DEFAULT 0,
    uses INTEGER NOT NULL DEFAULT 0, helped INTEGER NOT NULL DEFAULT 0, added_ms INTEGER NOT NULL,
    scope TEXT NOT NULL DEFAULT '', episodes INTEGER NOT NULL DEFAULT 0, agents INTEGER NOT NULL DEFAULT 0,
    UNIQUE (id, signer)
);
CREATE INDEX IF NOT EXISTS experiences_signer ON experiences (signer, received);
CREATE INDEX IF NOT EXISTS experiences_scope ON experiences (scope, id) WHERE scope != '';
CREATE TABLE IF NOT EXISTS tombstones (id TEXT NOT NULL, signer TEXT NOT NULL, deleted_ms INTEGER NOT NULL,
                                       PRIMARY KEY (id, signer));
CREATE TABLE IF NOT EXISTS evicted (id TEXT NOT NULL, signer TEXT NOT NULL, PRIMARY KEY (id, signer));
"""
# columns added by ALTER since schema 2, oldest first, as the schema declares them: a file from before gets them
_ADDED = {"scope": "TEXT NOT NULL DEFAULT ''", "episodes": "INTEGER NOT NULL DEFAULT 0",
          "agents": "INTEGER NOT NULL DEFAULT 0"}
_MAGIC = b"SQLite format 3\x00"
_DAMAGED_CODES = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}  # sqlite3 errors that mean the file, not the moment
_PAGE_PROBLEMS_SAID = 3  # a message names the first few broken pages, not every one


class StoredRow(NamedTuple):
    """A full row of the experiences table (`SELECT *`), its columns in the schema's order."""

    seq: int
    id: str
    signer: str
    text: str
    domain: str
    confidence: float
    model: str
    timestamp_ms: int
    iteration: int
    lineage: str
    signs: bytes  # the BitDelta code's sign words, little-endian uint32
    scales: bytes  # its group scales, little-endian float32
    baseline_id: int
    code_digest: str
    received: int  # 0: this node's own row
    vector: bytes | None  # the float vector, where this node encoded the text itself
    published: int
    uses: int
    helped: int
    added_ms: int
    scope: str  # the lesson's scope, canonical ('' for none; `dsonet.scope`): a column added by ALTER, so last
    episodes: int  # its evidence, where it was learned from traffic (`Provenance`): columns added by ALTER too
    agents: int


COLUMNS = StoredRow._fields


def connect(path: Path) -> sqlite3.Connection:
    """The library file at ``path``, opened for the row store: checked whole (`check_file`, then every
    page: `_check_pages`), created
    where it is missing, made owner-only, migrated from schema 1, its tables there. Raises
    `DamagedFile` for a file that is not a library and `StorageError` for one that cannot be used now."""
    check_file(path)
    if not os.path.lexists(path):
        _create(path)
    _owner_only(path)
    db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # an acknowledged commit survives power loss too
        _check_pages(db, path)
        if _columns(db, "experiences") and "signer" not in _columns(db, "experiences"):
            _migrate_v1(db)
        held = _columns(db, "experiences")
        for column, declared in _ADDED.items():
            if held and column not in held:
                db.execute(f"ALTER TABLE experiences ADD COLUMN {column} {declared}")
        _create_tables(db)
        # UNIQUE (id, signer)'s own index serves every lookup by id; a second index on id alone cost
        # each write a random page more per row (COMMIT 0.31 -> 0.19 s over a 10,000-row round)
        db.execute("DROP INDEX IF EXISTS experiences_id")
        db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    except DamagedFile:
        db.close()
        raise
    except sqlite3.DatabaseError as exc:
        db.close()
        if damaged(exc):
            raise DamagedFile(path, str(exc)) from None
        raise StorageError(f"{path}: {exc}; check the file and its folder (free space, permissions, "
                           "another process holding it), then start again") from None
    return db


def check_file(path: Path) -> None:
    """Raise `DamagedFile` where ``path`` exists and is not a whole SQLite file: a directory, 0 bytes,
    a header that is not SQLite's, or fewer bytes than its header says it holds (truncated).
    Reads the first 100 bytes only: the pages are checked once SQLite has the file open (`_check_pages`)."""
    if not os.path.lexists(path):
        return
    if path.is_dir():
        raise DamagedFile(path, "a directory, not a file")
    size = path.stat().st_size
    if size == 0:
        raise DamagedFile(path, "0 bytes; a library file is never left empty, so its data was lost")
    with open(path, "rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(_MAGIC):
        raise DamagedFile(path, f"its first bytes are not an SQLite header ({size} bytes)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages, counter, valid_for = (int.from_bytes(header[i:i + 4], "big") for i in (28, 24, 92))
    if page_size < 512 or page_size & (page_size - 1):
        raise DamagedFile(path, f"its header names page size {page_size}")
    wal = Path(f"{path}-wal")
    pending = wal.exists() and wal.stat().st_size > 0  # a checkpoint cut short: the log holds the pages still to copy
    if counter == valid_for and not pending and pages * page_size > size:  # the header's count is current
        raise DamagedFile(path, f"truncated: {size} bytes where its header counts {pages * page_size}")


def _check_pages(db: sqlite3.Connection, path: Path) -> None:
    """Raise `DamagedFile` where a page of any table is broken (SQLite's ``quick_check``: every page's
    structure, without comparing indexes to their tables: 0.12 s for a 124 MB file in the page cache, 2 s
    from disk). Without it, a broken page
    of a table read only later (the outbox, the deferred queue) failed the node once it served."""
    said = [row[0] for row in db.execute(f"PRAGMA quick_check({_PAGE_PROBLEMS_SAID})")]
    if said != ["ok"]:
        problems = [line for s in said for line in s.splitlines() if line.strip() and not line.startswith("***")]
        raise DamagedFile(path, "malformed pages: " + "; ".join(problems))


def _create(path: Path) -> None:
    """A new, empty library file (mode 0600) with its schema, renamed into place whole."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    try:
        db = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            _create_tables(db)
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        finally:
            db.close()  # the last connection checkpoints and removes the temporary -wal and -shm
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)


def _owner_only(path: Path) -> None:
    """Files this node made before they were created 0600: readable by their owner only from now on."""
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            if p.stat().st_mode & 0o077:
                p.chmod(0o600)
        except OSError:
            pass  # not there, or not ours to change: SQLite says so if it cannot use it


def damaged(exc: sqlite3.Error) -> bool:
    """Whether an sqlite3 error means the file is damaged (rather than busy, full or read-only)."""
    return getattr(exc, "sqlite_errorname", "") in _DAMAGED_CODES


def _create_tables(db: sqlite3.Connection) -> None:
    for statement in _SCHEMA.split(";"):  # one by one: executescript would commit an open transaction
        if statement.strip():
            db.execute(statement)


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def _migrate_v1(db: sqlite3.Connection) -> None:
    """Schema 1 kept one row per id: each becomes its signer's row (the provenance's node id);
    its tombstones and evictions covered the id for everyone, and still do."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for table in ("experiences", "tombstones", "evicted"):
            db.execute(f"ALTER TABLE {table} RENAME TO {table}_v1")
        _create_tables(db)
        cols = ", ".join(c for c in COLUMNS if c not in ("seq", "signer", *_ADDED))
        db.execute(f"INSERT INTO experiences (seq, signer, {cols}) SELECT seq, node_id, {cols} FROM experiences_v1"
                   " ORDER BY seq")
        db.execute(f"INSERT INTO tombstones SELECT id, '{ANY_SIGNER}', deleted_ms FROM tombstones_v1")
        db.execute(f"INSERT INTO evicted SELECT id, '{ANY_SIGNER}' FROM evicted_v1")
        for table in ("experiences", "tombstones", "evicted"):
            db.execute(f"DROP TABLE {table}_v1")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
