"""Phases 2 and 4 of DeltaSoup as pure functions (phase 1 is `verify`, phase 3 is `rules`).

    decompress_batches  every batch's codes -> one (n, d) matrix with each row's origin
    dedup_merge         within a domain, clusters at cosine > θ_dup (single linkage, via
                        `dsonet.library.dedup.duplicate_clusters`); cluster vector =
                        confidence-weighted mean, cluster confidence = max
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dsonet.codec.batch import CompressedBatch
from dsonet.codec.bitdelta import decompress
from dsonet.experience import Experience
from dsonet.library.dedup import duplicate_clusters


@dataclass(frozen=True)
class Rows:
    """The round's decompressed experiences and where each row came from."""

    vectors: np.ndarray  # (n, d) float32, ê
    batch: np.ndarray  # (n,) int, index into the round's batches
    row: np.ndarray  # (n,) int, row within that batch


def decompress_batches(batches: Sequence[CompressedBatch]) -> Rows:
    """Phase 2: ê = ē + α s for every experience of every batch (each batch has its own ē)."""
    sizes = np.array([len(b) for b in batches], dtype=np.int64)
    dim = batches[0].profile.dim if batches else 0
    out = np.empty((int(sizes.sum()), dim), dtype=np.float32)
    start = 0
    for b in batches:  # one vectorised decompress per batch: the baseline differs between batches
        decompress(b.codes, out=out[start : start + len(b)])
        start += len(b)
    batch_of_row = np.repeat(np.arange(len(batches)), sizes)
    return Rows(out, batch_of_row, np.arange(len(out)) - np.repeat(np.cumsum(sizes) - sizes, sizes))


@dataclass(frozen=True)
class MergedCluster:
    """One merged experience: what the library stores for a cluster of near-duplicates."""

    experience: Experience  # the representative's record; its confidence is the cluster's
    vector: np.ndarray  # (d,) float32, L2-normalised confidence-weighted mean of the members' ê
    confidence: float  # max over members
    members: tuple[tuple[int, int], ...]  # (batch index, row) of every member
    sources: tuple[str, ...]  # distinct node ids of the members


def dedup_merge(vectors: np.ndarray, confidences: np.ndarray, domains: Sequence[str],
                trust: np.ndarray, threshold: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Phase 4 over the admitted rows.

    Returns (label per row, cluster vectors (k, d) L2-normalised, cluster confidence (k,),
    representative row per cluster). The representative, whose text the cluster shows, is the
    member with the largest confidence × source trust (ties: lowest row), so a self-reported 0.99
    from a distrusted source does not replace an honest text in a merged cluster.
    """
    n = len(vectors)
    reps = duplicate_clusters(vectors, list(domains), threshold=threshold)
    firsts, labels = np.unique(reps, return_inverse=True)  # reps are each cluster's smallest row
    k = len(firsts)
    conf = np.asarray(confidences, dtype=np.float64)
    weights = np.maximum(conf, 1e-6).astype(np.float32)  # a cluster of confidence-0 members still has a mean
    merged = np.asarray(vectors[firsts], dtype=np.float32)  # (k, d) a fresh copy; most clusters are one row
    shared = np.flatnonzero(np.bincount(labels, minlength=k)[labels] > 1)  # rows of clusters with company
    if len(shared):
        shared = shared[np.argsort(labels[shared], kind="stable")]  # each cluster's rows contiguous
        starts = np.flatnonzero(np.r_[True, labels[shared][1:] != labels[shared][:-1]])
        rank = np.arange(len(shared)) - np.repeat(starts, np.diff(np.r_[starts, len(shared)]))
        merged[labels[shared[starts]]] = 0.0
        for r in range(int(rank.max()) + 1):  # over member ranks (the largest cluster's size), not vectors:
            sel = shared[rank == r]  # each cluster at most once, so a plain fancy-index add is exact
            contribution = vectors[sel]  # a fresh copy, scaled in place
            contribution *= weights[sel, None]
            merged[labels[sel]] += contribution
    norms = np.sqrt(np.einsum("ij,ij->i", merged, merged))  # no (k, d) temporary
    merged /= np.maximum(norms, 1e-12)[:, None]  # the weights cancel in the direction
    cluster_conf = np.zeros(k)
    np.maximum.at(cluster_conf, labels, conf)
    order = np.lexsort((np.arange(n), -(conf * trust), labels))  # by cluster, then best member first
    first = np.r_[True, labels[order][1:] != labels[order][:-1]]
    return labels, merged, cluster_conf, order[first]
