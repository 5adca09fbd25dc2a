"""The merged view: DeltaSoup's phase 4 (dedup merge), the one merge rule a node runs.

DeltaSoup's filter decides which rows are admitted; the library holds every admitted row (one
per experience id and signer) and shows near-duplicates as one experience:

- clusters: connected components of "same domain and cos(ê_a, ê_b) > θ_dup" over the rows'
  reconstructions ê (what every node can compute alike from the same codes), θ_dup = 0.95
  (federated-agents paper §5), via `duplicate_clusters_by_rows`;
- each member weighs confidence × trust, where trust is the signer's reputation (1 for this
  node's own rows); the cluster's vector is the weighted mean of its members' vectors;
- the representative, whose text, provenance and confidence the cluster shows, is this node's
  own row when it has one, else the member of largest weight. The paper takes the cluster's
  confidence as the members' maximum; we take the representative's, so a distrusted member
  cannot raise it by claiming 1.0, and a peer's copy never displaces the author's own row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from dsonet.library.view.dedup import THETA_DUP, duplicate_clusters_by_rows

__all__ = ["THETA_DUP", "Member", "MergeRule", "MergedView"]


@dataclass(frozen=True)
class Member:
    row: int  # index row
    key: tuple[str, str]  # (experience id, signer)
    confidence: float
    trust: float
    own: bool  # this node's own row


@dataclass(frozen=True)
class MergeRule:
    theta_dup: float = THETA_DUP

    def weights(self, members: list[Member]) -> np.ndarray:
        return np.array([max(m.confidence * m.trust, 1e-6) for m in members], np.float32)

    def representative(self, members: list[Member]) -> Member:
        return min(members, key=lambda m: (not m.own, -m.confidence * m.trust, m.key))

    def vector(self, members: list[Member], vectors: np.ndarray) -> np.ndarray:
        """(d,) the L2-normalised weighted mean of the members' vectors (rows of ``vectors``)."""
        v = self.weights(members) @ np.asarray(vectors, np.float32)
        return v / max(float(np.linalg.norm(v)), 1e-12)


class MergedView:
    """Clusters of index rows per domain, recomputed lazily for the domains whose rows changed.

    ``reconstruct(rows)`` gives ê of index rows; ``key(row)`` its (id, signer); ``domain_rows(d)``
    the live index rows of a domain; ``live(rows)`` which of some rows are still held.

    Rebuilding a domain's clusters costs seconds at tens of thousands of rows (d = 7680). A node
    that ingests while it answers searches therefore `defer`s the domains its writes change
    instead of `touch`ing them: searches keep the clusters of the last build (rows added since
    then show alone, rows removed since then drop out of their cluster), while the ingest thread
    takes the rows to cluster (`pending`, under the node's lock), clusters them without the lock
    (`build`) and `install`s the result (under the lock again). The clusters are always those
    of a set of rows the library held, so every node still converges on the same view."""

    def __init__(self, rule: MergeRule, reconstruct: Callable[[np.ndarray], np.ndarray],
                 key: Callable[[int], tuple[str, str]], domain_rows: Callable[[str], np.ndarray], dim: int,
                 live: Callable[[np.ndarray], np.ndarray] | None = None,
                 on_build: Callable[[str, np.ndarray, list[np.ndarray]], None] | None = None):
        """``on_build(domain, rows, clusters)``: told of each domain a read rebuilt (the library
        keeps them in its file, so the next open need not rebuild: `dsonet.library.view.saved_clusters`)."""
        self.rule, self._reconstruct, self._key, self._domain_rows, self.dim = rule, reconstruct, key, domain_rows, dim
        self._live, self._on_build = live, on_build
        self._clusters: dict[str, list[np.ndarray]] = {}  # domain -> clusters (index rows, sorted by key)
        self._cluster_of: dict[int, tuple[str, int]] = {}  # index row -> (domain, cluster number)
        self._dirty: set[str] = set()  # rebuilt at the next read
        self._deferred: set[str] = set()  # rebuilt by `pending` / `build` / `install`

    def touch(self, domains) -> None:
        self._dirty.update(domains)

    def defer(self, domains) -> None:
        self._deferred.update(domains)

    def cluster(self, row: int) -> np.ndarray:
        """The index rows merged with ``row`` (itself included)."""
        self._update()
        place = self._cluster_of.get(row)
        if place is None:  # added after the last build of a deferred domain: alone until the next
            return np.array([row], np.int64)
        rows = self._clusters[place[0]][place[1]]
        if self._live is not None:
            rows = rows[self._live(rows)]  # a member removed since the last build drops out
        return rows if len(rows) else np.array([row], np.int64)

    def clusters(self, domain: str | None = None) -> list[np.ndarray]:
        self._update()
        domains = sorted(self._clusters) if domain is None else [domain]
        return [c for d in domains for c in self._clusters.get(d, [])]

    def pending(self) -> dict[str, np.ndarray]:
        """The deferred domains' rows, in the order `build` needs (call it under the lock that guards
        the index); they count as built from now on."""
        jobs = {domain: self.sorted_rows(domain) for domain in sorted(self._deferred - self._dirty)}
        self._deferred.clear()
        return jobs

    def build(self, rows: np.ndarray) -> list[np.ndarray]:
        """One domain's clusters from its rows (as `pending` gave them); reads only rows that exist."""
        if len(rows) == 0:
            return []
        reps = duplicate_clusters_by_rows(lambda idx: self._reconstruct(rows[idx]), len(rows), self.dim,
                                          [""] * len(rows), self.rule.theta_dup)
        _, labels = np.unique(reps, return_inverse=True)
        order = np.argsort(labels, kind="stable")
        members, bounds = rows[order], np.r_[0, np.cumsum(np.bincount(labels))]
        return [members[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def install(self, built: dict[str, list[np.ndarray]], jobs: dict[str, np.ndarray] | None = None) -> None:
        """Show built clusters (under the lock); a domain touched meanwhile is rebuilt at the next read anyway.
        ``jobs``: the rows each was built from (`pending`'s), told to ``on_build`` as a read's build is
        (clusters restored from the file are shown without them: nothing new to keep)."""
        for domain, clusters in built.items():
            if domain not in self._dirty:
                self._set(domain, clusters)
        if jobs is not None and self._on_build is not None:
            for domain, clusters in built.items():
                self._on_build(domain, jobs[domain], clusters)

    def sorted_rows(self, domain: str) -> np.ndarray:
        """A domain's live rows in the order `build` takes them (by key: the set decides, not the arrival order)."""
        rows = self._domain_rows(domain)
        keys = [self._key(r) for r in rows.tolist()]
        return rows[sorted(range(len(rows)), key=keys.__getitem__)]

    def _set(self, domain: str, clusters: list[np.ndarray]) -> None:
        for c in self._clusters.pop(domain, []):
            for r in c.tolist():
                self._cluster_of.pop(r, None)
        if clusters:
            self._clusters[domain] = clusters
            self._cluster_of.update((r, (domain, c)) for c, rows in enumerate(clusters) for r in rows.tolist())

    def _update(self) -> None:
        for domain in sorted(self._dirty):
            rows = self.sorted_rows(domain)
            clusters = self.build(rows)
            self._set(domain, clusters)
            if self._on_build is not None:
                self._on_build(domain, rows, clusters)
        self._dirty.clear()
