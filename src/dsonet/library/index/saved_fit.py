"""What an open would otherwise recompute, kept in the library file: the code index's fitted
stages (the merged view's clusters are kept beside them, `dsonet.library.view.saved_clusters`).

Fitting stage 2b (and, past 16k rows, the sketch) is most of an open's time at d = 7680: about a
second at 10k rows, redone by every `dso search`. A fit is a function of the rows it read, so
each stage is kept in the file with the number of rows it was fitted on and the `fingerprint`
of those rows (`CodeIndex.fingerprint`: codes, scales, baselines, the stages' constants):

    index_fits (stage TEXT PRIMARY KEY, rows INTEGER, fingerprint TEXT, state BLOB)   -- state: .npz bytes

On open, a stage whose rows are unchanged is restored; the refit rule then decides as it would
live (`CodeIndex.refit_due`: ×4 growth since the fit), and what it fits is saved, as is what a
node's deferred refit fits (`Library.install_fit`; an eager refit inside a write is not: the next
open fits again and keeps that). A row changed,
removed or reordered under the saved fit changes the fingerprint, and the stage is fitted again.
Files from before this table have none: they fit once on open and keep the fit from then on
(the table is created on open, the migration). Saving is best effort: a file that cannot be
written (read-only, locked past the timeout) is searched with the fit made in memory.
"""

from __future__ import annotations

import io
import sqlite3

import numpy as np

from dsonet.library.index.code_index import CodeIndex

_TABLE = ("CREATE TABLE IF NOT EXISTS index_fits (stage TEXT PRIMARY KEY, rows INTEGER NOT NULL,"
          " fingerprint TEXT NOT NULL, state BLOB NOT NULL)")


def fit_on_open(index: CodeIndex, db: sqlite3.Connection) -> dict[str, str]:
    """Restore ``index``'s saved stages whose rows are unchanged, fit what is due, save what was
    fitted. Returns stage -> "restored" or "fitted" (stages neither restored nor due are left out)."""
    done: dict[str, str] = {}
    for stage, rows, fingerprint, blob in _saved(db):
        if rows <= index.n and index.fingerprint(rows) == fingerprint:
            index.restore(stage, _unpack(blob))
            done[stage] = "restored"
    due = index.refit_due()
    if due is None:
        return done
    index.install(index.fit(due))
    fitted = {name for name, on in (("subspace", due.subspace), ("sketch", due.sketch)) if on}
    done.update(dict.fromkeys(fitted, "fitted"))
    keep_fits(db, index, fitted)
    return done


def _saved(db: sqlite3.Connection) -> list[tuple[str, int, str, bytes]]:
    try:
        return db.execute("SELECT stage, rows, fingerprint, state FROM index_fits").fetchall()
    except sqlite3.DatabaseError:  # no such table (a file from before saved fits), or unreadable: fit again
        return []


def keep_fits(db: sqlite3.Connection, index: CodeIndex, stages: set[str]) -> None:
    """Save the named stages' fits (an open's, or `Library.install_fit`'s); best effort."""
    records = [(name, rows, index.fingerprint(rows), _pack(state))
               for name, (rows, state) in index.fitted_states().items() if name in stages]
    try:
        db.execute(_TABLE)
        db.executemany("INSERT OR REPLACE INTO index_fits VALUES (?, ?, ?, ?)", records)
    except sqlite3.OperationalError:  # read-only or locked: this open keeps its fit in memory only
        pass


def _pack(state: dict[str, np.ndarray]) -> bytes:
    out = io.BytesIO()
    np.savez(out, **state)
    return out.getvalue()


def _unpack(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as arrays:
        return {name: arrays[name] for name in arrays.files}
