"""A search in the asker's environment: the lessons whose scope contradicts it held
back, with why; those that fit first, those it cannot tell after (`dsonet.scope` for the rule).

The contradicting lessons are left out of the ranking itself (`excluded`), so however many there
are, the k best of the rest come back; a second ranking over them alone names those a search
without the environment would have returned (`held_back`). A hit is a merged cluster, and its
members may come from different environments (the same words learned on NumPy 2.4 and on 1.26 are
two lessons, near enough to merge): the hit shows its member that holds here, so an agent never
reads a scope that contradicts its own.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from dsonet.experience import Experience
from dsonet.library.store import used_in
from dsonet.library.hits import HeldBack, Hit, Hits
from dsonet.library.view.merged_hits import MergedHits
from dsonet.library.policy import RetrievalPolicy
from dsonet.library.index.row_index import RowIndex
from dsonet.library.store.rows import RowStore
from dsonet.scope import Fit, Scope

_ORDER = {"fits": 0, "unknown": 1}


class ScopedLessons:
    """The library's lessons by their scopes: a search in an environment, outcomes per environment."""

    def __init__(self, rows: RowStore, index: RowIndex, merged_hits: MergedHits):
        self.rows, self.search_index, self.merged_hits = rows, index, merged_hits
        self.get: Callable[[str], Experience | None] = rows.get

    def scopes(self, ids: list[str] | None = None) -> dict[str, Scope]:
        """id -> the scope of each lesson of ``ids`` (None: of every scoped lesson held; `dsonet.scope`)."""
        return {i: _parsed(s) for i, s in self.rows.scopes(ids).items()}

    def search_in(self, q: np.ndarray, policy: RetrievalPolicy, domain: str | None, within: set[str] | None,
                  environment: Scope) -> Hits:
        """`Library.search_vector` in an asker's environment (this module's rule), ``policy`` resolved."""
        against = excluded(self.scopes(), environment)
        held = ()
        if against:  # the rest ranked alone (an id mask over every row: O(rows) a search, with contradictions only)
            idx, out = self.search_index, set(against)
            rows, scores = idx.rank(q, policy.k, domain, out if within is None else out & within)
            held = held_back(rows, scores, idx.ids, against, policy, self.get)
            within = (set(idx.ids) if within is None else within) - out
        rows, scores = self.search_index.rank(q, policy.k, domain, within)
        return in_environment(self.merged_hits.walk(q, rows, scores, policy), environment, self.scopes, self.get,
                              held)

    def count_in(self, exp_id: str, helped: bool, environment: Scope | None) -> None:
        """A scoped lesson's outcome, counted under the asker's environment (`dsonet.library.store.used_in`)."""
        scope = self.scopes([exp_id]).get(exp_id)
        if scope:
            used_in.record(self.rows.db, exp_id, scope.used_in(environment or Scope()), helped)

    def outcomes_by_environment(self, exp_id: str) -> dict[str, tuple[int, int]]:
        """A scoped lesson's (uses, helped) per environment it was used in ('': not told)."""
        return used_in.of(self.rows.db, exp_id)

    def accountable(self, hit: Hit, environment: Scope | None) -> tuple[str, ...]:
        """The signers an outcome of ``hit`` in ``environment`` speaks for: each source that signed a
        member whose scope does not contradict it. A lesson used where it was never meant to hold says
        nothing of its signer; with no environment told, every source."""
        if environment is None:
            return hit.sources
        ids = hit.ids
        held = {i for i, s in self.scopes(list(ids)).items() if s.fit(environment).verdict != "contradicts"}
        idx = self.search_index
        signers = {idx.signers[r] for i in held for r in idx.rows_of(i)}
        return tuple(s for s in hit.sources if s in signers)


@functools.lru_cache(maxsize=4096)
def _parsed(scope: str) -> Scope:
    """A stored scope, parsed once: every search in an environment reads every scoped lesson's."""
    return Scope.parse(scope)


def excluded(scoped: dict[str, Scope], environment: Scope) -> dict[str, Fit]:
    """The lessons (of every scoped one held) whose scope contradicts ``environment``, with why."""
    fits = {i: s.fit(environment) for i, s in scoped.items()}
    return {i: f for i, f in fits.items() if f.verdict == "contradicts"}


def held_back(rows: np.ndarray, scores: np.ndarray, ids: list[str], against: dict[str, Fit],
              policy: RetrievalPolicy, lesson: Callable[[str], Experience | None]) -> tuple[HeldBack, ...]:
    """The contradicting lessons a search would have returned (ranked rows over them alone, best
    first): up to k at or above the threshold, each once."""
    out: dict[str, HeldBack] = {}
    for r, s in zip(rows.tolist(), scores.tolist()):
        i = ids[r]
        if len(out) == policy.k or not policy.admits(s):
            break
        exp = None if i in out else lesson(i)
        if exp is not None:
            out[i] = HeldBack(i, exp.text, against[i].reason)
    return tuple(out.values())


def in_environment(hits: Hits, environment: Scope, scopes: Callable[[list[str]], dict[str, Scope]],
                   lesson: Callable[[str], Experience | None], held: tuple[HeldBack, ...]) -> Hits:
    """``hits`` (best first, walked over the rows that do not contradict) judged in ``environment``:
    those that fit before those unknown, each by score, every one showing a member that holds here.
    ``scopes``: id -> scope of lessons; ``lesson``: a member's experience by id; ``held``: `held_back`'s."""
    ids = sorted({i for h in hits for i in h.ids})
    known = scopes(ids)
    kept = []
    for hit in hits:
        fits = {i: known.get(i, Scope()).fit(environment) for i in hit.ids}
        usable = {i: f for i, f in fits.items() if f.verdict != "contradicts"}
        shown = _shown(hit, usable, lesson)
        if shown is not None:  # None: the member that holds was deleted meanwhile; never show one that does not
            best = min((f.verdict for f in usable.values()), key=_ORDER.get)
            kept.append(Hit(shown, hit.score, hit.members, hit.sources, best))
    kept.sort(key=lambda h: _ORDER[h.fit])  # stable: by score within each
    return Hits(kept, hits.threshold, hits.best_score, environment=environment, held_back=held)


def _shown(hit: Hit, usable: dict[str, Fit], lesson: Callable[[str], Experience | None]) -> Experience | None:
    """The representative where it is usable here, else the member that fits best."""
    if not usable:
        return None
    if hit.experience.id in usable:
        return hit.experience
    return lesson(min(sorted(usable), key=lambda i: _ORDER[usable[i].verdict]))
