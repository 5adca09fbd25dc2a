"""The merged view read as hits: a cluster shown as one `Hit` (its representative's experience,
every trusted member's id and signer), and a search's walk down the ranked index rows to the
clusters a `RetrievalPolicy` admits. Reads the index's per-row fields, and one file row per
cluster shown (its representative's).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dsonet.experience import Experience
from dsonet.library.errors import LibraryError
from dsonet.library.hits import Hit, Hits
from dsonet.library.view.merge import Member, MergedView
from dsonet.library.policy import RetrievalPolicy
from dsonet.library.index.row_index import RowIndex
from dsonet.library.store.rows import RowStore

# A merged cluster's vector can score a little above its best member (the mean of near-duplicates);
# the walk over candidates stops this far under the threshold.
MERGE_SLACK = 0.05


class MergedHits:
    def __init__(self, index: RowIndex, view: MergedView, rows: RowStore,
                 trust: Callable[[str], float] | None = None):
        """``trust``: a signer's weight in the merged view; every signer weighs 1 without it."""
        self.index, self.view, self.rows = index, view, rows
        self.trust = trust or (lambda _signer: 1.0)

    def cluster(self, rows: np.ndarray) -> tuple[Hit, list[Member]] | None:
        """A cluster's representative (as a Hit without a score) and its trusted members; None when
        every member's signer is trusted 0. One file read: the representative's row."""
        idx = self.index
        members = [Member(r, (idx.ids[r], idx.signers[r]), idx.confidence[r], self.trust(idx.signers[r]),
                          bool(idx.own[r])) for r in rows.tolist()]
        members = [m for m in members if m.trust > 0]  # a signer trusted 0 is hidden, not deleted
        if not members:
            return None
        rep = self.view.rule.representative(members)
        (exp,) = self.rows.by_seq([idx.seqs[rep.row]]).values()
        return Hit(exp, 0.0, tuple(sorted({m.key[0] for m in members})), tuple(sorted({m.key[1] for m in members}))), \
            members

    def clusters(self, domain: str | None = None) -> dict[str, list[str]]:
        """Representative id -> member ids (sorted, distinct), for one domain or all."""
        out = {}
        for rows in self.view.clusters(domain):
            shown = self.cluster(rows)
            if shown is not None:
                out[shown[0].experience.id] = list(shown[0].members)
        return out

    def merged(self, rep_id: str) -> tuple[Experience, np.ndarray]:
        """The cluster of ``rep_id`` as one experience (its representative) and its vector."""
        shown = self.cluster(self.view.cluster(self.preferred_row(rep_id)))
        if shown is None:
            raise LibraryError(f"exp_id: {rep_id!r} is held only from signers trusted 0")
        hit, members = shown
        return hit.experience, self.vector(members)

    def preferred_row(self, exp_id: str) -> int:
        """The index row that speaks for an experience: its author's where held, else its first."""
        exp = self.rows.get(exp_id)
        if exp is None:
            raise LibraryError(f"exp_id: {exp_id!r} is not in the library")
        rows = self.index.rows_of(exp_id)
        return next((r for r in rows if self.index.signers[r] == exp.provenance.node_id), rows[0])

    def vector(self, members: list[Member]) -> np.ndarray:
        """(d,) the cluster's vector: its members' weighted mean (`MergeRule.vector`)."""
        return self.view.rule.vector(members, self.index.vectors([m.row for m in members]))

    def walk(self, q: np.ndarray, rows: np.ndarray, scores: np.ndarray, policy: RetrievalPolicy) -> Hits:
        """The hits for a unit query ``q`` from its ranked index rows (best first, before merging):
        each cluster once, scored by its vector, while the policy's k, threshold and token budget allow."""
        hits, seen, best = Hits(threshold=policy.min_similarity), set(), None
        for r, s in zip(rows.tolist(), scores.tolist()):  # walks at most the oversampled candidates, best first
            if s < policy.min_similarity - MERGE_SLACK:
                best = s if best is None else best  # nothing shown scored: the best candidate left says how near
                break  # a cluster scores about its best member: nothing further down can pass
            cluster = self.view.cluster(r)
            if int(cluster[0]) in seen:
                continue
            seen.add(int(cluster[0]))
            shown = self.cluster(cluster)
            if shown is None:
                continue
            hit, members = shown
            score = s if len(members) == 1 and members[0].row == r else float(self.vector(members) @ q)
            best = score if best is None else max(best, score)
            if not hits.offer(hit, score, policy):
                break
        hits.best_score = best
        return hits
