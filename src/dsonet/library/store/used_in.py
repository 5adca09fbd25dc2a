"""Outcomes per environment: a scoped lesson's uses and helps counted under the asker's
major.minor of each package the lesson pins (``numpy==1.26``; `Scope.used_in`), '' where the asker
said none of them. Beside the rows' own counters (which eviction reads, summed over every
environment), so a lesson that helps on NumPy 2.4 and fails on 1.26 shows both. Created on first
use, so a file written before it opens unchanged; unscoped lessons are not counted here.
"""

from __future__ import annotations

import sqlite3

_TABLE = ("CREATE TABLE IF NOT EXISTS used_in (id TEXT NOT NULL, environment TEXT NOT NULL, uses INTEGER NOT NULL,"
          " helped INTEGER NOT NULL, PRIMARY KEY (id, environment))")


def record(db: sqlite3.Connection, exp_id: str, environment: str, helped: bool) -> None:
    db.execute(_TABLE)
    db.execute("INSERT INTO used_in VALUES (?, ?, 1, ?) ON CONFLICT (id, environment) DO UPDATE SET"
               " uses = uses + 1, helped = helped + excluded.helped", (exp_id, environment, int(helped)))


def of(db: sqlite3.Connection, exp_id: str) -> dict[str, tuple[int, int]]:
    """environment -> (uses, helped) of one lesson."""
    db.execute(_TABLE)
    return {env: (uses, helped) for env, uses, helped in
            db.execute("SELECT environment, uses, helped FROM used_in WHERE id = ? ORDER BY environment", (exp_id,))}
