"""The node's ledger: what it owes the stream and what the stream owes it, kept in the library file.

    ledger = Ledger(library.db)          # the same SQLite file and connection as the rows
    ledger.defer(payload, received_ms, signer, share)   # a batch over its sender's rate, held back
    ledger.queue_outgoing(subject, tombstone)           # kept until the stream acknowledges it
    library.ingest(admitted, within=ledger.seen_by(batch, admitted.sampled))  # its hash (and which
                                                        # rows went in unchecked), in its rows' transaction

Four tables beside the experience rows, none of which a library without a node reads:

    deferred  batches held back from senders over their rate (`dsonet.network.ingest`), submitted
              again with later rounds in the order they came; counted in bytes against a share
              (a signer's own, or the one all never-admitted keys share), read a page at a time
    outbox    signed messages (tombstones) not yet acknowledged by the stream (`dsonet.network.publish`)
    seen      hashes of the batches stored, with their timestamps: a node that restarts refuses a
              replay of what it stored; hashes past the freshness window are forgotten
    sampled   (id, signer) of rows stored on a re-encoding sample's word only (a trusted key's
              rows outside the sample): when a later sample catches that key lying, these are the
              rows set aside (`dsonet.network.ingest`); rows whose text was re-encoded are not here

The tables keep the names and columns they had when the library's schema held them, so a file
written before the ledger moved here opens unchanged (older files get the deferred queue's
per-sender and byte columns added, as before). Every call runs on the library's connection, so
the caller holds the node's lock (`dsonet.network.access`), as for any library call.
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Callable

from dsonet.codec import CompressedBatch

_SCHEMA = """
CREATE TABLE IF NOT EXISTS deferred (digest TEXT PRIMARY KEY, payload BLOB NOT NULL, received_ms INTEGER NOT NULL,
                                     signer TEXT NOT NULL DEFAULT '', bytes INTEGER NOT NULL DEFAULT 0,
                                     share TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS outbox (digest TEXT PRIMARY KEY, subject TEXT NOT NULL, payload BLOB NOT NULL,
                                   seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS seen (hash TEXT PRIMARY KEY, timestamp_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS seen_time ON seen (timestamp_ms);
CREATE TABLE IF NOT EXISTS sampled (signer TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (signer, id)) WITHOUT ROWID
"""


class Ledger:
    def __init__(self, db: sqlite3.Connection):
        self.db = db
        for statement in _SCHEMA.split(";"):  # one by one: executescript would commit an open transaction
            if statement.strip():
                self.db.execute(statement)
        deferred = [r[1] for r in self.db.execute("PRAGMA table_info(deferred)")]
        if "signer" not in deferred:  # files from before deferrals were counted per sender
            self.db.execute("ALTER TABLE deferred ADD COLUMN signer TEXT NOT NULL DEFAULT ''")
        if "bytes" not in deferred:  # ... and in bytes, against a share (`defer`)
            self.db.execute("ALTER TABLE deferred ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0")
            self.db.execute("ALTER TABLE deferred ADD COLUMN share TEXT NOT NULL DEFAULT ''")
            self.db.execute("UPDATE deferred SET bytes = length(payload), share = signer")
        self.db.execute("CREATE INDEX IF NOT EXISTS deferred_signer ON deferred (signer)")
        self.db.execute("CREATE INDEX IF NOT EXISTS deferred_share ON deferred (share, bytes)")

    # ------------------------------------------------------------------ seen batches

    def seen_by(self, batch: CompressedBatch, sampled: list[str] = ()) -> Callable[[], None]:
        """Records ``batch``'s hash, and the ids of its rows stored on a sample's word only (``sampled``),
        when called inside the transaction that stores its rows (`Library.ingest`'s ``within``): a
        crash keeps all or none, so a redelivery of a batch whose rows were lost is admitted again,
        and no row goes in unchecked without its mark."""
        def record() -> None:
            self.db.execute("INSERT OR IGNORE INTO seen VALUES (?, ?)", (batch.hash, int(batch.timestamp_ms)))
            self.db.executemany("INSERT OR IGNORE INTO sampled VALUES (?, ?)", [(batch.node_id, i) for i in sampled])

        return record

    def seen(self, since_ms: int) -> dict[str, int]:
        """Hash -> timestamp of the batches stored from ``since_ms`` on (batch timestamps), after forgetting
        older ones: a batch older than the freshness window is refused as stale, so its hash is not needed."""
        self.forget_seen(since_ms)
        return dict(self.db.execute("SELECT hash, timestamp_ms FROM seen"))

    def forget_seen(self, before_ms: int) -> None:
        self.db.execute("DELETE FROM seen WHERE timestamp_ms < ?", (int(before_ms),))

    # ------------------------------------------------------------------ rows stored unchecked

    def sampled(self, signer: str) -> list[str]:
        """The ids of ``signer``'s rows stored on a sample's word only (some may have gone since:
        evicted or tombstoned). A row sent again with its text checked keeps its mark: the code the
        library kept for that (id, signer) may be either copy's."""
        return [i for (i,) in self.db.execute("SELECT id FROM sampled WHERE signer = ?", (signer,))]

    def forget_sampled(self, signer: str) -> int:
        """Forget ``signer``'s marks (its rows were set aside); returns how many."""
        return self.db.execute("DELETE FROM sampled WHERE signer = ?", (signer,)).rowcount

    # ------------------------------------------------------------------ deferred batches

    def defer(self, payload: bytes, received_ms: int, signer: str = "", share: str | None = None) -> None:
        """Hold a verified payload whose sender is over its rate, to submit again later; its bytes count
        against ``share`` (default: the signer's own; see `Ingest.defer_or_reject`). Held once."""
        self.db.execute("INSERT OR IGNORE INTO deferred (digest, payload, received_ms, signer, bytes, share) "
                        "VALUES (?, ?, ?, ?, ?, ?)", (hashlib.sha256(payload).hexdigest(), payload, int(received_ms),
                                                      signer, len(payload), signer if share is None else share))

    def deferred_signers(self) -> list[str]:
        """The signers with payloads waiting, the one whose oldest has waited longest first."""
        return [s for (s,) in self.db.execute("SELECT signer FROM deferred GROUP BY signer ORDER BY MIN(rowid)")]

    def deferred(self, signer: str, after: int = 0, limit: int = 8) -> list[tuple[int, str, bytes, int]]:
        """(position, digest, payload, received ms) of up to ``limit`` of ``signer``'s payloads past
        position ``after``, in the order they came: a page, so the queue is never read whole."""
        return self.db.execute("SELECT rowid, digest, payload, received_ms FROM deferred WHERE signer = ? "
                               "AND rowid > ? ORDER BY rowid LIMIT ?", (signer, int(after), int(limit))).fetchall()

    def count_deferred(self, signer: str | None = None) -> int:
        """How many payloads are deferred (from ``signer`` only, if given), without reading them."""
        if signer is None:
            return self.db.execute("SELECT COUNT(*) FROM deferred").fetchone()[0]
        return self.db.execute("SELECT COUNT(*) FROM deferred WHERE signer = ?", (signer,)).fetchone()[0]

    def deferred_bytes(self, share: str | None = None) -> int:
        """The bytes deferred (against ``share`` only, if given), without reading the payloads."""
        if share is None:
            return self.db.execute("SELECT COALESCE(SUM(bytes), 0) FROM deferred").fetchone()[0]
        return self.db.execute("SELECT COALESCE(SUM(bytes), 0) FROM deferred WHERE share = ?", (share,)).fetchone()[0]

    def drop_deferred(self, signer: str) -> int:
        """Forget every payload ``signer`` has waiting (a banned key); returns how many."""
        return self.db.execute("DELETE FROM deferred WHERE signer = ?", (signer,)).rowcount

    def undefer(self, digests: list[str]) -> None:
        """Forget payloads that left the queue (admitted, or refused for good)."""
        self.db.executemany("DELETE FROM deferred WHERE digest = ?", [(d,) for d in digests])

    # ------------------------------------------------------------------ outbox

    def queue_outgoing(self, subject: str, payload: bytes) -> str:
        """Keep a message to publish (a signed tombstone) until the stream acknowledges it; its digest."""
        digest = hashlib.sha256(payload).hexdigest()
        self.db.execute("INSERT OR IGNORE INTO outbox VALUES (?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM outbox))",
                        (digest, subject, payload))
        return digest

    def outgoing(self) -> list[tuple[str, str, bytes]]:
        """(digest, subject, payload) of every message not yet acknowledged, oldest first."""
        return self.db.execute("SELECT digest, subject, payload FROM outbox ORDER BY seq").fetchall()

    def sent(self, digest: str) -> None:
        """The stream acknowledged it: forget it."""
        self.db.execute("DELETE FROM outbox WHERE digest = ?", (digest,))
