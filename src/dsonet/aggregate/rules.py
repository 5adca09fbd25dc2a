"""Admission rules: which decompressed experience vectors a round lets in.

Federated learning's robust rules produce one *center* from many updates; a library needs a
*set*: which experiences to keep. Our reading, the same for every center rule:

    center c = rule(rows)                 (on a seeded row sample, see DeltaSoupConfig)
    distance  δ_i = 1 − cos(ê_i, c)
    drop ê_i  when δ_i > median(δ) + z_max · 1.4826 · MAD(δ)      (one-sided robust z-score)

so a row is dropped when it is much farther from the robust center than the crowd is.
"deltasoup" is the paper's own coordinate-wise score instead (`mad_scores`, τ = 2.0);
"krum" keeps the n − ⌊f·n⌋ rows with the lowest Multi-Krum scores; "mean" keeps everything
(the undefended baseline). Trimmed mean and Krum need an assumed Byzantine share; both assume
30% (trim β = 0.3 from each end; Krum f = 0.3·n), the fraction the paper's headline is about.
Every rule sees the same rows and returns an `Admission`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from dsonet.aggregate import robust
from dsonet.aggregate.errors import AggregationError


@dataclass(frozen=True)
class Admission:
    keep: np.ndarray  # (n,) bool
    scores: np.ndarray  # (n,) float32, larger = more suspicious
    center: np.ndarray | None  # (d,) the rule's robust center, when it has one


class Rule(Protocol):
    name: str

    def admit(self, vectors: np.ndarray, pool: np.ndarray, floor: np.ndarray | None = None) -> Admission:
        """``vectors``: every row of the round (n, d); ``pool``: the rows the center is estimated
        from (a seeded sample of ``vectors``, plus the node's reference rows if it has any);
        ``floor``: a per-coordinate lower bound on the spread, for rules that estimate one."""
        ...


class DeltaSoupRule:
    """The paper's filter: μ = coordinate median, σ = MAD, drop mean_j |ê_j − μ_j|/(σ_j + ε) > τ.

    ``floor`` (ours, per coordinate): σ_j = max(MAD_j, floor_j). A 1-bit code makes every coordinate
    of a batch two-valued (ē_j ± α); when few baselines are in play the median lands on one of the
    two values and the MAD collapses towards 0, so the paper's score explodes for honest rows (a
    round of one batch loses all of it). DeltaSoup passes the median code scale α of j's group,
    the spread quantisation alone gives every coordinate; a median over rows, so attackers cannot
    raise it without being the majority.
    """

    name = "deltasoup"

    def __init__(self, tau: float = 2.0, eps: float = 1e-8):
        self.tau, self.eps = tau, eps

    def admit(self, vectors: np.ndarray, pool: np.ndarray, floor: np.ndarray | None = None) -> Admission:
        mu, sigma = robust.median_and_mad(pool)
        if floor is not None:
            sigma = np.maximum(sigma, floor)
        scores = robust.mad_scores(vectors, mu, sigma, self.eps)
        return Admission(scores <= self.tau, scores, mu)


class CenterRule:
    """Any center function plus the distance-to-center MAD filter above."""

    def __init__(self, name: str, center: Callable[[np.ndarray], np.ndarray], z_max: float = 3.0):
        self.name, self._center, self.z_max = name, center, z_max

    def admit(self, vectors: np.ndarray, pool: np.ndarray, floor: np.ndarray | None = None) -> Admission:
        c = self._center(pool)
        dist = robust.cosine_distance(vectors, c)
        # the crowd's spread is the pool's (a sample of the round plus any trusted reference rows), so a
        # batch alone in its round is measured against the reference, not against itself
        crowd = robust.cosine_distance(pool, c)
        med = float(np.median(crowd))
        sigma = 1.4826 * float(np.median(np.abs(crowd - med)))
        return Admission(dist <= med + self.z_max * max(sigma, 1e-12), dist, c)


def median_center(pool: np.ndarray) -> np.ndarray:
    """zip-002's listing: coordinate-wise median, then L2-normalise."""
    mu = robust.coordinate_median(pool)
    return mu / max(float(np.linalg.norm(mu)), 1e-12)


class MultiKrumRule:
    """Keep the n − ⌊f·n⌋ rows whose n_ref − f − 2 nearest pool rows are closest (Multi-Krum)."""

    name = "krum"

    def __init__(self, byzantine_fraction: float = 0.3):
        if not 0.0 <= byzantine_fraction < 0.5:
            raise AggregationError("byzantine_fraction", f"must lie in [0, 0.5), got {byzantine_fraction!r}")
        self.f = byzantine_fraction

    def admit(self, vectors: np.ndarray, pool: np.ndarray, floor: np.ndarray | None = None) -> Admission:
        scores = robust.krum_scores(vectors, pool, int(self.f * len(pool)))
        keep = robust.multi_krum_select(scores, len(vectors) - int(self.f * len(vectors)))
        return Admission(keep, scores, None)


class MeanRule:
    """No defence: every row is kept; the center is the plain mean."""

    name = "mean"

    def admit(self, vectors: np.ndarray, pool: np.ndarray, floor: np.ndarray | None = None) -> Admission:
        return Admission(np.ones(len(vectors), dtype=bool), np.zeros(len(vectors), np.float32), pool.mean(axis=0))


_MAKERS: dict[str, Callable[[float, float], Rule]] = {
    "deltasoup": lambda tau, eps: DeltaSoupRule(tau, eps),
    "median": lambda tau, eps: CenterRule("median", median_center),
    "trimmed_mean": lambda tau, eps: CenterRule("trimmed_mean", lambda p: robust.trimmed_mean(p, 0.3)),
    "geomedian": lambda tau, eps: CenterRule("geomedian", robust.geometric_median),
    "krum": lambda tau, eps: MultiKrumRule(0.3),
    "mean": lambda tau, eps: MeanRule(),
}
RULE_NAMES = tuple(_MAKERS)


def make_rule(name: str, tau: float = 2.0, eps: float = 1e-8) -> Rule:
    """A rule by name: one of `RULE_NAMES`."""
    if name not in _MAKERS:
        raise AggregationError("rule", f"unknown rule {name!r}; choose one of {sorted(_MAKERS)}")
    return _MAKERS[name](tau, eps)
