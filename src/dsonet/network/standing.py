"""An operator's say over keys, and each key's standing, kept in the library file (both outlast a restart).

`Standings`: every key's reputation and outcome counts (`dsonet.aggregate.Reputation`), in a
table of its own, saved after each round and each reported outcome (only the keys that moved): trust
a key earned by outcomes, and a harmful record, outlast a restart. A file from before the table
opens with every key at the initial reputation, as it did.


A banned key's batches are refused (by the sender named in a message's header before anything
is verified, and by the verified signer when its rows would be stored), its rows are hidden from
searches and evicted first (its weight in the merged view is 0, as under the reputation floor),
and the batches it had waiting in the deferred queue are dropped. A reset lifts the ban and
starts the key again from the initial reputation, with its counts at zero. Reputation itself
moves as before: a ban is a gate beside it, not a change of it.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3

from dsonet.aggregate import Reputation
from dsonet.errors import DsoError

log = logging.getLogger(__name__)

_META = "banned_keys"
_KEY = re.compile(r"[0-9a-f]{64}")


class StandingError(DsoError, ValueError):
    """A key that is not a node id."""


def check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        shown = key[:80] if isinstance(key, str) else type(key).__name__
        raise StandingError(f"key: {shown!r} is not a node id; give the 64 hex characters of one "
                            "(GET /keys lists them)")
    return key


class Bans:
    """The banned keys, read from and written to the library file's meta table (caller holds its lock)."""

    def __init__(self, rows):
        self._rows = rows
        self.keys: frozenset[str] = frozenset(json.loads(rows.meta(_META) or "[]"))

    def __contains__(self, key: str) -> bool:
        return key in self.keys

    def _save(self, keys: frozenset[str]) -> None:
        self._rows.set_meta(_META, json.dumps(sorted(keys)))
        self.keys = keys  # one assignment: readers on other threads see the old set or the new one

    def add(self, key: str) -> None:
        self._save(self.keys | {check_key(key)})

    def remove(self, key: str) -> bool:
        held = check_key(key) in self.keys
        if held:
            self._save(self.keys - {key})
        return held


class Banned(DsoError):
    """A batch from a key this node's operator banned."""

    field = "banned"

    def __init__(self, key: str):
        super().__init__(f"{key[:12]}… is banned by this node's operator (dso node keys --reset KEY lifts it)")


_STANDING = ("CREATE TABLE IF NOT EXISTS standing (node_id TEXT PRIMARY KEY, reputation REAL NOT NULL, "
             "helped INTEGER NOT NULL, harmed INTEGER NOT NULL)")


class Standings:
    """``reputation`` kept in the library file's ``standing`` table: read at open, saved by `save`
    (the caller holds the file's lock, on the thread that owns ``reputation``)."""

    def __init__(self, db: sqlite3.Connection, reputation: Reputation):
        self._db, self._reputation = db, reputation
        db.execute(_STANDING)
        for key, rep, helped, harmed in db.execute("SELECT node_id, reputation, helped, harmed FROM standing"):
            try:
                reputation.restore({key: (float(rep), int(helped), int(harmed))})
            except (TypeError, ValueError) as exc:  # a damaged value: that key starts again, the rest is kept
                log.warning("standing of %s not restored: %s", str(key)[:12], exc)
        self._saved = reputation.state()

    def save(self) -> int:
        """Write the keys whose standing moved since the last save (and forget the keys reset); how many."""
        now = self._reputation.state()
        changed = [(k, *v) for k, v in now.items() if self._saved.get(k) != v]
        gone = [(k,) for k in self._saved if k not in now]
        if not changed and not gone:
            return 0
        try:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("INSERT OR REPLACE INTO standing VALUES (?, ?, ?, ?)", changed)
            self._db.executemany("DELETE FROM standing WHERE node_id = ?", gone)
            self._db.execute("COMMIT")
        except sqlite3.OperationalError as exc:  # a full disk, a held lock: kept in memory, saved next time
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            log.warning("standing of %d keys not saved yet: %s", len(changed) + len(gone), exc)
            return 0
        self._saved = now
        return len(changed) + len(gone)
