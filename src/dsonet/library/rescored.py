"""A text search's second stage applied to the first stage's candidates (`dsonet.encoders.rescore`).

The first stage ranks the codes in the profile's space and hands over its best `CANDIDATES`
clusters, whatever they score; the second scores each again from the question's text and the
lesson's, and the policy (k, its threshold, the token budget) is applied to those scores, so a
hit's score and the threshold an empty answer reports are the second stage's.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from dsonet.library.hits import Hit, Hits
from dsonet.library.policy import RetrievalPolicy, estimate_tokens

CANDIDATES = 20  # first-stage clusters a question's second stage sees (the bench's rescored figures)


class Rescorer(Protocol):
    @property
    def id(self) -> str: ...

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...


def rescored(candidates: Hits, scores: np.ndarray, policy: RetrievalPolicy) -> Hits:
    """``candidates`` (first-stage hits) with ``scores`` (the second stage's, one per hit), best
    first, as many as ``policy`` (resolved) admits."""
    out, used = Hits(threshold=policy.min_similarity,
                     best_score=float(scores.max()) if len(scores) else candidates.best_score), 0
    for i in np.argsort(-scores, kind="stable").tolist():
        hit, score = candidates[i], float(scores[i])
        if not policy.admits(score):
            break  # best first: nothing further down passes
        if not policy.fits(used, hit.experience.text):
            break
        used += estimate_tokens(hit.experience.text)
        out.append(Hit(hit.experience, score, hit.members, hit.sources))
        if len(out) == policy.k:
            break
    return out
