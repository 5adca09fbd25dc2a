"""A text search's second stage applied to the first stage's candidates (`dsonet.encoders.rescore`).

The first stage ranks the codes in the profile's space and hands over its best `CANDIDATES`
(or k) clusters, whatever they score; the second scores each again from the question's text and the
lesson's, and the policy (k, its threshold, the token budget) is applied to those scores, so a
hit's score and the threshold an empty answer reports are the second stage's.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from dsonet.library.hits import Hits
from dsonet.library.policy import RetrievalPolicy

# First-stage clusters a question's second stage sees, unless k asks for more. On the users' set the
# figures at the shipped threshold are the same for 3, 5, 10 or 20; each candidate costs two
# MiniLM encodes in a cold process (20 took a cold `dso search` from 1.7 to 3.1 s on 2 busy cores).
CANDIDATES = 5


class Rescorer(Protocol):
    @property
    def id(self) -> str: ...

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...


def rescored(candidates: Hits, scores: np.ndarray, policy: RetrievalPolicy) -> Hits:
    """``candidates`` (first-stage hits) with ``scores`` (the second stage's, one per hit), best
    first, as many as ``policy`` (resolved) admits."""
    out = Hits(threshold=policy.min_similarity,
               best_score=float(scores.max()) if len(scores) else candidates.best_score)
    for i in np.argsort(-scores, kind="stable").tolist():
        if not out.offer(candidates[i], float(scores[i]), policy):
            break
    return out
