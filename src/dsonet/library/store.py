"""The node's local experience library: one SQLite file (WAL) plus an in-memory code index.

What the file holds: every received or locally learned experience with its fields, its BitDelta
code (signs, scales, and the id of the baseline it was coded against; each baseline stored
once), the float vector only where this node encoded the text itself, tombstones, and usage
counters. Inserts are idempotent by experience id; every ingest is one transaction, so a crash
loses nothing acknowledged and leaves no half batch; WAL lets readers read while one writer
writes.

Convergence (a CRDT). The library's state is a function of the *set* of received items and
tombstones, whatever the order or the number of deliveries:
- an id delivered twice with different codes keeps one deterministically: a code received from
  the network beats this node's own local code, then higher confidence, then the smaller
  code digest;
- a tombstone wins over its id forever (delete is final; UPDATE creates a new id);
- the merged view (DeltaSoup's dedup merge) is recomputed from the live set of a domain:
  connected components of cosine(ê_a, ê_b) > 0.95 (`duplicate_clusters` over rows sorted by
  id), the smallest id as representative, the confidence-weighted mean vector, the maximum
  confidence, and every member's provenance kept;
- capacity eviction drops the lowest-quality rows and remembers their ids, so a re-delivery
  does not bring them back. (A later delete of a kept row does not resurrect an evicted one;
  that is the one place where a node's history shows.)
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dsonet.codec.batch import CompressedBatch, Profile, default_profile
from dsonet.codec.bitdelta import compress
from dsonet.errors import DsoError
from dsonet.experience import Experience, Provenance
from dsonet.library.dedup import duplicate_clusters_by_rows
from dsonet.library.index import CodeIndex, matvec

DUP_THRESHOLD = 0.95  # θ_dup, federated-agents paper §5
OVERSAMPLE = 2048  # coarse candidates per query rescored by the asymmetric estimate (about 2 ms)
RESCORE = 64  # best candidates rescored exactly where this node holds the float vector (read from the file)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS baselines (id INTEGER PRIMARY KEY, digest TEXT UNIQUE NOT NULL, vector BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS experiences (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL, text TEXT NOT NULL, domain TEXT NOT NULL, confidence REAL NOT NULL,
    node_id TEXT NOT NULL, model TEXT NOT NULL, timestamp_ms INTEGER NOT NULL, iteration INTEGER NOT NULL,
    lineage TEXT NOT NULL,
    signs BLOB NOT NULL, scales BLOB NOT NULL, baseline_id INTEGER NOT NULL REFERENCES baselines(id),
    code_digest TEXT NOT NULL, received INTEGER NOT NULL,
    vector BLOB, published INTEGER NOT NULL DEFAULT 0,
    uses INTEGER NOT NULL DEFAULT 0, helped INTEGER NOT NULL DEFAULT 0, added_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tombstones (id TEXT PRIMARY KEY, deleted_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS evicted (id TEXT PRIMARY KEY);
"""


class LibraryError(DsoError, ValueError):
    """A library operation that cannot be done as asked."""


@dataclass(frozen=True)
class Hit:
    experience: Experience  # the cluster's representative, with the cluster's (maximum) confidence
    score: float  # cosine between the query and the cluster's vector
    members: tuple[str, ...] = ()  # ids of every experience merged into this one (provenance kept)


@dataclass(frozen=True)
class IngestResult:
    added: list[str] = field(default_factory=list)
    duplicates: int = 0  # already held (idempotent re-delivery)
    rejected: int = 0  # tombstoned, evicted, or left out by `keep`
    evicted: list[str] = field(default_factory=list)


class Library:
    def __init__(self, path: str | Path, encoder=None, profile: Profile | None = None, capacity: int | None = None,
                 support: np.ndarray | None = None):
        """``support``: vectors spanning the subspace the encoder's outputs lie in (e.g.
        `ZenReranker.support()`); turns on the index's stage 3 (`dsonet.library.index.Support`):
        about 2 points more recall@10 over peers' codes for 30–50 ms more a query on 2 cores."""
        self._support = support
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._encoder = encoder
        self.capacity = capacity
        self.db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")  # an acknowledged commit survives power loss too
        self.db.executescript(_SCHEMA)
        self.profile: Profile | None = None  # set once the file's profile is known
        self.profile = self._bind_profile(profile)
        self._load_index()

    # ------------------------------------------------------------------ setup

    @property
    def encoder(self):
        if self._encoder is None:
            from dsonet.encoders import default_encoder

            self._encoder = default_encoder()
            if self.profile is not None and self._encoder.dim != self.profile.dim:
                raise LibraryError(
                    f"encoder: the default encoder {self._encoder.id} gives {self._encoder.dim} dims but {self.path} "
                    f"holds a {self.profile.dim}-dim profile ({self.profile.encoder_id}); open it with that encoder"
                )
        return self._encoder

    def _bind_profile(self, profile: Profile | None) -> Profile:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'profile'").fetchone()
        stored = Profile(**json.loads(row[0])) if row else None
        if profile is None:
            if stored is not None:
                profile = stored
            else:
                profile = default_profile(self.encoder.dim, self.encoder.id)
        if stored is None:
            self.db.execute("INSERT INTO meta VALUES ('profile', ?)", (json.dumps(profile.to_dict()),))
        elif stored != profile:
            raise LibraryError(
                f"profile: {self.path} was created for {stored.to_dict()}, opened with {profile.to_dict()}; "
                "open it with the same encoder and profile, or use another --db file"
            )
        if self._encoder is not None and self._encoder.dim != profile.dim:
            raise LibraryError(f"encoder: {self._encoder.id} gives {self._encoder.dim} dims, the profile has {profile.dim}")
        return profile

    def _load_index(self) -> None:
        p = self.profile
        self.index = CodeIndex(p.dim, p.group_size, p.rotation_seed, support=self._support)
        self._baseline_rows: dict[int, int] = {}  # baselines.id -> index baseline row
        for bid, blob in self.db.execute("SELECT id, vector FROM baselines ORDER BY id"):
            self._baseline_rows[bid] = self.index.add_baseline(np.frombuffer(blob, "<f4"))
        self.ids: list[str] = []
        self.domains: list[str] = []
        self._row_of: dict[str, int] = {}
        self._held = bytearray()  # per index row: 1 where the file holds this node's float vector
        cur = self.db.execute(f"SELECT {_INDEX_COLUMNS} FROM experiences ORDER BY seq")
        while chunk := cur.fetchmany(8192):
            self._index_rows(chunk)
        self._clusters: dict[str, dict[str, list[str]]] = {}  # domain -> representative -> members
        self._rep_of: dict[str, dict[str, str]] = {}  # domain -> member -> representative (merged members only)
        self._dom_cache_n = -1  # len(self.domains) when the domain-code array was last built
        self._dirty: set[str] = set(self.domains)

    def _index_rows(self, rows: list[tuple]) -> None:
        p = self.profile
        n_words = -(-p.group_size // 32)
        g = p.dim // p.group_size
        signs = np.frombuffer(b"".join(r[2] for r in rows), "<u4").reshape(len(rows), g, n_words)
        scales = np.frombuffer(b"".join(r[3] for r in rows), "<f4").reshape(len(rows), g)
        base = np.array([self._baseline_rows[r[4]] for r in rows], np.int32)
        idx = self.index.add(signs, scales, base)
        self._held.extend(bytes(r[-1] for r in rows))  # index rows are appended in step with self.ids
        for (eid, domain, *_rest), i in zip(rows, idx):
            self.ids.append(eid)
            self.domains.append(domain)
            self._row_of[eid] = int(i)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Library":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return int(self.index.live[: self.index.n].sum())

    # ------------------------------------------------------------------ writing

    def add(self, text: str, domain: str = "general", confidence: float = 0.5, provenance: Provenance | None = None) -> Experience:
        """Encode one experience and store it with its float vector and code (ADD)."""
        exp = Experience(text, domain, confidence, provenance or Provenance(timestamp_ms=int(time.time() * 1000)))
        self.add_vectors([exp], self.encoder.encode([exp.text], kind="document"))
        return exp

    def add_vectors(self, experiences: list[Experience], vectors: np.ndarray) -> list[str]:
        """Store experiences this node encoded itself (vectors in the profile's space). Returns ids stored."""
        vectors = np.asarray(vectors, np.float32)
        if vectors.shape != (len(experiences), self.profile.dim):
            raise LibraryError(f"vectors: shape {vectors.shape}, expected ({len(experiences)}, {self.profile.dim})")
        if not experiences:
            return []
        codes = compress(vectors, self.profile.group_size, baseline=self._local_baseline(vectors),
                         rotation_seed=self.profile.rotation_seed)
        return self._store(experiences, codes.signs, codes.scales, codes.baseline, vectors, received=False).added

    def _local_baseline(self, vectors: np.ndarray) -> np.ndarray:
        """The baseline for local codes: frozen at the mean of the first vectors this node encoded."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'local_baseline'").fetchone()
        if row:
            return np.frombuffer(bytes.fromhex(row[0]), "<f4")
        base = vectors.mean(axis=0, dtype=np.float64).astype("<f4")
        self.db.execute("INSERT INTO meta VALUES ('local_baseline', ?)", (base.tobytes().hex(),))
        return base

    def ingest(self, batch: CompressedBatch, keep: np.ndarray | None = None, encode_texts: bool = False) -> IngestResult:
        """Store the codes of an already-verified batch, rows admitted by ``keep`` only. Idempotent.

        ``encode_texts``: also encode the admitted texts with this library's encoder and keep the
        floats in the file, so searches rank peers' experiences as exactly as this node's own
        (`RESCORE`); costs the encoder's time and 4·d bytes a row on disk. The codes stay the
        peer's, so the merged view is the same on every node.
        """
        if batch.profile != self.profile:
            raise LibraryError(f"batch.profile: {batch.profile.to_dict()} is not this library's {self.profile.to_dict()}")
        rows = np.arange(len(batch)) if keep is None else np.flatnonzero(np.asarray(keep, bool))
        if keep is not None and len(keep) != len(batch):
            raise LibraryError(f"keep: {len(keep)} entries for a batch of {len(batch)}; give one boolean per row")
        exps = [batch.experiences[i] for i in rows]
        vectors = None
        if encode_texts and exps:
            vectors = self._encode_missing(exps)
        result = self._store(exps, batch.codes.signs[rows], batch.codes.scales[rows], batch.codes.baseline, vectors,
                             received=True)
        return IngestResult(result.added, result.duplicates, result.rejected + len(batch) - len(rows), result.evicted)

    def _encode_missing(self, exps: list[Experience]) -> list[np.ndarray | None]:
        """Our encoding of each text that needs one: a re-delivered batch (a stream replay) is not
        encoded again where the float is held already, nor where the id is tombstoned or evicted."""
        blocked = self._blocked([e.id for e in exps])
        todo = [i for i, e in enumerate(exps) if e.id not in blocked
                and not (e.id in self._row_of and self._held[self._row_of[e.id]])]
        out: list[np.ndarray | None] = [None] * len(exps)
        if todo:
            for i, v in zip(todo, self.encoder.encode([exps[i].text for i in todo], kind="document")):
                out[i] = v
        return out

    def _store(self, exps, signs, scales, baseline, vectors, received: bool) -> IngestResult:
        now = int(time.time() * 1000)
        added, dup, rejected, new_rows = [], 0, 0, []
        self.db.execute("BEGIN IMMEDIATE")
        try:
            bid = self._baseline_id(baseline)
            blocked = self._blocked([e.id for e in exps])
            for i, exp in enumerate(exps):  # per-record SQL; the vector work is done by the index in one call
                if exp.id in blocked:
                    rejected += 1
                    continue
                digest = hashlib.sha256(signs[i].tobytes() + scales[i].tobytes() + baseline.tobytes()).hexdigest()
                row = self.db.execute("SELECT confidence, code_digest, received FROM experiences WHERE id = ?", (exp.id,)).fetchone()
                vec = None if vectors is None or vectors[i] is None else np.asarray(vectors[i], "<f4").tobytes()
                if row is None:
                    self.db.execute(
                        "INSERT INTO experiences (id, text, domain, confidence, node_id, model, timestamp_ms, iteration,"
                        " lineage, signs, scales, baseline_id, code_digest, received, vector, added_ms)"
                        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (exp.id, exp.text, exp.domain, float(exp.confidence), exp.provenance.node_id, exp.provenance.model,
                         exp.provenance.timestamp_ms, exp.provenance.iteration, exp.id, signs[i].astype("<u4").tobytes(),
                         scales[i].astype("<f4").tobytes(), bid, digest, int(received), vec, now))
                    added.append(exp.id)
                    new_rows.append(exp.id)
                elif (int(received), float(exp.confidence), -_rank(digest)) > (row[2], row[0], -_rank(row[1])):
                    self.db.execute(
                        "UPDATE experiences SET confidence=?, node_id=?, model=?, timestamp_ms=?, iteration=?, signs=?,"
                        " scales=?, baseline_id=?, code_digest=?, received=?, vector=COALESCE(?, vector) WHERE id=?",
                        (float(exp.confidence), exp.provenance.node_id, exp.provenance.model, exp.provenance.timestamp_ms,
                         exp.provenance.iteration, signs[i].astype("<u4").tobytes(), scales[i].astype("<f4").tobytes(),
                         bid, digest, int(received), vec, exp.id))
                    new_rows.append(exp.id)
                    dup += 1
                else:
                    dup += 1
            evicted = self._evict_over_capacity()
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            self._load_index()  # the baseline map may have moved; rebuild from what is committed
            raise
        self._refresh(new_rows, evicted)
        return IngestResult(added, dup, rejected, evicted)

    def _baseline_id(self, baseline: np.ndarray) -> int:
        blob = np.asarray(baseline, "<f4").tobytes()
        digest = hashlib.sha256(blob).hexdigest()
        row = self.db.execute("SELECT id FROM baselines WHERE digest = ?", (digest,)).fetchone()
        if row:
            return row[0]
        bid = self.db.execute("INSERT INTO baselines (digest, vector) VALUES (?, ?)", (digest, blob)).lastrowid
        self._baseline_rows[bid] = self.index.add_baseline(np.frombuffer(blob, "<f4"))
        return bid

    def _blocked(self, ids: list[str]) -> set[str]:
        marks = ",".join("?" * len(ids))
        if not ids:
            return set()
        q = f"SELECT id FROM tombstones WHERE id IN ({marks}) UNION SELECT id FROM evicted WHERE id IN ({marks})"
        return {r[0] for r in self.db.execute(q, ids + ids)}

    def _evict_over_capacity(self) -> list[str]:
        if self.capacity is None:
            return []
        (n,) = self.db.execute("SELECT COUNT(*) FROM experiences").fetchone()
        if n <= self.capacity:
            return []
        # quality: confidence, scaled by the observed help rate (Laplace-smoothed); ties by id
        doomed = [r[0] for r in self.db.execute(
            "SELECT id FROM experiences ORDER BY confidence * (helped + 1.0) / (uses + 2.0) ASC, id DESC LIMIT ?",
            (n - self.capacity,))]
        self.db.executemany("INSERT OR IGNORE INTO evicted VALUES (?)", [(i,) for i in doomed])
        self.db.executemany("DELETE FROM experiences WHERE id = ?", [(i,) for i in doomed])
        return doomed

    def _refresh(self, changed: list[str], removed: list[str]) -> None:
        """Bring the index in step with committed rows: changed rows are (re)appended, old rows masked."""
        gone = [self._row_of.pop(i) for i in [*changed, *removed] if i in self._row_of]
        self.index.remove(np.array(gone, np.int64))
        if changed:
            marks = ",".join("?" * len(changed))
            rows = self.db.execute(
                f"SELECT {_INDEX_COLUMNS} FROM experiences WHERE id IN ({marks}) ORDER BY seq", changed).fetchall()
            if rows:
                self._index_rows(rows)
        self._dirty.update(self.domains[r] for r in gone)
        self._dirty.update(self.domains[self._row_of[i]] for i in changed if i in self._row_of)

    def update(self, exp_id: str, text: str) -> Experience:
        """New text for an experience (UPDATE): re-encoded, same lineage; the old id is tombstoned."""
        old = self.get(exp_id)
        if old is None:
            raise LibraryError(f"exp_id: {exp_id!r} is not in the library (or was deleted); add it instead")
        (lineage,) = self.db.execute("SELECT lineage FROM experiences WHERE id = ?", (exp_id,)).fetchone()
        new = Experience(text, old.domain, old.confidence, Provenance(old.provenance.node_id, old.provenance.model,
                                                                     int(time.time() * 1000), old.provenance.iteration))
        if new.id == exp_id:
            return old
        self.add_vectors([new], self.encoder.encode([new.text], kind="document"))
        self.db.execute("UPDATE experiences SET lineage = ? WHERE id = ?", (lineage, new.id))
        self.delete(exp_id)
        return new

    def delete(self, exp_id: str) -> bool:
        """Tombstone an experience (DELETE). Returns whether it was held. The tombstone replicates."""
        return bool(self.apply_tombstones([exp_id]))

    def apply_tombstones(self, ids: list[str]) -> list[str]:
        """Record tombstones (local or received) and drop their experiences. Returns the ids that were held."""
        now = int(time.time() * 1000)
        self.db.execute("BEGIN IMMEDIATE")
        held = [i for i in ids if self.db.execute("SELECT 1 FROM experiences WHERE id = ?", (i,)).fetchone()]
        self.db.executemany("INSERT OR IGNORE INTO tombstones VALUES (?, ?)", [(i, now) for i in ids])
        self.db.executemany("DELETE FROM experiences WHERE id = ?", [(i,) for i in held])
        self.db.execute("COMMIT")
        self._refresh([], held)
        return held

    def tombstones(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT id FROM tombstones ORDER BY id")]

    def record_outcome(self, exp_id: str, helped: bool) -> None:
        self.db.execute("UPDATE experiences SET uses = uses + 1, helped = helped + ? WHERE id = ?", (int(helped), exp_id))

    def unpublished(self, limit: int | None = None) -> tuple[list[Experience], np.ndarray]:
        q = "SELECT * FROM experiences WHERE received = 0 AND published = 0 AND vector IS NOT NULL ORDER BY seq"
        rows = self.db.execute(q + (" LIMIT ?" if limit else ""), (limit,) if limit else ()).fetchall()
        vecs = np.array([np.frombuffer(r[_COL["vector"]], "<f4") for r in rows], np.float32).reshape(len(rows), self.profile.dim)
        return [_experience(r) for r in rows], vecs

    def mark_published(self, ids: list[str]) -> None:
        self.db.executemany("UPDATE experiences SET published = 1 WHERE id = ?", [(i,) for i in ids])

    # ------------------------------------------------------------------ reading

    def get(self, exp_id: str) -> Experience | None:
        row = self.db.execute("SELECT * FROM experiences WHERE id = ?", (exp_id,)).fetchone()
        return None if row is None else _experience(row)

    def all(self) -> list[Experience]:
        return [_experience(r) for r in self.db.execute("SELECT * FROM experiences ORDER BY id")]

    def clusters(self, domain: str | None = None) -> dict[str, list[str]]:
        """The merged view: representative id -> member ids (sorted), for one domain or all."""
        for d in sorted(self._dirty):
            self._recluster(d)
        self._dirty.clear()
        if domain is not None:
            return dict(self._clusters.get(domain, {}))
        return {rep: m for d in sorted(self._clusters) for rep, m in self._clusters[d].items()}

    def _recluster(self, domain: str) -> None:
        ids = sorted(i for i, r in self._row_of.items() if self.domains[r] == domain)
        if not ids:
            self._clusters.pop(domain, None)
            self._rep_of.pop(domain, None)
            return
        rows = np.array([self._row_of[i] for i in ids])
        # ê for everyone (what every node can compute alike), reconstructed a block at a time
        reps = duplicate_clusters_by_rows(lambda idx: self.index.reconstruct(rows[idx]), len(ids), self.profile.dim,
                                          [domain] * len(ids), DUP_THRESHOLD)
        groups: dict[str, list[str]] = {}
        for i, r in zip(ids, reps):
            groups.setdefault(ids[r], []).append(i)
        self._clusters[domain] = groups
        self._rep_of[domain] = {m: rep for rep, ms in groups.items() if len(ms) > 1 for m in ms}

    def merged(self, rep_id: str) -> tuple[Experience, np.ndarray]:
        """A cluster as one experience: the representative with the maximum confidence, and the
        confidence-weighted mean vector (floats where held, else ê), L2-normalised."""
        members = self.clusters(self.get_domain(rep_id)).get(rep_id, [rep_id])
        exps = [self.get(m) for m in members]
        vecs = self.vectors(members)
        w = np.array([e.confidence for e in exps], np.float32) + 1e-6
        v = (w[:, None] * vecs).sum(axis=0)
        rep = exps[0]
        best = max(e.confidence for e in exps)
        return Experience(rep.text, rep.domain, best, rep.provenance), v / max(float(np.linalg.norm(v)), 1e-12)

    def vectors(self, ids: list[str]) -> np.ndarray:
        """Float vectors where held, else reconstructions ê, (len(ids), d)."""
        rows = np.array([self._row_of[i] for i in ids], np.int64)
        out = self.index.reconstruct(rows) if len(rows) else np.zeros((0, self.profile.dim), np.float32)
        held, floats = self._held_floats(rows)
        out[held] = floats
        return out

    def _held_floats(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of these index rows this node holds a float vector for, and those vectors, read
        from the file: they are kept on disk (30 KB each at d = 7680), not in memory."""
        held = np.array([self._held[r] for r in rows], bool)
        ids = [self.ids[r] for r in rows[held]]
        floats = np.zeros((len(ids), self.profile.dim), np.float32)
        for start in range(0, len(ids), 500):  # SQLite's bound-parameter limit
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            blobs = dict(self.db.execute(f"SELECT id, vector FROM experiences WHERE id IN ({marks})", part))
            floats[start : start + len(part)] = np.stack([np.frombuffer(blobs[i], "<f4") for i in part])
        return held, floats

    def _domain_mask(self, domain: str) -> np.ndarray:
        """Boolean mask over index rows of one domain (domain codes cached as an int array)."""
        if self._dom_cache_n != len(self.domains):
            names, codes = np.unique(np.array(self.domains, dtype=object).astype(str), return_inverse=True)
            self._dom_names, self._dom_codes, self._dom_cache_n = list(names), codes, len(self.domains)
        if domain not in self._dom_names:
            return np.zeros(len(self.domains), bool)
        return self._dom_codes == self._dom_names.index(domain)

    def get_domain(self, exp_id: str) -> str:
        return self.domains[self._row_of[exp_id]]

    def search(self, query: str, k: int = 5, min_similarity: float = 0.6, max_tokens: int = 2048,
               domain: str | None = None) -> list[Hit]:
        """Top-k experiences for a text query (k = 5, cosine > 0.6, at most max_tokens of text)."""
        q = self.encoder.encode([query], kind="query")[0]
        hits = self.search_vector(q, k=k, min_similarity=min_similarity, domain=domain)
        out, used = [], 0
        for h in hits:
            used += estimate_tokens(h.experience.text)
            if used > max_tokens:
                break
            out.append(h)
        return out

    retrieve = search

    def search_vector(self, q: np.ndarray, k: int = 5, min_similarity: float = 0.6, domain: str | None = None) -> list[Hit]:
        q = np.asarray(q, np.float32).reshape(-1)
        if q.shape != (self.profile.dim,):
            raise LibraryError(f"q: shape {q.shape}, expected ({self.profile.dim},)")
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        rows, scores = self.rank(q, k, domain)
        self.clusters()  # bring the merged view up to date
        hits, seen = [], set()
        for r, s in zip(rows, scores):  # walks at most the oversampled candidates, best first
            eid, dom = self.ids[r], self.domains[r]
            rep = self._rep_of.get(dom, {}).get(eid, eid)
            if rep in seen:
                continue
            seen.add(rep)
            members = self._clusters[dom][rep] if rep != eid or eid in self._rep_of.get(dom, {}) else [eid]
            exp, vec = self.merged(rep) if len(members) > 1 else (self.get(rep), None)
            score = float(vec @ q) if vec is not None else float(s)
            if score < min_similarity:
                continue
            hits.append(Hit(exp, score, tuple(members)))
            if len(hits) == k:
                break
        return hits

    def rank(self, q: np.ndarray, k: int, domain: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Index rows and scores for a unit query, best first, before merging: the codes' estimate,
        then the exact cosine for the best `RESCORE` candidates whose float vector this node holds."""
        allowed = None if domain is None else self._domain_mask(domain)
        rows, scores = self.index.search(q, k, max(OVERSAMPLE, 4 * k), allowed)
        top = rows[:RESCORE]
        held, floats = self._held_floats(top)
        if held.any():
            scores = scores.copy()
            scores[np.flatnonzero(held)] = matvec(floats, q)
            order = np.argsort(-scores, kind="stable")
            rows, scores = rows[order], scores[order]
        return rows, scores

    def stats(self) -> dict:
        (n,) = self.db.execute("SELECT COUNT(*) FROM experiences").fetchone()
        (local,) = self.db.execute("SELECT COUNT(*) FROM experiences WHERE vector IS NOT NULL").fetchone()
        domains = dict(self.db.execute("SELECT domain, COUNT(*) FROM experiences GROUP BY domain ORDER BY domain"))
        (n_base,) = self.db.execute("SELECT COUNT(*) FROM baselines").fetchone()
        return {
            "path": str(self.path), "profile": self.profile.to_dict(), "experiences": n, "with_float_vector": local,
            "clusters": len(self.clusters()), "tombstones": len(self.tombstones()), "baselines": n_base,
            "domains": domains, "index_bytes": self.index.memory_bytes(),
            "file_bytes": sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*")),
        }


_COLUMNS = ["seq", "id", "text", "domain", "confidence", "node_id", "model", "timestamp_ms", "iteration", "lineage",
            "signs", "scales", "baseline_id", "code_digest", "received", "vector", "published", "uses", "helped", "added_ms"]
_COL = {c: i for i, c in enumerate(_COLUMNS)}
_INDEX_COLUMNS = "id, domain, signs, scales, baseline_id, vector IS NOT NULL"  # what the in-memory index needs


def _experience(row: tuple) -> Experience:
    c = _COL
    prov = Provenance(row[c["node_id"]], row[c["model"]], row[c["timestamp_ms"]], row[c["iteration"]])
    return Experience(row[c["text"]], row[c["domain"]], row[c["confidence"]], prov)


def _rank(digest: str) -> int:
    return int(digest[:15], 16)


def estimate_tokens(text: str) -> int:
    """Tokens without a tokenizer: the larger of words·4/3 and characters/4 (typical BPE ratios)."""
    return max(1, round(max(len(text.split()) * 4 / 3, len(text) / 4)))
