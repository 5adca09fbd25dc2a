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
from dsonet.codec.threads import run_chunks
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
    starts = np.cumsum(sizes) - sizes

    def decode(first: int, stop: int) -> None:  # one decompress per batch: each has its own baseline
        for i in range(first, stop):
            decompress(batches[i].codes, out=out[starts[i] : starts[i] + sizes[i]])

    # batches, not rows, go to the cores: a round is many small batches
    run_chunks(decode, len(batches), 1)
    batch_of_row = np.repeat(np.arange(len(batches)), sizes)
    return Rows(out, batch_of_row, np.arange(len(out)) - np.repeat(np.cumsum(sizes) - sizes, sizes))


_MERGE_BLOCK_BYTES = 4 << 20  # member rows gathered per merge block: a few MB, so they stay in cache


@dataclass(frozen=True)
class MergedCluster:
    """One merged experience: what the library stores for a cluster of near-duplicates."""

    experience: Experience  # the representative's record; its confidence is the cluster's
    vector: np.ndarray  # (d,) float32, L2-normalised confidence-weighted mean of the members' ê
    confidence: float  # max over members
    members: tuple[tuple[int, int], ...]  # (batch index, row) of every member
    sources: tuple[str, ...]  # distinct node ids of the members


def dedup_merge(vectors: np.ndarray, confidences: np.ndarray, domains: Sequence[str], trust: np.ndarray,
                threshold: float = 0.95, overwrite: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Phase 4 over the admitted rows.

    Returns (label per row, cluster vectors (k, d) L2-normalised, cluster confidence (k,),
    representative row per cluster). The representative, whose text the cluster shows, is the
    member with the largest confidence × source trust (ties: lowest row), so a self-reported 0.99
    from a distrusted source does not replace an honest text in a merged cluster.

    ``overwrite``: write the cluster vectors over the first k rows of ``vectors`` and return that
    view, for a caller done with its rows; at 10,000 × 7680 this spares the first touch of a new
    200 MB array, a quarter of the merge.
    """
    reps = duplicate_clusters(vectors, list(domains), threshold=threshold)  # also checks the input
    n, d = np.shape(vectors)
    firsts, labels = np.unique(reps, return_inverse=True)  # reps are each cluster's smallest row
    k = len(firsts)
    conf = np.asarray(confidences, dtype=np.float64)
    size = np.bincount(labels, minlength=k)
    weights = np.maximum(conf, 1e-6).astype(np.float32)  # a cluster of confidence-0 members still has a mean
    step = max(1, _MERGE_BLOCK_BYTES // (8 * d))  # clusters per block
    # Within a block, clusters go largest first and rows go by member rank: every cluster's first
    # member, then the second members of those with two or more, and so on, so that adding the
    # members up is adding contiguous slices (ranks in row order: the same sums as a plain loop).
    by_cluster = np.argsort(labels, kind="stable")
    rank = np.empty(n, np.int64)
    rank[by_cluster] = np.arange(n) - np.repeat(np.cumsum(size) - size, size)
    cluster_order = np.lexsort((-size, np.arange(k) // step))  # (k,) blocks in order, larger clusters first
    slot = np.empty(k, np.int64)
    slot[cluster_order] = np.arange(k)
    row_order = np.lexsort((slot[labels], rank, labels // step))  # (n,)
    # Row c belongs to a cluster numbered ≤ c (clusters are numbered by their smallest row), so
    # by the time cluster c is written over row c, every member of that row's cluster has been read.
    merged = vectors if overwrite else np.empty((k, d), dtype=np.float32)
    end = 0
    for c0 in range(0, k, step):  # a loop over blocks of clusters, in order; each block's rows stay in cache
        clusters = cluster_order[c0 : c0 + step]
        sizes, c = size[clusters], len(clusters)  # sizes descending
        rows = row_order[end : end + int(sizes.sum())]
        end += len(rows)
        block = np.asarray(vectors[rows], dtype=np.float32)  # (rows, d) a fresh copy, summed in place
        shared = int(np.count_nonzero(sizes > 1))  # a lone row is its own direction: it is not weighted
        block[:shared] *= weights[rows[:shared], None]
        block[c:] *= weights[rows[c:], None]
        start = c
        for r in range(1, int(sizes[0])):  # over member ranks (the block's largest cluster), not vectors
            m = int(np.count_nonzero(sizes > r))
            block[:m] += block[start : start + m]
            start += m
        sums = block[:c]
        sums /= np.maximum(np.sqrt(np.einsum("ij,ij->i", sums, sums)), 1e-12)[:, None]  # the weights cancel
        merged[clusters] = sums
    cluster_conf = np.zeros(k)
    np.maximum.at(cluster_conf, labels, conf)
    order = np.lexsort((np.arange(n), -(conf * trust), labels))  # by cluster, then best member first
    first = np.r_[True, labels[order][1:] != labels[order][:-1]]
    return labels, merged[:k], cluster_conf, order[first]
