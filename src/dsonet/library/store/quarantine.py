"""Rows damaged inside a readable file are set aside, not served, and not fatal.

SQLite's own checks see broken pages (`DamagedFile`, at open), not a row whose bytes changed: a
flipped byte in a text makes every read of it fail (``Could not decode to UTF-8``), one in a
code's blob changes its length and every code read with it fails (``buffer size must be a
multiple of element size``); unchecked, either would crash the node. `sweep` finds such rows,
moves what is left of each into the ``quarantine`` table (its id, signer and text as raw bytes,
and why) and deletes it from the rows served; the library counts them and logs one line each. An
operator lists them (`dso node quarantine`) and drops them once seen; a peer's row dropped here
can come back from the stream, a lesson of this node's own from a backup. `set_aside` moves whole
rows there too: a node's rows of a key a re-encoding sample caught lying (`dsonet.network.ingest`).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import dataclass

from dsonet.codec.profile import Profile

log = logging.getLogger(__name__)

_TABLE = """CREATE TABLE IF NOT EXISTS quarantine (seq INTEGER PRIMARY KEY, id BLOB, signer BLOB, text BLOB,
                                                  why TEXT NOT NULL, quarantined_ms INTEGER NOT NULL)"""
_TEXTS = ("id", "signer", "text", "domain", "model", "lineage", "code_digest")


@dataclass(frozen=True)
class Quarantined:
    seq: int
    id: str  # as far as its bytes can be read
    signer: str
    text: str
    why: str
    quarantined_ms: int

    def to_dict(self) -> dict:
        return vars(self).copy()


def _readable(raw: bytes | None) -> str:
    return "" if raw is None else bytes(raw).decode("utf-8", "replace")


def ensure_table(db: sqlite3.Connection) -> None:
    db.execute(_TABLE)


def _damage(db: sqlite3.Connection, profile: Profile) -> dict[int, str]:
    """seq -> what is wrong, for every row whose bytes cannot be what this library wrote (one pass)."""
    g, n_words = profile.dim // profile.group_size, -(-profile.group_size // 32)
    sizes = {"signs": g * n_words * 4, "scales": g * 4, "vector": profile.dim * 4}
    checks = [
        (" OR ".join(f"typeof({c}) != 'text'" for c in _TEXTS), "a text column holds another type"),
        ("typeof(signs) != 'blob' OR length(signs) != :signs", f"signs blob is not {sizes['signs']} bytes"),
        ("typeof(scales) != 'blob' OR length(scales) != :scales", f"scales blob is not {sizes['scales']} bytes"),
        ("vector IS NOT NULL AND (typeof(vector) != 'blob' OR length(vector) != :vector)",
         f"float vector is not {sizes['vector']} bytes"),
        ("NOT (confidence >= 0 AND confidence <= 1)", "confidence outside [0, 1]"),
        ("baseline_id NOT IN (SELECT id FROM baselines)", "its baseline is missing"),
    ]
    why = "CASE " + " ".join(f"WHEN {where} THEN '{reason}'" for where, reason in checks) + " END"
    casts = ", ".join(f"CAST({c} AS BLOB)" for c in _TEXTS)
    found: dict[int, str] = {}
    for seq, reason, *texts in db.execute(f"SELECT seq, {why}, {casts} FROM experiences", sizes):
        if reason is not None:
            found[seq] = reason
            continue
        for name, raw in zip(_TEXTS, texts):
            if not raw.isascii():  # most texts are ASCII: only the others are decoded
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    found[seq] = f"{name} is not UTF-8"
                    break
    return found


def sweep(db: sqlite3.Connection, profile: Profile) -> list[int]:
    """Move the damaged rows to ``quarantine`` (one transaction); returns their seqs."""
    found = _damage(db, profile)
    if not found:
        return []
    now = int(time.time() * 1000)
    db.execute("BEGIN IMMEDIATE")
    try:
        for seq, why in found.items():
            db.execute("INSERT OR REPLACE INTO quarantine SELECT seq, CAST(id AS BLOB), CAST(signer AS BLOB), "
                       "CAST(text AS BLOB), ?, ? FROM experiences WHERE seq = ?", (why, now, seq))
            db.execute("DELETE FROM experiences WHERE seq = ?", (seq,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    for seq, why in found.items():
        log.warning("library row %d quarantined: %s; it is no longer served (list: dso node quarantine)", seq, why)
    return sorted(found)


def set_aside(db: sqlite3.Connection, keys: list[tuple[str, str]], why: str) -> list[int]:
    """Move the rows of these (id, signer) keys to ``quarantine`` (one transaction; keys without a
    row are skipped), for rows that are whole but not to be served (a node's rows of a key caught
    lying, `dsonet.network.ingest`); the caller logs. Returns their seqs."""
    now = int(time.time() * 1000)
    seqs: list[int] = []
    db.execute("BEGIN IMMEDIATE")
    try:
        for eid, signer in keys:
            found = db.execute("SELECT seq FROM experiences WHERE id = ? AND signer = ?", (eid, signer)).fetchall()
            for (seq,) in found:
                db.execute("INSERT OR REPLACE INTO quarantine SELECT seq, CAST(id AS BLOB), CAST(signer AS BLOB), "
                           "CAST(text AS BLOB), ?, ? FROM experiences WHERE seq = ?", (why, now, seq))
                db.execute("DELETE FROM experiences WHERE seq = ?", (seq,))
                seqs.append(seq)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return seqs


def listed(db: sqlite3.Connection, limit: int = 1000) -> list[Quarantined]:
    rows = db.execute("SELECT seq, id, signer, text, why, quarantined_ms FROM quarantine ORDER BY seq LIMIT ?",
                      (int(limit),)).fetchall()
    return [Quarantined(seq, _readable(i), _readable(s), _readable(t), why, ms) for seq, i, s, t, why, ms in rows]


def count(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]


def drop(db: sqlite3.Connection, seqs: list[int] | None = None) -> int:
    """Forget quarantined rows (all of them when ``seqs`` is None); returns how many."""
    if seqs is None:
        return db.execute("DELETE FROM quarantine").rowcount
    return sum(db.execute("DELETE FROM quarantine WHERE seq = ?", (int(s),)).rowcount for s in seqs)


def row_damage(exc: BaseException) -> bool:
    """Whether a read failed the way a damaged row makes it fail (then `sweep` finds the row)."""
    if isinstance(exc, sqlite3.OperationalError):
        return "decode" in str(exc)
    return type(exc) is ValueError and any(s in str(exc) for s in ("buffer size", "cannot reshape"))
