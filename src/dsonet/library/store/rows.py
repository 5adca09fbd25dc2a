"""The library's file: experience rows in SQLite (WAL), one per (experience id, signer).

A row is one signer's copy of an experience: its text and fields, its BitDelta code (signs,
scales and the id of the baseline it was coded against; each baseline stored once), the float
vector where this node encoded the text itself, and usage counters. Keeping rows per signer
means a peer's copy of a lesson never replaces another signer's row (the author's own
included), and a tombstone removes only its signer's rows.

Convergence (a CRDT): the rows are a function of the *set* of delivered items and tombstones,
whatever the order or the number of deliveries. For one (id, signer) delivered twice with
different codes, this node's own row wins (it holds the float), then the higher confidence,
then the smaller code digest; its evidence (`Provenance.episodes`, ``agents``: counts that only grow)
is the largest delivered, whichever code stays. A tombstone wins over its (id, signer) forever; a local delete
tombstones the id for every signer. Capacity eviction drops rows and remembers them, so a
re-delivery does not bring them back. Peers' rows are cut in fair shares (``standing``,
`dsonet.library.store.eviction`: the largest holders first, keys not trusted by outcomes sharing one
share, so no key's volume pushes out another author's rows beyond its share), this node's own rows
last; within a signer, lowest quality first.

Every write is one transaction: a crash loses nothing acknowledged and leaves no half batch;
a caller can add its own statements to it (``within``: a node records the batch's hash there,
`dsonet.network.ledger`, whose tables share this file).

The file itself (its schema, creation, a damaged file told apart): `dsonet.library.store.file`; what a
row is read as: `dsonet.library.store.records`.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple

import numpy as np

from dsonet.codec.profile import baseline_digest
from dsonet.experience import Experience, check_evidence
from dsonet.library.errors import LibraryError, StorageError
from dsonet.library.store.eviction import TRUSTED, fair_cuts
from dsonet.library.store.file import ANY_SIGNER, COLUMNS, StoredRow, connect
from dsonet.library.store.records import INDEX_COLUMNS, Copy, IndexRow, IngestResult, Written, row_experience

_QUALITY = "confidence * (helped + 1.0) / (uses + 2.0) ASC, id DESC, signer DESC"  # eviction's order in a signer
_MAX_BOUND = 400  # values bound in one `IN (...)` list: under SQLite's bound-parameter limit

# An id's own row first (it holds the float), then the most confident: the row that speaks for an id.
PREFERRED = "received ASC, confidence DESC, signer ASC"


class _Present(NamedTuple):
    """The row a write finds for an (id, signer) it delivers again: what decides which code stays."""

    seq: int
    received: int
    confidence: float
    code_digest: str
    held: int  # the row holds a float vector


class RowStore:
    def __init__(self, path: Path, capacity: int | None = None, standing: Callable[[str], int] | None = None):
        """``standing``: a peer's standing at capacity, HIDDEN, STRANGER or TRUSTED (`dsonet.library.store.eviction`)."""
        self.path, self.capacity, self.standing = path, capacity, standing
        self.db = connect(path)

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
            bid = self._baseline_id(baseline, baseline_digest(baseline))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return bid

    def _baseline_id(self, baseline: np.ndarray, digest: str) -> int:
        blob = np.asarray(baseline, "<f4").tobytes()
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
        indexed: dict[int, IndexRow] = {}  # seq -> the row as written
        inserts: dict[int, tuple] = {}  # seq -> the new row's values
        updates: dict[int, tuple] = {}  # seq -> the better code's values for a row held already
        grown: list[tuple] = []  # (episodes, agents, seq): the evidence a row held already is delivered with
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if within is not None:
                within()
            base_digest = baseline_digest(baseline)
            bid = self._baseline_id(baseline, base_digest)
            base_named = base_digest.encode()  # every row's code digest names its baseline by the baseline's own
            keys = [(e.id, e.provenance.node_id if signer is None else signer) for e in exps]
            blocked = self.blocked(keys)
            present = self._present(keys)
            # the write lock is held (BEGIN IMMEDIATE): the next seqs are ours to number, so the rows go
            # in with one executemany instead of one statement each
            next_seq = self._next_seq()
            for i, (exp, key) in enumerate(zip(exps, keys)):  # per-record choices; vector work is the index's
                if key in blocked:
                    rejected += 1
                    continue
                eid, who = key
                sign_blob, scale_blob = signs[i].astype("<u4").tobytes(), scales[i].astype("<f4").tobytes()
                digest = _code_digest(sign_blob, scale_blob, base_named)
                vec = None if vectors is None or vectors[i] is None else np.asarray(vectors[i], "<f4").tobytes()
                prov = exp.provenance
                held = present.get(key)
                if held is None:
                    seq, next_seq = next_seq, next_seq + 1
                    inserts[seq] = (seq, eid, who, exp.text, exp.domain, float(exp.confidence), prov.model,
                                    prov.timestamp_ms, prov.iteration, eid, sign_blob, scale_blob, bid, digest,
                                    int(received), vec, now, str(exp.scope), prov.episodes, prov.agents)
                    present[key] = _Present(seq, int(received), float(exp.confidence), digest, int(vec is not None))
                    added.append(eid)
                    indexed[seq] = IndexRow(seq, eid, who, exp.domain, sign_blob, scale_blob, bid,
                                            int(vec is not None), int(not received), float(exp.confidence))
                    continue
                dup += 1
                if prov.episodes:
                    grown.append((prov.episodes, prov.agents, held.seq))
                if (-int(received), float(exp.confidence), -_rank(digest)) <= \
                        (-held.received, held.confidence, -_rank(held.code_digest)):
                    continue
                keeps = int(vec is not None or bool(held.held))
                present[key] = _Present(held.seq, int(received), float(exp.confidence), digest, keeps)
                if held.seq in inserts:  # the same row twice in one write: the better code is inserted
                    inserts[held.seq] = (*inserts[held.seq][:5], float(exp.confidence), prov.model, prov.timestamp_ms,
                                         prov.iteration, eid, sign_blob, scale_blob, bid, digest, int(received),
                                         vec if vec is not None else inserts[held.seq][15], now,
                                         *inserts[held.seq][17:])  # scope (in the id: the same) and evidence
                else:
                    updates[held.seq] = (float(exp.confidence), prov.model, prov.timestamp_ms, prov.iteration,
                                         sign_blob, scale_blob, bid, digest, int(received), vec, held.seq)
                indexed[held.seq] = IndexRow(held.seq, eid, who, exp.domain, sign_blob, scale_blob, bid, keeps,
                                             int(not received), float(exp.confidence))
            self.db.executemany(
                "INSERT INTO experiences (seq, id, signer, text, domain, confidence, model, timestamp_ms, iteration,"
                " lineage, signs, scales, baseline_id, code_digest, received, vector, added_ms, scope, episodes,"
                " agents) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", inserts.values())
            self.db.executemany(
                "UPDATE experiences SET confidence=?, model=?, timestamp_ms=?, iteration=?, signs=?, scales=?,"
                " baseline_id=?, code_digest=?, received=?, vector=COALESCE(?, vector) WHERE seq=?", updates.values())
            self.db.executemany("UPDATE experiences SET episodes = MAX(episodes, ?), agents = MAX(agents, ?)"
                                " WHERE seq = ?", grown)
            evicted = self._evict_over_capacity()
            self.db.execute("COMMIT")
        except BaseException as exc:
            self._rollback(exc)
        gone = [s for _, s in evicted]
        kept = sorted(indexed.keys() - set(gone))  # a row evicted in its own write is not indexed
        return Written(IngestResult(added, dup, rejected, [e for e, _ in evicted]), [indexed[s] for s in kept], gone)

    def _present(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], _Present]:
        """The rows held already for these (id, signer) keys, read in a few queries rather than one a key."""
        wanted = set(keys)
        found = self._select_in("SELECT id, signer, seq, received, confidence, code_digest, vector IS NOT NULL"
                                " FROM experiences WHERE id IN ({marks})", sorted({i for i, _ in wanted}))
        return {(i, s): _Present(*rest) for i, s, *rest in found if (i, s) in wanted}

    def _next_seq(self) -> int:
        """The seq AUTOINCREMENT would give the next row: past every seq the table ever held."""
        (n,) = self.db.execute("SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'experiences'), 0),"
                               " COALESCE((SELECT MAX(seq) FROM experiences), 0))").fetchone()
        return n + 1

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
        found = set(self._select_in("SELECT id, signer FROM tombstones WHERE id IN ({marks}) UNION "
                                    "SELECT id, signer FROM evicted WHERE id IN ({marks})", sorted({i for i, _ in keys})))
        return {(i, s) for i, s in keys if (i, s) in found or (i, ANY_SIGNER) in found}

    def _evict_over_capacity(self) -> list[tuple[str, int]]:
        """Past capacity, fair shares (`dsonet.library.store.eviction`): peers' rows cut per signer, the
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

    def adopt(self, owner: str) -> int:
        """This file's own rows written before it had a signer (``signer`` '': `dso add` before `dso node
        start`) become ``owner``'s, who is named in the file's meta; where the owner holds the same lesson
        already, the unsigned copy goes. Returns the rows adopted."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            adopted = self.db.execute("UPDATE OR IGNORE experiences SET signer = ? WHERE signer = '' AND received = 0",
                                      (owner,)).rowcount
            self.db.execute("DELETE FROM experiences WHERE signer = '' AND received = 0")
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('owner', ?)", (owner,))
            self.db.execute("COMMIT")
        except BaseException as exc:
            self._rollback(exc)
        return adopted

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
        uses, helped = self.db.execute("SELECT COALESCE(SUM(uses), 0), COALESCE(SUM(helped), 0) FROM experiences"
                                       " WHERE id = ?", (exp_id,)).fetchone()
        return int(uses), int(helped)

    def scopes(self, ids: list[str] | None = None) -> dict[str, str]:
        """id -> its lesson's scope (canonical; the scope is part of the id, so every row of an id has one), of
        ``ids``, or (None) of every scoped lesson held (read off the partial index on the column)."""
        if ids is None:
            return dict(self.db.execute("SELECT DISTINCT id, scope FROM experiences WHERE scope != ''"))
        return dict(self._select_in("SELECT DISTINCT id, scope FROM experiences WHERE id IN ({marks})", ids))

    def unpublished(self, limit: int | None = None) -> list[StoredRow]:
        """This node's own rows not yet published, oldest first."""
        q = "SELECT * FROM experiences WHERE received = 0 AND published = 0 ORDER BY seq"
        return self._stored(q + (" LIMIT ?" if limit else ""), (limit,) if limit else ())

    def count_unpublished(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM experiences WHERE received = 0 AND published = 0").fetchone()[0]

    def add_evidence(self, exp_id: str, episodes: int, agents: int) -> Experience | None:
        """``episodes`` and ``agents`` more of an experience's own row's evidence (`Library.add_evidence`); the
        row is to be published again. Its experience as it now stands, or None where no own row is held."""
        check_evidence(episodes, agents, within="")
        self.db.execute("BEGIN IMMEDIATE")
        try:
            rows = self._stored("SELECT * FROM experiences WHERE id = ? AND received = 0 ORDER BY seq LIMIT 1",
                                (exp_id,))
            if rows:
                row = rows[0]._replace(episodes=rows[0].episodes + episodes, agents=rows[0].agents + agents)
                exp = row_experience(row)  # refuses counts past their bound before anything is written
                self.db.execute("UPDATE experiences SET episodes = ?, agents = ?, published = 0 WHERE seq = ?",
                                (row.episodes, row.agents, row.seq))
            self.db.execute("COMMIT")
        except BaseException as exc:
            self._rollback(exc)
        return exp if rows else None

    def mark_published(self, published: list[Experience]) -> None:
        """Own rows published with the evidence they now hold; one grown while its batch was sent stays unpublished."""
        self.db.executemany("UPDATE experiences SET published = 1 WHERE id = ? AND received = 0 AND episodes = ?"
                            " AND agents = ?", [(e.id, e.provenance.episodes, e.provenance.agents) for e in published])

    # ------------------------------------------------------------------ reading

    def index_rows(self) -> Iterable[list[IndexRow]]:
        """Chunks of every row, in seq order (what an open indexes)."""
        cur = self.db.execute(f"SELECT {INDEX_COLUMNS} FROM experiences ORDER BY seq")
        while chunk := cur.fetchmany(8192):
            yield list(map(IndexRow._make, chunk))

    def get(self, exp_id: str) -> Experience | None:
        rows = self._stored(f"SELECT * FROM experiences WHERE id = ? ORDER BY {PREFERRED} LIMIT 1", (exp_id,))
        return row_experience(rows[0]) if rows else None

    def by_seq(self, seqs: list[int]) -> dict[int, Experience]:
        rows = map(StoredRow._make, self._select_in("SELECT * FROM experiences WHERE seq IN ({marks})", seqs))
        return {r.seq: row_experience(r) for r in rows}

    def all(self) -> list[Experience]:
        """One experience per id (its preferred row), sorted by id."""
        rows = self._stored(f"SELECT * FROM experiences ORDER BY id, {PREFERRED}")
        return [row_experience(r) for i, r in enumerate(rows) if i == 0 or rows[i - 1].id != r.id]

    def listing(self, domain: str | None = None, signer: str | None = None, limit: int = 50,
                offset: int = 0) -> tuple[int, list[Experience]]:
        """A page of experiences, one per id (its preferred row among those ``signer`` signed, a prefix
        of the signer's id, where given), newest first; and how many the filters match in all."""
        where, params = [], []
        if domain is not None:
            where.append("domain = ?")
            params.append(domain)
        if signer is not None:
            where.append("signer LIKE ? ESCAPE '\\'")
            params.append(_like_prefix(signer))
        cond = f"WHERE {' AND '.join(where)}" if where else ""
        (total,) = self.db.execute(f"SELECT COUNT(DISTINCT id) FROM experiences {cond}", params).fetchone()
        cols = ", ".join(COLUMNS)
        rows = self._stored(
            f"SELECT {cols} FROM (SELECT {cols}, ROW_NUMBER() OVER (PARTITION BY id ORDER BY {PREFERRED}) AS pos"
            f" FROM experiences {cond}) WHERE pos = 1 ORDER BY timestamp_ms DESC, seq DESC LIMIT ? OFFSET ?",
            (*params, int(limit), int(offset)))
        return total, [row_experience(r) for r in rows]

    def copies(self, exp_id: str) -> list[Copy]:
        """Every signer's row of an experience, oldest first: its code's sizes, digest and baseline,
        its flags and its counters."""
        rows = self.db.execute("SELECT code_digest, length(signs), length(scales), baseline_id, vector IS NOT NULL, "
                               "received, published, uses, helped, signer, episodes, agents FROM experiences "
                               "WHERE id = ? ORDER BY seq", (exp_id,))
        return [Copy(digest, sign_bytes, scale_bytes, bid, bool(held), bool(received), bool(published), *rest)
                for digest, sign_bytes, scale_bytes, bid, held, received, published, *rest in rows]

    def ids_starting(self, prefix: str, limit: int) -> list[str]:
        """Up to ``limit`` distinct experience ids that begin with ``prefix`` (its ``%`` and ``_`` taken
        literally; ids are hex, matched in either case)."""
        return [i for (i,) in self.db.execute("SELECT DISTINCT id FROM experiences WHERE id LIKE ? ESCAPE '\\' LIMIT ?",
                                              (_like_prefix(prefix), int(limit)))]

    def floats(self, seqs: list[int]) -> dict[int, np.ndarray]:
        """The float vectors this node holds for some rows, read from the file (30 KB each at d = 7680)."""
        return {s: np.frombuffer(v, "<f4") for s, v in self._select_in(
            "SELECT seq, vector FROM experiences WHERE seq IN ({marks}) AND vector IS NOT NULL", seqs)}

    def _stored(self, sql: str, params: tuple = ()) -> list[StoredRow]:
        return list(map(StoredRow._make, self.db.execute(sql, params)))

    def _select_in(self, sql: str, values: list) -> Iterator[tuple]:
        """The rows of ``sql`` for every value: each ``{marks}`` in it becomes an `IN` list of up to
        `_MAX_BOUND` of them, one query a chunk (every ``{marks}`` binds the same chunk)."""
        lists = sql.count("{marks}")
        for start in range(0, len(values), _MAX_BOUND):
            part = list(values[start : start + _MAX_BOUND])
            yield from self.db.execute(sql.format(marks=",".join("?" * len(part))), part * lists)

    def counts(self) -> dict:
        (n,) = self.db.execute("SELECT COUNT(*) FROM experiences").fetchone()
        (ids,) = self.db.execute("SELECT COUNT(DISTINCT id) FROM experiences").fetchone()
        (local,) = self.db.execute("SELECT COUNT(*) FROM experiences WHERE vector IS NOT NULL").fetchone()
        (n_base,) = self.db.execute("SELECT COUNT(*) FROM baselines").fetchone()
        domains = dict(self.db.execute("SELECT domain, COUNT(DISTINCT id) FROM experiences GROUP BY domain ORDER BY domain"))
        return {"experiences": ids, "rows": n, "with_float_vector": local, "baselines": n_base, "domains": domains}

    def file_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*"))


def _code_digest(signs: bytes, scales: bytes, baseline: bytes) -> str:
    """SHA-256 of a row's code: signs, scales, then ``baseline``, its baseline's digest. Hashing the baseline itself
    (30 KB at d = 7680) into every row cost 0.17 s of a 10,000-row round; rows stored before hold that
    older form, which only breaks ties between two codes of one (id, signer) (`_rank`)."""
    return hashlib.sha256(signs + scales + baseline).hexdigest()


def _rank(digest: str) -> int:
    return int(digest[:15], 16)


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern (ESCAPE '\\') for strings that begin with ``prefix``, its ``%`` and ``_`` taken literally."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
