"""The library's file: experience rows in SQLite (WAL), one per (experience id, signer).

A row is one signer's copy of an experience: its text and fields, its BitDelta code (signs,
scales and the id of the baseline it was coded against; each baseline stored once), the float
vector where this node encoded the text itself, and usage counters. Keeping rows per signer
means a peer's copy of a lesson never replaces another signer's row (the author's own
included), and a tombstone removes only its signer's rows (issue "hostile node", finding 3).

Convergence (a CRDT): the rows are a function of the *set* of delivered items and tombstones,
whatever the order or the number of deliveries. For one (id, signer) delivered twice with
different codes, this node's own row wins (it holds the float), then the higher confidence,
then the smaller code digest. A tombstone wins over its (id, signer) forever; a local delete
tombstones the id for every signer. Capacity eviction drops rows and remembers them, so a
re-delivery does not bring them back. Peers' rows are cut in fair shares (``standing``,
`dsonet.library.eviction`: the largest holders first, keys not trusted by outcomes sharing one
share, so no key's volume pushes out another author's rows beyond its share), this node's own rows
last; within a signer, lowest quality first.

Every write is one transaction: a crash loses nothing acknowledged and leaves no half batch;
a caller can add its own statements to it (``within``: a node records the batch's hash there,
`dsonet.network.ledger`, whose tables share this file).

The file is readable by its owner only (0600, and SQLite gives its -wal and -shm the same mode).
A new file is created whole, under a temporary name renamed into place, so an existing file
of 0 bytes is never one this code left: it is refused as damaged like a file whose header or
pages are broken (`DamagedFile`), never opened as a new, empty library.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from dsonet.codec.profile import baseline_digest
from dsonet.errors import DsoError
from dsonet.experience import Experience, Provenance
from dsonet.library.eviction import TRUSTED, fair_cuts

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
    UNIQUE (id, signer)
);
CREATE INDEX IF NOT EXISTS experiences_id ON experiences (id);
CREATE INDEX IF NOT EXISTS experiences_signer ON experiences (signer, received);
CREATE TABLE IF NOT EXISTS tombstones (id TEXT NOT NULL, signer TEXT NOT NULL, deleted_ms INTEGER NOT NULL,
                                       PRIMARY KEY (id, signer));
CREATE TABLE IF NOT EXISTS evicted (id TEXT NOT NULL, signer TEXT NOT NULL, PRIMARY KEY (id, signer));
"""
_QUALITY = "confidence * (helped + 1.0) / (uses + 2.0) ASC, id DESC, signer DESC"  # eviction's order in a signer
_MAGIC = b"SQLite format 3\x00"
_DAMAGED_CODES = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}  # sqlite3 errors that mean the file, not the moment

_COLUMNS = ["seq", "id", "signer", "text", "domain", "confidence", "model", "timestamp_ms", "iteration", "lineage",
            "signs", "scales", "baseline_id", "code_digest", "received", "vector", "published", "uses", "helped",
            "added_ms"]
COLUMN = {c: i for i, c in enumerate(_COLUMNS)}
INDEX_COLUMNS = "seq, id, signer, domain, signs, scales, baseline_id, vector IS NOT NULL, received = 0, confidence"
# A row's own row first (it holds the float), then the most confident: the row that speaks for an id.
PREFERRED = "received ASC, confidence DESC, signer ASC"


class LibraryError(DsoError, ValueError):
    """A library operation that cannot be done as asked."""


class StorageError(DsoError):
    """The file could not be written (disk full, database locked, read-only): nothing was stored."""


class DamagedFile(LibraryError):
    """The library file cannot be read as a library: truncated, overwritten, not SQLite, a directory."""

    def __init__(self, path: Path, why: str):
        self.path, self.why = path, why
        super().__init__(f"{path} is damaged ({why}): restore it from a backup, or move it aside "
                         f"(mv {path} {path}.damaged) to start with an empty library")


def check_file(path: Path) -> None:
    """Raise `DamagedFile` where ``path`` exists and is not a whole SQLite file: a directory, 0 bytes,
    a header that is not SQLite's, or fewer bytes than its header says it holds (truncated).
    Reads the first 100 bytes only: the pages themselves are checked as SQLite reads them."""
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


def _create(path: Path) -> None:
    """A new, empty library file (mode 0600) with its schema, renamed into place whole."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    try:
        db = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
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

@dataclass(frozen=True)
class IngestResult:
    added: list[str] = field(default_factory=list)
    duplicates: int = 0  # already held (idempotent re-delivery)
    rejected: int = 0  # tombstoned, evicted, or left out by `keep`
    evicted: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Written:
    """What one write changed, for the in-memory parts to follow: the rows to (re)index, as
    `INDEX_COLUMNS` tuples in seq order (what was just written: the index need not read it back),
    and the seqs gone."""

    result: IngestResult
    rows: list[tuple]
    removed: list[int]


class RowStore:
    def __init__(self, path: Path, capacity: int | None = None, standing: Callable[[str], int] | None = None):
        """``standing``: a peer's standing at capacity, HIDDEN, STRANGER or TRUSTED (`dsonet.library.eviction`)."""
        self.path, self.capacity, self.standing = path, capacity, standing
        check_file(path)
        if not os.path.lexists(path):
            _create(path)
        _owner_only(path)
        self.db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30)
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")  # an acknowledged commit survives power loss too
            if self._columns("experiences") and "signer" not in self._columns("experiences"):
                self._migrate_v1()
            self._create_tables()
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as exc:
            self.db.close()
            if damaged(exc):
                raise DamagedFile(path, str(exc)) from None
            raise StorageError(f"{path}: {exc}; check the file and its folder (free space, permissions, "
                               "another process holding it), then start again") from None

    def _create_tables(self) -> None:
        for statement in _SCHEMA.split(";"):  # one by one: executescript would commit an open transaction
            if statement.strip():
                self.db.execute(statement)

    def _columns(self, table: str) -> list[str]:
        return [r[1] for r in self.db.execute(f"PRAGMA table_info({table})")]

    def _migrate_v1(self) -> None:
        """Schema 1 kept one row per id: each becomes its signer's row (the provenance's node id);
        its tombstones and evictions covered the id for everyone, and still do."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for table in ("experiences", "tombstones", "evicted"):
                self.db.execute(f"ALTER TABLE {table} RENAME TO {table}_v1")
            self._create_tables()
            cols = ", ".join(c for c in _COLUMNS if c not in ("seq", "signer"))
            self.db.execute(f"INSERT INTO experiences (seq, signer, {cols}) SELECT seq, node_id, {cols} FROM experiences_v1"
                            " ORDER BY seq")
            self.db.execute(f"INSERT INTO tombstones SELECT id, '{ANY_SIGNER}', deleted_ms FROM tombstones_v1")
            self.db.execute(f"INSERT INTO evicted SELECT id, '{ANY_SIGNER}' FROM evicted_v1")
            for table in ("experiences", "tombstones", "evicted"):
                self.db.execute(f"DROP TABLE {table}_v1")
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ meta and baselines

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def baselines(self) -> list[tuple[int, np.ndarray]]:
        return [(bid, np.frombuffer(blob, "<f4")) for bid, blob in self.db.execute("SELECT id, vector FROM baselines ORDER BY id")]

    def baseline(self, bid: int) -> np.ndarray:
        (blob,) = self.db.execute("SELECT vector FROM baselines WHERE id = ?", (bid,)).fetchone()
        return np.frombuffer(blob, "<f4")

    def baseline_named(self, digest: str) -> np.ndarray:
        """The baseline the file stores under this SHA-256; a clear error when it holds none."""
        row = self.db.execute("SELECT vector FROM baselines WHERE digest = ?", (digest,)).fetchone()
        if row is None:
            raise LibraryError(f"{self.path}: its profile names baseline {digest[:12]}, which the file does not hold; "
                               "the file is damaged: restore it, or start a new library")
        return np.frombuffer(row[0], "<f4")

    def baseline_id(self, digest: str) -> int | None:
        row = self.db.execute("SELECT id FROM baselines WHERE digest = ?", (digest,)).fetchone()
        return row[0] if row else None

    def add_baseline(self, baseline: np.ndarray) -> int:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            bid = self._baseline_id(baseline)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return bid

    def _baseline_id(self, baseline: np.ndarray) -> int:
        blob, digest = np.asarray(baseline, "<f4").tobytes(), baseline_digest(baseline)
        row = self.db.execute("SELECT id FROM baselines WHERE digest = ?", (digest,)).fetchone()
        if row:
            return row[0]
        return self.db.execute("INSERT INTO baselines (digest, vector) VALUES (?, ?)", (digest, blob)).lastrowid

    # ------------------------------------------------------------------ writing

    def write(self, exps: list[Experience], signer: str | None, signs: np.ndarray, scales: np.ndarray,
              baseline: np.ndarray, vectors: list | np.ndarray | None, received: bool,
              within: Callable[[], None] | None = None) -> Written:
        """Store rows in one transaction; ``signer`` None: each experience's provenance node id (local rows).
        ``within``: the caller's own statements on this connection, run inside that transaction."""
        now = int(time.time() * 1000)
        added, dup, rejected = [], 0, 0
        indexed: dict[int, tuple] = {}  # seq -> its INDEX_COLUMNS tuple, as written
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if within is not None:
                within()
            bid = self._baseline_id(baseline)
            base_blob = np.asarray(baseline, "<f4").tobytes()  # in every row's code digest: converted once
            keys = [(e.id, e.provenance.node_id if signer is None else signer) for e in exps]
            blocked = self.blocked(keys)
            for i, (exp, (eid, who)) in enumerate(zip(exps, keys)):  # per-record SQL; vector work is the index's
                if (eid, who) in blocked:
                    rejected += 1
                    continue
                sign_blob, scale_blob = signs[i].astype("<u4").tobytes(), scales[i].astype("<f4").tobytes()
                digest = _code_digest(sign_blob, scale_blob, base_blob)
                vec = None if vectors is None or vectors[i] is None else np.asarray(vectors[i], "<f4").tobytes()
                prov = exp.provenance
                row = self.db.execute("SELECT seq, received, confidence, code_digest, vector IS NOT NULL"
                                      " FROM experiences WHERE id = ? AND signer = ?", (eid, who)).fetchone()
                if row is None:
                    seq = self.db.execute(
                        "INSERT INTO experiences (id, signer, text, domain, confidence, model, timestamp_ms, iteration,"
                        " lineage, signs, scales, baseline_id, code_digest, received, vector, added_ms)"
                        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (eid, who, exp.text, exp.domain, float(exp.confidence), prov.model, prov.timestamp_ms,
                         prov.iteration, eid, sign_blob, scale_blob, bid, digest, int(received), vec, now)).lastrowid
                    added.append(eid)
                    indexed[seq] = (seq, eid, who, exp.domain, sign_blob, scale_blob, bid, int(vec is not None),
                                    int(not received), float(exp.confidence))
                    continue
                dup += 1
                if (-int(received), float(exp.confidence), -_rank(digest)) > (-row[1], row[2], -_rank(row[3])):
                    self.db.execute(
                        "UPDATE experiences SET confidence=?, model=?, timestamp_ms=?, iteration=?, signs=?, scales=?,"
                        " baseline_id=?, code_digest=?, received=?, vector=COALESCE(?, vector) WHERE seq=?",
                        (float(exp.confidence), prov.model, prov.timestamp_ms, prov.iteration, sign_blob, scale_blob,
                         bid, digest, int(received), vec, row[0]))
                    indexed[row[0]] = (row[0], eid, who, exp.domain, sign_blob, scale_blob, bid,
                                       int(vec is not None or bool(row[4])), int(not received), float(exp.confidence))
            evicted = self._evict_over_capacity()
            self.db.execute("COMMIT")
        except BaseException as exc:
            self._rollback(exc)
        gone = [s for _, s in evicted]
        kept = sorted(indexed.keys() - set(gone))  # a row evicted in its own write is not indexed
        return Written(IngestResult(added, dup, rejected, [e for e, _ in evicted]), [indexed[s] for s in kept], gone)

    def _rollback(self, exc: BaseException) -> None:
        """Undo the open transaction and re-raise; a failing disk or lock becomes a `StorageError`."""
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError):
            raise StorageError(f"{self.path}: {exc}; nothing was stored (free disk space, or wait for the other "
                               "writer), then retry") from exc
        raise exc

    def blocked(self, keys: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """The (id, signer) keys a tombstone or an eviction keeps out."""
        keys = list(keys)
        ids = sorted({i for i, _ in keys})
        found: set[tuple[str, str]] = set()
        for start in range(0, len(ids), 400):  # SQLite's bound-parameter limit
            part = ids[start : start + 400]
            marks = ",".join("?" * len(part))
            found.update(self.db.execute(f"SELECT id, signer FROM tombstones WHERE id IN ({marks}) UNION "
                                         f"SELECT id, signer FROM evicted WHERE id IN ({marks})", part + part))
        return {(i, s) for i, s in keys if (i, s) in found or (i, ANY_SIGNER) in found}

    def _evict_over_capacity(self) -> list[tuple[str, int]]:
        """Past capacity, fair shares (`dsonet.library.eviction`): peers' rows cut per signer, the
        largest holders first, own rows last; within a signer, lowest quality first."""
        if self.capacity is None:
            return []
        (n,) = self.db.execute("SELECT COUNT(*) FROM experiences").fetchone()
        if n <= self.capacity:
            return []
        # from the (signer, received) index alone: a full library is at capacity at every write
        held = dict(self.db.execute("SELECT signer, COUNT(*) FROM experiences WHERE received = 1 GROUP BY signer"))
        # no standing given (a library outside a node): every peer its own share
        standing = {s: TRUSTED if self.standing is None else self.standing(s) for s in held}
        cuts = fair_cuts(held, standing, min(n - self.capacity, sum(held.values())))
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS evict_cut (signer TEXT PRIMARY KEY, n INTEGER NOT NULL)")
        self.db.execute("DELETE FROM evict_cut")
        self.db.executemany("INSERT INTO evict_cut VALUES (?, ?)", cuts.items())
        # quality: confidence scaled by the observed help rate (Laplace-smoothed); ties by id
        doomed = self.db.execute(
            "SELECT id, signer, seq FROM (SELECT id, signer, seq, ROW_NUMBER() OVER (PARTITION BY signer ORDER BY"
            f" {_QUALITY}) AS pos FROM experiences WHERE received = 1 AND signer IN (SELECT signer FROM evict_cut))"
            " JOIN evict_cut USING (signer) WHERE pos <= evict_cut.n").fetchall()
        if n - len(doomed) > self.capacity:
            doomed += self.db.execute(f"SELECT id, signer, seq FROM experiences WHERE received = 0 ORDER BY {_QUALITY}"
                                      " LIMIT ?", (n - len(doomed) - self.capacity,)).fetchall()
        self.db.executemany("INSERT OR IGNORE INTO evicted VALUES (?, ?)", [(i, s) for i, s, _ in doomed])
        self.db.executemany("DELETE FROM experiences WHERE seq = ?", [(q,) for _, _, q in doomed])
        return [(i, q) for i, _, q in doomed]

    def tombstone(self, ids: list[str], signer: str = ANY_SIGNER) -> tuple[list[str], list[int]]:
        """Record tombstones and drop the rows they cover: ``signer``'s rows, or every row of the id
        for `ANY_SIGNER`. Returns (ids that had a row, seqs removed)."""
        now = int(time.time() * 1000)
        where = "id = ?" if signer == ANY_SIGNER else "id = ? AND signer = ?"
        self.db.execute("BEGIN IMMEDIATE")
        try:
            gone = [(i, seq) for i in ids for (seq,) in
                    self.db.execute(f"SELECT seq FROM experiences WHERE {where}", (i,) if signer == ANY_SIGNER else (i, signer))]
            self.db.executemany("INSERT OR IGNORE INTO tombstones VALUES (?, ?, ?)", [(i, signer, now) for i in ids])
            self.db.executemany("DELETE FROM experiences WHERE seq = ?", [(seq,) for _, seq in gone])
            self.db.execute("COMMIT")
        except BaseException as exc:
            self._rollback(exc)
        return list(dict.fromkeys(i for i, _ in gone)), [seq for _, seq in gone]

    def tombstones(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT id FROM tombstones ORDER BY id")]

    def set_lineage(self, exp_id: str, lineage: str) -> None:
        self.db.execute("UPDATE experiences SET lineage = ? WHERE id = ?", (lineage, exp_id))

    def lineage(self, exp_id: str) -> str | None:
        row = self.db.execute("SELECT lineage FROM experiences WHERE id = ?", (exp_id,)).fetchone()
        return row[0] if row else None

    def record_outcome(self, exp_id: str, helped: bool) -> int:
        """Count one use of every row of an experience; returns how many rows were counted."""
        return self.db.execute("UPDATE experiences SET uses = uses + 1, helped = helped + ? WHERE id = ?",
                               (int(helped), exp_id)).rowcount

    def outcomes(self, exp_id: str) -> tuple[int, int]:
        """(uses, helped) of an experience, summed over its rows."""
        row = self.db.execute("SELECT COALESCE(SUM(uses), 0), COALESCE(SUM(helped), 0) FROM experiences WHERE id = ?",
                              (exp_id,)).fetchone()
        return int(row[0]), int(row[1])

    def unpublished(self, limit: int | None = None) -> list[tuple]:
        """This node's own rows not yet published, oldest first: full rows (see `row_experience`)."""
        q = "SELECT * FROM experiences WHERE received = 0 AND published = 0 ORDER BY seq"
        return self.db.execute(q + (" LIMIT ?" if limit else ""), (limit,) if limit else ()).fetchall()

    def count_unpublished(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM experiences WHERE received = 0 AND published = 0").fetchone()[0]

    def mark_published(self, ids: list[str]) -> None:
        self.db.executemany("UPDATE experiences SET published = 1 WHERE id = ? AND received = 0", [(i,) for i in ids])

    # ------------------------------------------------------------------ reading

    def index_rows(self) -> Iterable[list[tuple]]:
        """Chunks of `INDEX_COLUMNS` tuples of every row, in seq order (what an open indexes)."""
        cur = self.db.execute(f"SELECT {INDEX_COLUMNS} FROM experiences ORDER BY seq")
        while chunk := cur.fetchmany(8192):
            yield chunk

    def get(self, exp_id: str) -> Experience | None:
        row = self.db.execute(f"SELECT * FROM experiences WHERE id = ? ORDER BY {PREFERRED} LIMIT 1", (exp_id,)).fetchone()
        return None if row is None else row_experience(row)

    def by_seq(self, seqs: list[int]) -> dict[int, Experience]:
        out = {}
        for start in range(0, len(seqs), 400):
            part = seqs[start : start + 400]
            marks = ",".join("?" * len(part))
            out.update((r[0], row_experience(r)) for r in self.db.execute(
                f"SELECT * FROM experiences WHERE seq IN ({marks})", part))
        return out

    def all(self) -> list[Experience]:
        """One experience per id (its preferred row), sorted by id."""
        rows = self.db.execute(f"SELECT * FROM experiences ORDER BY id, {PREFERRED}").fetchall()
        return [row_experience(r) for i, r in enumerate(rows) if i == 0 or rows[i - 1][1] != r[1]]

    def floats(self, seqs: list[int]) -> dict[int, np.ndarray]:
        """The float vectors this node holds for some rows, read from the file (30 KB each at d = 7680)."""
        out = {}
        for start in range(0, len(seqs), 400):
            part = seqs[start : start + 400]
            marks = ",".join("?" * len(part))
            out.update((s, np.frombuffer(v, "<f4")) for s, v in self.db.execute(
                f"SELECT seq, vector FROM experiences WHERE seq IN ({marks}) AND vector IS NOT NULL", part))
        return out

    def counts(self) -> dict:
        (n,) = self.db.execute("SELECT COUNT(*) FROM experiences").fetchone()
        (ids,) = self.db.execute("SELECT COUNT(DISTINCT id) FROM experiences").fetchone()
        (local,) = self.db.execute("SELECT COUNT(*) FROM experiences WHERE vector IS NOT NULL").fetchone()
        (n_base,) = self.db.execute("SELECT COUNT(*) FROM baselines").fetchone()
        domains = dict(self.db.execute("SELECT domain, COUNT(DISTINCT id) FROM experiences GROUP BY domain ORDER BY domain"))
        return {"experiences": ids, "rows": n, "with_float_vector": local, "baselines": n_base, "domains": domains}

    def file_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*"))


def row_experience(row: tuple) -> Experience:
    """An experience from a full row; its provenance's node id is the row's signer."""
    c = COLUMN
    prov = Provenance(row[c["signer"]], row[c["model"]], row[c["timestamp_ms"]], row[c["iteration"]])
    return Experience(row[c["text"]], row[c["domain"]], row[c["confidence"]], prov)


def row_code(rows: list[tuple], group_size: int, dim: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(signs (m, G, W), scales (m, G), baseline ids) of full rows."""
    n_words = -(-group_size // 32)
    g = dim // group_size
    signs = np.frombuffer(b"".join(r[COLUMN["signs"]] for r in rows), "<u4").reshape(len(rows), g, n_words)
    scales = np.frombuffer(b"".join(r[COLUMN["scales"]] for r in rows), "<f4").reshape(len(rows), g)
    return signs, scales, [r[COLUMN["baseline_id"]] for r in rows]


def _code_digest(signs: bytes, scales: bytes, baseline: bytes) -> str:
    """SHA-256 of a row's code: signs, scales, then the baseline (30 KB at d = 7680, not copied again)."""
    h = hashlib.sha256(signs + scales)
    h.update(baseline)
    return h.hexdigest()


def _rank(digest: str) -> int:
    return int(digest[:15], 16)
