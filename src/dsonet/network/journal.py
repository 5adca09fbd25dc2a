"""What a node decided, kept for people to read: each peer's reputation over time and a log of rounds.

The node's counters (`Node.peers`, /metrics) say how many; these logs say when and why: which
batches a round admitted, how many of their rows were new or held already, what it refused and
by which rule (the soup's filter for rows, the gate's checks for whole batches: signature,
freshness, rate...), and every move of a peer's reputation (after a round, after a reported
outcome). The node's page (`dsonet.network.web`) draws them.

Both logs are bounded by count, oldest dropped first: `ROUNDS` rounds, `POINTS` reputation points
per peer and `ALL_POINTS` in all (sender ids come from verified batches, but a Sybil can mint
keys, so the total has its own bound). Each peer's running totals since the journal began (batches,
rows admitted, rows refused by reason) are kept beside them for the `PEERS` most recently heard
from: a page reads one row a peer, not every round. They live in their own SQLite file beside the library
(``journal.sqlite``, 0600): a log is history, not the library, so it is written with
``synchronous=NORMAL`` (a power cut may lose the last rounds' lines, never the library's rows)
and a damaged or missing log never stops the node from serving.

Writes come from the node's ingest thread only (rounds and outcomes run there, in order); reads
open their own connection (WAL: they never wait for a write).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple

from dsonet.aggregate import RoundResult

log = logging.getLogger(__name__)

ROUNDS = 2000  # rounds kept (a busy node closes a round per read of the stream: hours to days of them)
POINTS = 500  # reputation points kept per peer: enough for a plot, a few KB each
ALL_POINTS = 100_000  # reputation points kept in all, whoever they belong to (~5 MB)
PEERS = 10_000  # peers whose running totals are kept, the most recently heard from
_REASON_CHARS = 120  # a refusal's reason is kept to its rule and a little context

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rounds (seq INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL,
    batches INTEGER NOT NULL, rows INTEGER NOT NULL, admitted INTEGER NOT NULL, new INTEGER NOT NULL,
    held INTEGER NOT NULL, refused TEXT NOT NULL, senders TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS reputation (seq INTEGER PRIMARY KEY AUTOINCREMENT, node_id TEXT NOT NULL,
    at_ms INTEGER NOT NULL, reputation REAL NOT NULL, cause TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS reputation_peer ON reputation (node_id, seq);
CREATE TABLE IF NOT EXISTS totals (node_id TEXT PRIMARY KEY, batches INTEGER NOT NULL, admitted INTEGER NOT NULL,
    refused TEXT NOT NULL, last_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS totals_recent ON totals (last_ms)"""


@dataclass(frozen=True)
class RoundRecord:
    """One round as logged. ``refused``: reason -> rows (a whole batch refused by the gate counts
    once, under its check); ``senders``: node id -> {"batches", "admitted", "refused": {reason: n}}."""

    seq: int
    at_ms: int
    batches: int
    rows: int
    admitted: int
    new: int  # admitted rows the library did not hold
    held: int  # admitted rows it held already (a re-delivery merged into the stored row)
    refused: dict[str, int]
    senders: dict[str, dict]


class Point(NamedTuple):  # a tuple: a page reads up to ALL_POINTS of them
    at_ms: int
    reputation: float
    cause: str  # "round", "helped", "harmed"


class Journal:
    def __init__(self, path: str | Path, rounds: int = ROUNDS, points: int = POINTS, all_points: int = ALL_POINTS,
                 peers: int = PEERS):
        if min(rounds, points, all_points, peers) < 1:
            raise ValueError(f"rounds ({rounds}), points ({points}), all_points ({all_points}) and peers ({peers}) "
                             "must be >= 1")
        self.path, self.max_rounds, self.max_points, self.max_all = Path(path), rounds, points, all_points
        self.max_peers = peers
        self._pending: dict[str, dict] = {}  # the round being gathered: sender -> counts (ingest thread only)
        self.db = _open(self.path)

    # ------------------------------------------------------------------ writing (the ingest thread)

    def refused(self, sender: str, reason: str) -> None:
        """A whole batch refused before any round (signature, freshness, ban...): logged with the next round."""
        entry = self._sender(sender)
        key = _reason(reason)
        entry["refused"][key] = entry["refused"].get(key, 0) + 1

    def stored(self, signer: str, new: int, held: int) -> None:
        """What the library made of one admitted batch: rows it did not hold, rows it held already."""
        entry = self._sender(signer)
        entry["new"] += new
        entry["held"] += held

    def round(self, result: RoundResult, at_ms: int, reputation: Callable[[str], float]) -> int | None:
        """Log a closed round (with the batch refusals and stores gathered since the last one) and a
        reputation point for each of its senders; returns its seq, None when nothing happened."""
        senders, self._pending = self._pending, {}
        for batch, keep in zip(result.batches, result.keep):
            entry = senders.setdefault(batch.node_id, _empty())
            entry["batches"] += 1
            entry["admitted"] += int(keep.sum())
        for node_id, _, reason in result.rejected:
            refused = senders.setdefault(node_id, _empty())["refused"]
            refused[_reason(reason)] = refused.get(_reason(reason), 0) + 1
        if not senders:
            return None
        refused_all: Counter = Counter()
        for entry in senders.values():
            refused_all.update(entry["refused"])
        total = {k: sum(e[k] for e in senders.values()) for k in ("admitted", "new", "held")}
        row = (at_ms, len(result.batches), int(result.stats.get("rows", 0)), total["admitted"], total["new"],
               total["held"], json.dumps(dict(refused_all), sort_keys=True), json.dumps(senders, sort_keys=True))
        points = [(node_id, at_ms, reputation(node_id), "round") for node_id in sorted(senders)
                  if senders[node_id]["batches"]]
        return self._write(row, points, senders, at_ms)

    def outcome(self, signers: Iterable[str], helped: bool, reputation: Callable[[str], float],
                at_ms: int | None = None) -> None:
        """A reputation point for each signer whose lesson was judged (after its reputation moved)."""
        at_ms = int(time.time() * 1000) if at_ms is None else at_ms
        self._write(None, [(s, at_ms, reputation(s), "helped" if helped else "harmed") for s in sorted(set(signers))])

    def _sender(self, node_id: str) -> dict:
        return self._pending.setdefault(node_id[:64], _empty())

    def _write(self, row: tuple | None, points: list[tuple], senders: dict | None = None, at_ms: int = 0) -> int | None:
        seq = None
        try:
            with self.db:  # one transaction: the round, its points, the totals and the pruning
                if senders:
                    self._add_totals(senders, at_ms)
                if row is not None:
                    seq = self.db.execute("INSERT INTO rounds (at_ms, batches, rows, admitted, new, held, refused,"
                                          " senders) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row).lastrowid
                    self.db.execute("DELETE FROM rounds WHERE seq <= ?", (seq - self.max_rounds,))
                self.db.executemany("INSERT INTO reputation (node_id, at_ms, reputation, cause) VALUES (?, ?, ?, ?)",
                                    points)
                for node_id in {p[0] for p in points}:
                    self.db.execute("DELETE FROM reputation WHERE node_id = ? AND seq <= (SELECT seq FROM reputation"
                                    " WHERE node_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                                    (node_id, node_id, self.max_points))
                if points:
                    self.db.execute("DELETE FROM reputation WHERE seq <= (SELECT MAX(seq) FROM reputation) - ?",
                                    (self.max_all,))
        except sqlite3.Error as exc:  # the log is for reading; the node goes on without this line of it
            log.warning("journal %s: a line was not written: %s", self.path, exc)
        return seq

    def _add_totals(self, senders: dict, at_ms: int) -> None:
        for node_id, entry in senders.items():
            held = self.db.execute("SELECT batches, admitted, refused FROM totals WHERE node_id = ?",
                                   (node_id,)).fetchone() or (0, 0, "{}")
            refused = Counter(json.loads(held[2]))
            refused.update(entry["refused"])
            self.db.execute("INSERT OR REPLACE INTO totals VALUES (?, ?, ?, ?, ?)",
                            (node_id, held[0] + entry["batches"], held[1] + entry["admitted"],
                             json.dumps(dict(refused), sort_keys=True), at_ms))
        (n,) = self.db.execute("SELECT COUNT(*) FROM totals").fetchone()
        if n > self.max_peers:  # the least recently heard from go first
            self.db.execute("DELETE FROM totals WHERE node_id IN (SELECT node_id FROM totals ORDER BY last_ms"
                            " LIMIT ?)", (n - self.max_peers,))

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ reading (any thread)

    def rounds(self, limit: int = 20, sender: str | None = None) -> list[RoundRecord]:
        """The latest rounds, newest first; ``sender``: only rounds that node took part in."""
        with _reader(self.path) as db:
            sql = "SELECT seq, at_ms, batches, rows, admitted, new, held, refused, senders FROM rounds"
            args: tuple = ()
            if sender is not None:
                sql += " WHERE instr(senders, ?) > 0"  # a cheap pre-filter; the exact test is below
                args = (json.dumps(sender),)
            rows = db.execute(sql + " ORDER BY seq DESC LIMIT ?", (*args, limit)).fetchall()
        out = [RoundRecord(*r[:7], json.loads(r[7]), json.loads(r[8])) for r in rows]
        return [r for r in out if sender is None or sender in r.senders]

    def history(self, node_ids: Iterable[str] | None = None, latest: int | None = None) -> dict[str, list[Point]]:
        """Each peer's kept reputation points, oldest first (every peer's when ``node_ids`` is None);
        ``latest``: only each peer's newest that many (read off the peer's index, not the whole log)."""
        with _reader(self.path) as db:
            if node_ids is None:
                node_ids = [r[0] for r in db.execute("SELECT DISTINCT node_id FROM reputation")]
            limit = -1 if latest is None else latest  # SQLite: LIMIT -1 is no limit
            out = {node_id: [Point(*r) for r in reversed(db.execute(
                "SELECT at_ms, reputation, cause FROM reputation WHERE node_id = ? ORDER BY seq DESC LIMIT ?",
                (node_id, limit)).fetchall())] for node_id in node_ids}
        return {k: v for k, v in out.items() if v}

    def totals(self, limit: int | None = None) -> dict[str, dict]:
        """Per sender since the journal began, the most recently heard from first (``limit`` of them):
        batches, rows admitted, rows refused by reason, and when it was last in a round (``last_ms``)."""
        with _reader(self.path) as db:
            rows = db.execute("SELECT node_id, batches, admitted, refused, last_ms FROM totals"
                              " ORDER BY last_ms DESC, node_id LIMIT ?", (-1 if limit is None else limit,)).fetchall()
        return {node_id: {"batches": batches, "admitted": admitted, "refused": json.loads(refused), "last_ms": last_ms}
                for node_id, batches, admitted, refused, last_ms in rows}


def _empty() -> dict:
    return {"batches": 0, "admitted": 0, "new": 0, "held": 0, "refused": {}}


def _reason(reason: str) -> str:
    """A reason's rule and a little context: a batch's whole error text would make every line unique."""
    return str(reason).split("\n")[0][:_REASON_CHARS]


def _open(path: Path) -> sqlite3.Connection:
    """The log's file, made readable by its owner only before anything is in it; a file that cannot be
    read as a log is moved aside (``.damaged``) and a new one started: it holds history, not data."""
    try:
        return _connect(path)
    except sqlite3.DatabaseError as exc:
        log.warning("journal %s cannot be read (%s): moved aside, a new one started", path, exc)
        os.replace(path, path.with_name(path.name + ".damaged"))
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return _connect(path)


def _connect(path: Path) -> sqlite3.Connection:
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=10)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        for statement in _SCHEMA.split(";"):
            db.execute(statement)
    except sqlite3.DatabaseError:
        db.close()
        raise
    db.isolation_level = "DEFERRED"  # `with db:` is one transaction from here on
    return db


@contextmanager
def _reader(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection for one read, closed after it."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        yield db
    finally:
        db.close()
