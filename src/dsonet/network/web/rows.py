"""One page of the library's rows for the node's page, read straight from the library file.

A read-only SQLite connection of its own (WAL: it never waits for the node's writes, and a page
never holds the lock the node's searches take), one page of rows at a time by key (``seq``, newest
first): the 100,000th row costs what the first does, and nothing reads the whole table. Filters are
SQL: an exact domain, a signer prefix, a substring of the text. A filter that matches few rows
would scan the whole table for one page (a substring has no index): a filtered page looks through
at most `SCAN_ROWS` seqs and says so, and its "older" link goes on from there.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

PAGE_ROWS = 50
SCAN_ROWS = 20_000  # seqs a filtered page looks through at most (~40 ms of a 2-core machine's scan)
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
    scope: str = ""  # where the lesson holds, canonical ('' everywhere; `dsonet.scope`)

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
    window: tuple[int, int] | None = None  # a filtered page that looked through every row in these seqs


def read_page(path: Path, filters: Filters = Filters(), before: int | None = None, after: int | None = None,
              limit: int = PAGE_ROWS, scan: int = SCAN_ROWS) -> Page:
    """Rows newest first: the ``limit`` rows older than seq ``before`` (or newer than ``after``, the
    page back), with each lesson's copies counted by its id's index. A filtered page looks through
    at most ``scan`` rows' worth of seqs from its cursor (`Page.window`); its cursor then continues
    past them, so a filter that matches nothing still answers within the page's time."""
    if before is not None and after is not None:
        raise FilterError("before/after: give one cursor, not both")
    if not 1 <= limit <= MAX_PAGE_ROWS:
        raise FilterError(f"limit: {limit}; a page holds 1 to {MAX_PAGE_ROWS} rows")
    clauses, args = filters.where()
    filtered = bool(clauses)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        # two subqueries: SQLite reads MIN and MAX off the key alone only one at a time (a scan otherwise)
        low, high = db.execute("SELECT COALESCE((SELECT MIN(seq) FROM experiences), 0),"
                               " COALESCE((SELECT MAX(seq) FROM experiences), 0)").fetchone()
        if after is None:  # seqs in [lo, hi), read downwards
            hi = high + 1 if before is None else int(before)
            lo = max(hi - scan, low) if filtered else low
        else:  # seqs in [lo, hi), read upwards from the cursor
            lo = int(after) + 1
            hi = min(lo + scan, high + 1) if filtered else high + 1
        order = "ASC" if after is not None else "DESC"
        sql = (f"SELECT e.seq, e.id, e.signer, e.text, e.domain, e.confidence,"
               f" (SELECT COUNT(*) FROM experiences c WHERE c.id = e.id), e.uses, e.helped, e.timestamp_ms, e.added_ms,"
               f" e.scope"
               f" FROM experiences e WHERE {' AND '.join(['e.seq >= ? AND e.seq < ?', *clauses])}"
               f" ORDER BY e.seq {order} LIMIT ?")
        found = [LessonRow(*r) for r in db.execute(sql, (lo, hi, *args, limit + 1))]
        (total,) = db.execute("SELECT COUNT(*) FROM experiences").fetchone()
    finally:
        db.close()
    more = len(found) > limit
    found = found[:limit]
    if after is None:
        # older: below the last row shown, or below the window when it held fewer matches than a page
        older = found[-1].seq if more else (lo if lo > low else None)
        newer = (found[0].seq if found else hi - 1) if before is not None else None
    else:
        found.reverse()  # shown newest first, like every page
        newer = found[0].seq if more else (hi - 1 if hi <= high else None)
        older = found[-1].seq if found else lo
    window = (lo, hi - 1) if filtered and (not more) else None
    return Page(found, older, newer, total, window)
