"""What an open would otherwise recompute, kept in the library file: the merged view's clusters
(`dsonet.library.view.merge`), the other cost of a first search beside the index's fit
(`dsonet.library.index.saved_fit`): every row of the domain reconstructed and clustered, 1.9 s at
10k rows, redone by every `dso search`. They are a function of the domain's rows in key order (their
codes and baselines) and θ_dup, so each domain's cluster labels are kept with that fingerprint,
saved when a read (or a node's deferred rebuild, `Library.install_merged`) builds them:

    merged_clusters (domain TEXT PRIMARY KEY, fingerprint TEXT, labels BLOB)   -- int64 per row, key order

On open a domain whose rows are unchanged shows its kept clusters; any other is rebuilt at its
first read, as before. A write to a domain changes its fingerprint: the next read rebuilds it.
"""

from __future__ import annotations

import sqlite3

import numpy as np

from dsonet.library.index.code_index import CodeIndex
from dsonet.library.index.row_index import RowIndex
from dsonet.library.view.decoded import DecodedRows
from dsonet.library.view.merge import MergedView, MergeRule

_CLUSTERS = ("CREATE TABLE IF NOT EXISTS merged_clusters (domain TEXT PRIMARY KEY, fingerprint TEXT NOT NULL,"
             " labels BLOB NOT NULL)")
MERGE_FORMAT = 1  # raise when the clustering changes (dedup's LSH, the rule): kept clusters are then rebuilt


def opened_view(index: RowIndex, rule: MergeRule, decoded: DecodedRows, db: sqlite3.Connection) -> MergedView:
    """The merged view of an opened file's rows: the clusters it keeps for unchanged domains shown, the
    others built at their first read; each build kept in the file, and its rows' ê let go (`DecodedRows`)."""
    def built(domain: str, rows: np.ndarray, clusters: list[np.ndarray]) -> None:
        keep_clusters(db, index.index, view, domain, rows, clusters)
        decoded.merged(rows, index.index.live)

    view = MergedView(rule, decoded, lambda r: (index.ids[r], index.signers[r]), index.domain_rows,
                      index.profile.dim, live=lambda rows: index.index.live[rows], on_build=built)
    domains = set(index.domains)
    view.touch(domains - restore_clusters(view, index.index, db, domains))
    return view


def restore_clusters(view: MergedView, index: CodeIndex, db: sqlite3.Connection, domains: set[str]) -> set[str]:
    """Show the kept clusters of the ``domains`` whose rows are unchanged; returns those domains."""
    try:
        saved = {d: (f, labels) for d, f, labels in db.execute("SELECT domain, fingerprint, labels FROM merged_clusters")}
    except sqlite3.DatabaseError:  # no such table (a file from before kept clusters), or unreadable: rebuild
        return set()
    restored = {}
    for domain in sorted(domains & saved.keys()):
        rows = view.sorted_rows(domain)
        fingerprint, blob = saved[domain]
        labels = np.frombuffer(blob, "<i8")
        if len(labels) == len(rows) and _cluster_fingerprint(index, view, rows) == fingerprint:
            order = np.argsort(labels, kind="stable")  # as `MergedView.build` lays its clusters out
            bounds = np.r_[0, np.cumsum(np.bincount(labels))]
            restored[domain] = [rows[order[a:b]] for a, b in zip(bounds[:-1], bounds[1:])]
    view.install(restored)
    return set(restored)


def keep_clusters(db: sqlite3.Connection, index: CodeIndex, view: MergedView, domain: str, rows: np.ndarray,
                  clusters: list[np.ndarray]) -> None:
    """Save one domain's clusters as built from ``rows`` (`MergedView`'s ``on_build``); best effort."""
    position = {r: i for i, r in enumerate(rows.tolist())}
    labels = np.zeros(len(rows), "<i8")
    for number, members in enumerate(clusters):
        labels[[position[r] for r in members.tolist()]] = number
    try:
        db.execute(_CLUSTERS)
        db.execute("INSERT OR REPLACE INTO merged_clusters VALUES (?, ?, ?)",
                   (domain, _cluster_fingerprint(index, view, rows), labels.tobytes()))
    except sqlite3.OperationalError:  # read-only or locked: the next open rebuilds them
        pass


def _cluster_fingerprint(index: CodeIndex, view: MergedView, rows: np.ndarray) -> str:
    return index.fingerprint(rows, f"merge:{MERGE_FORMAT}:{view.rule.theta_dup!r}")
