"""Earlier versions of an edited lesson (`Library.update`, `dso edit`): kept after the old id is
tombstoned, so `dso show` can say what a lesson said before and when it changed.

An edit makes a new experience (a new text is a new id: ids are content hashes) and tombstones the
old one, which replicates: peers drop it as for any delete. The old row itself is gone from the
rows served; this table keeps its text, domain and confidence, and the id that replaced it, in the
same file. Created on first use, so a file written before it opens unchanged.
"""

from __future__ import annotations

import sqlite3
import time
from typing import NamedTuple

from dsonet.experience import Experience
from dsonet.library.errors import LibraryError
from dsonet.library.store.rows import RowStore

_TABLE = """CREATE TABLE IF NOT EXISTS history (id TEXT PRIMARY KEY, text TEXT NOT NULL, domain TEXT NOT NULL,
            confidence REAL NOT NULL, replaced_by TEXT NOT NULL, replaced_ms INTEGER NOT NULL)"""
MAX_VERSIONS = 100  # a walk back stops here: an edit loop (A → B → A) must not run forever


class Version(NamedTuple):
    """One earlier version of a lesson: what it said, and the id and time of the edit that replaced it."""

    id: str
    text: str
    domain: str
    confidence: float
    replaced_by: str
    replaced_ms: int


def record(db: sqlite3.Connection, old: Experience, new_id: str) -> None:
    """Keep ``old`` as the version ``new_id`` replaced."""
    db.execute(_TABLE)
    db.execute("INSERT OR REPLACE INTO history VALUES (?, ?, ?, ?, ?, ?)",
               (old.id, old.text, old.domain, old.confidence, new_id, int(time.time() * 1000)))


def replaced(db: sqlite3.Connection, prefix: str) -> Version | None:
    """The version whose id begins with ``prefix`` (an id that an edit tombstoned), if one does."""
    db.execute(_TABLE)
    row = db.execute("SELECT * FROM history WHERE substr(id, 1, ?) = ? ORDER BY replaced_ms DESC LIMIT 1",
                     (len(prefix), prefix.lower())).fetchone()
    return None if row is None else Version._make(row)


def versions(db: sqlite3.Connection, exp_id: str) -> list[Version]:
    """The versions before ``exp_id``, newest first ([] for a lesson never edited)."""
    db.execute(_TABLE)
    out, seen, current = [], {exp_id}, exp_id
    while len(out) < MAX_VERSIONS:
        row = db.execute("SELECT * FROM history WHERE replaced_by = ? ORDER BY replaced_ms DESC LIMIT 1",
                         (current,)).fetchone()
        if row is None or row[0] in seen:
            break
        out.append(Version._make(row))
        seen.add(row[0])
        current = row[0]
    return out


def resolve(rows: RowStore, prefix: str) -> str:
    """The one experience id that begins with ``prefix`` (8 characters of an id or more), or an error that
    says why there is none: too short a prefix, an edited experience (and its new version), no such id, or
    more than one."""
    if len(prefix) < 8:
        raise LibraryError(f"exp_id: {prefix!r} is {len(prefix)} characters; give at least 8 characters of the id")
    found = rows.ids_starting(prefix, 2)
    edited = replaced(rows.db, prefix) if not found else None
    if edited is not None:
        raise LibraryError(f"exp_id: {prefix!r} was edited: its new version is {edited.replaced_by} "
                           f"(dso show {edited.replaced_by[:12]} shows it with its history)")
    if len(found) != 1:
        raise LibraryError(f"exp_id: {prefix!r}: " + ("no such experience (no id begins with it)" if not found else
                                                      "ambiguous, more than one id begins with it; give more characters"))
    return found[0]
