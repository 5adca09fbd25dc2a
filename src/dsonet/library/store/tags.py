"""Scopes a team gives its lessons: tags such as ``agent:reviewer`` or ``project:billing``, set when a
lesson is added and filtered in search (a lesson must carry every tag asked for).

Tags are this library's own (a node's or a file's): kept in a table beside the rows, never on the
wire, so they change neither an experience's id nor the batch format, and a peer's lesson carries
none here. Created on first use, so a file written before it opens unchanged.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Iterable

from dsonet.library.errors import LibraryError

MAX_TAGS = 8
_TAG = re.compile(r"^[a-z0-9][a-z0-9_.-]*(:[A-Za-z0-9_.@/+-]+)?$")  # scope:value, or a plain word
_TABLE = "CREATE TABLE IF NOT EXISTS tags (id TEXT NOT NULL, tag TEXT NOT NULL, PRIMARY KEY (id, tag))"


def checked(tags: Iterable[str] | None) -> tuple[str, ...]:
    """The tags, each once, in their order; a `LibraryError` naming the first bad one."""
    out = tuple(dict.fromkeys(tags or ()))
    if len(out) > MAX_TAGS:
        raise LibraryError(f"tags: {len(out)} given, at most {MAX_TAGS}; scope a lesson by agent and project")
    for tag in out:
        if not isinstance(tag, str) or len(tag) > 64 or not _TAG.match(tag):
            raise LibraryError(f"tags: {str(tag)[:70]!r} is not a tag like 'agent:reviewer' or 'project:billing' "
                               "(a lower-case scope, a colon, a value without spaces or commas; 64 characters at most)")
    return out


def tag(db: sqlite3.Connection, exp_id: str, tags: Iterable[str]) -> None:
    db.execute(_TABLE)
    db.executemany("INSERT OR IGNORE INTO tags VALUES (?, ?)", [(exp_id, t) for t in tags])


def of(db: sqlite3.Connection, exp_id: str) -> list[str]:
    db.execute(_TABLE)
    return [t for (t,) in db.execute("SELECT tag FROM tags WHERE id = ? ORDER BY tag", (exp_id,))]


def ids_with(db: sqlite3.Connection, tags: tuple[str, ...]) -> set[str]:
    """The ids that carry every one of ``tags``."""
    db.execute(_TABLE)
    marks = ",".join("?" * len(tags))
    return {i for (i,) in db.execute(f"SELECT id FROM tags WHERE tag IN ({marks}) GROUP BY id "
                                     "HAVING COUNT(DISTINCT tag) = ?", (*tags, len(tags)))}
