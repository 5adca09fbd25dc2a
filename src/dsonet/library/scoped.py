"""A search in the asker's environment (issue 36): the lessons whose scope contradicts it held
back, with why; those that fit first, those it cannot tell after (`dsonet.scope` for the rule).

A hit is a merged cluster, and its members may come from different environments (the same words
learned on NumPy 2.4 and on 1.26 are two lessons, near enough to merge): the hit stays while one
member does not contradict, and shows that member's lesson, so an agent never reads a scope that
contradicts its own. The search asks the walk for `ROOM` times k clusters, so holding some back
still leaves k to return; where more than (ROOM − 1)·k contradicting clusters outrank the rest, fewer
than k come back (the held-back list says so).
"""

from __future__ import annotations

from typing import Callable

from dsonet.experience import Experience
from dsonet.library.hits import HeldBack, Hit, Hits
from dsonet.library.policy import RetrievalPolicy, estimate_tokens
from dsonet.scope import Fit, Scope

ROOM = 3
_ORDER = {"fits": 0, "unknown": 1}


def wider(policy: RetrievalPolicy) -> RetrievalPolicy:
    """The policy the walk runs under before `in_environment` cuts its hits back to ``policy``."""
    return RetrievalPolicy(ROOM * policy.k, policy.min_similarity, policy.max_tokens)


def in_environment(hits: Hits, environment: Scope, policy: RetrievalPolicy,
                   scopes: Callable[[list[str]], dict[str, Scope]],
                   lesson: Callable[[str], Experience | None]) -> Hits:
    """``hits`` (best first, from the `wider` walk) judged in ``environment``: at most ``policy.k``
    within its token budget, those that fit before those unknown, each by score; the rest held back.
    ``scopes``: id -> scope of lessons; ``lesson``: a member's experience by id."""
    ids = sorted({i for h in hits for i in (h.members or (h.experience.id,))})
    known = scopes(ids)
    kept, held = [], []
    for hit in hits:
        fits = {i: known.get(i, Scope()).fit(environment) for i in (hit.members or (hit.experience.id,))}
        usable = {i: f for i, f in fits.items() if f.verdict != "contradicts"}
        if not usable:
            fit = fits.get(hit.experience.id) or next(iter(fits.values()))
            held.append(HeldBack(hit.experience.id, hit.experience.text, fit.reason))
            continue
        shown = _shown(hit, usable, lesson)
        if shown is None:  # the member that fits was deleted meanwhile: never show the one that does not
            held.append(HeldBack(hit.experience.id, hit.experience.text, next(iter(fits.values())).reason))
            continue
        kept.append(Hit(shown, hit.score, hit.members, hit.sources, _best(usable.values()).verdict))
    kept.sort(key=lambda h: _ORDER[h.fit])  # stable: by score within each
    out, used = [], 0
    for hit in kept[:policy.k]:
        if not policy.fits(used, hit.experience.text):
            break
        used += estimate_tokens(hit.experience.text)
        out.append(hit)
    return Hits(out, hits.threshold, hits.best_score, environment=environment, held_back=tuple(held))


def _best(fits) -> Fit:
    return min(fits, key=lambda f: _ORDER[f.verdict])


def _shown(hit: Hit, usable: dict[str, Fit], lesson: Callable[[str], Experience | None]) -> Experience | None:
    """The representative where it is usable here, else the member that fits best."""
    if hit.experience.id in usable:
        return hit.experience
    return lesson(min(sorted(usable), key=lambda i: _ORDER[usable[i].verdict]))
