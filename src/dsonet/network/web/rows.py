"""One page of the library's rows for the node's page, read straight from the library file.

A read-only SQLite connection of its own (WAL: it never waits for the node's writes, and a page
never holds the lock the node's searches take), one page of rows at a time by key (``seq``, newest
first): the 100,000th row costs what the first does, and nothing reads the whole table. Filters are
SQL: an exact domain, a signer prefix, a substring of the text (a filter that matches few rows
scans the table once, which is the price of a substring search without a text index).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

PAGE_ROWS = 50
MAX_PAGE_ROWS = 500


class FilterError(ValueError):
    """A filter or cursor the page cannot use."""


@dataclass(frozen=True)
class LessonRow:
    seq: int
    id: str
    signer: str  # who signed this copy (the author, for rows that came from the network)
    text: str
    domain: str
    confidence: float
    copies: int  # rows of this lesson in the library (one per signer)
    uses: int
    helped: int
    authored_ms: int
    added_ms: int

    @property
    def harmed(self) -> int:
        return self.uses - self.helped


@dataclass(frozen=True)
class Filters:
    text: str = ""  # a substring of the lesson, any case
    domain: str = ""  # exactly this domain
    signer: str = ""  # the signer's id starts with this (hex)

    def __post_init__(self) -> None:
        if len(self.text) > 200 or len(self.domain) > 64:
            raise FilterError("text/domain: at most 200 / 64 characters; filter by a shorter part")
        if self.signer and (len(self.signer) > 64 or any(c not in "0123456789abcdef" for c in self.signer)):
            raise FilterError(f"signer: {self.signer[:70]!r} is not the start of a node id (lower-case hex)")

    def where(self) -> tuple[list[str], list]:
        clauses, args = [], []
        if self.text:
            clauses.append("e.text LIKE ? ESCAPE '\\'")
            args.append("%" + self.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        if self.domain:
            clauses.append("e.domain = ?")
            args.append(self.domain)
        if self.signer:  # a range on the signer: a prefix without LIKE's case folding
            clauses.append("e.signer >= ? AND e.signer < ?")
            args += [self.signer, self.signer + "g"]
        return clauses, args


@dataclass(frozen=True)
class Page:
    rows: list[LessonRow]
    older: int | None  # the cursor of the next page (``before``), None on the last
    newer: int | None  # the cursor of the previous page (``after``), None on the first
    total: int  # rows in the library (all of them, filters aside: counting a filter's matches would scan)


def read_page(path: Path, filters: Filters = Filters(), before: int | None = None, after: int | None = None,
              limit: int = PAGE_ROWS) -> Page:
    """Rows newest first: the ``limit`` rows older than seq ``before`` (or newer than ``after``, the
    page back), with each lesson's copies counted by its id's index."""
    if before is not None and after is not None:
        raise FilterError("before/after: give one cursor, not both")
    if not 1 <= limit <= MAX_PAGE_ROWS:
        raise FilterError(f"limit: {limit}; a page holds 1 to {MAX_PAGE_ROWS} rows")
    clauses, args = filters.where()
    if before is not None:
        clauses.append("e.seq < ?")
        args.append(int(before))
    if after is not None:
        clauses.append("e.seq > ?")
        args.append(int(after))
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    order = "ASC" if after is not None else "DESC"
    sql = (f"SELECT e.seq, e.id, e.signer, e.text, e.domain, e.confidence,"
           f" (SELECT COUNT(*) FROM experiences c WHERE c.id = e.id), e.uses, e.helped, e.timestamp_ms, e.added_ms"
           f" FROM experiences e {where} ORDER BY e.seq {order} LIMIT ?")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        found = [LessonRow(*r) for r in db.execute(sql, (*args, limit + 1))]
        (total,) = db.execute("SELECT COUNT(*) FROM experiences").fetchone()
    finally:
        db.close()
    more = len(found) > limit
    found = found[:limit]
    if after is not None:  # read upwards from the cursor; shown newest first like every page
        found.reverse()
        older, newer = (found[-1].seq if found else None), (found[0].seq if found and more else None)
    else:
        older = found[-1].seq if found and more else None
        newer = found[0].seq if found and before is not None else None
    return Page(found, older, newer, total)
