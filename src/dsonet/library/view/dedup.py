"""Near-duplicate clusters: single-linkage components of cosine > θ within a domain.

DeltaSoup's merge step (θ_dup = 0.95) and the library's merged view both need, for every
vector, the representative of its duplicate cluster. The paper merges greedily, which
depends on arrival order; we instead take connected components of the graph
"same domain and cosine > θ", with the smallest row index as representative, so the answer
is a function of the set of rows alone (what a CRDT needs).

No full Gram matrix: 10,000 × 7680 would be 770 GFLOP. Candidates come from banded LSH over
sign bits of (v − coordinate median) at seeded coordinates (median-centred, so every bit
splits the set in half); only candidate pairs get an exact cosine. A pair at cosine 0.95
lands in a shared bucket with probability ≈ 1 − (1 − p^R)^B, p ≈ 1 − θ/π per bit,
≈ 0.999 for the defaults, and single linkage makes missing one edge of a cluster harmless
when the cluster has others. Small inputs are done exactly.
"""

from __future__ import annotations

from typing import Callable, Literal, Sequence

import numpy as np

from dsonet.codec.medians import row_medians
from dsonet.errors import DsoError

_BANDS = 48  # hash tables
_ROWS = 16  # bits per table key (two bytes): bucket size ≈ n / 65536 for unrelated vectors
_SEED = 0x5EED_DED0  # which sampled coordinates feed which hash table
_EXACT_FLOPS = 3e8  # below n²·d of this, a blocked exact Gram is cheaper than hashing
_PAIR_CHUNK = 16384  # candidate pairs per screening block
_SCREEN_SLACK = 3.0  # see _lsh_edges
_SCREEN_DIMS = 192
_COS_BYTES = 4 << 20  # rows gathered per exact-cosine block: stays in cache (measured 2x faster than one gather)

THETA_DUP = 0.95  # federated-agents paper §5: two experiences of a domain above this cosine are one
Method = Literal["auto", "exact", "lsh"]


class DedupError(DsoError, ValueError):
    """Bad input to duplicate_clusters."""


def duplicate_clusters(
    vectors: np.ndarray, domains: Sequence[str], threshold: float = THETA_DUP, method: Method = "auto"
) -> np.ndarray:
    """For each row, the index of its cluster's representative (the smallest row index in it).

    Clusters are connected components of "same domain and cosine(v_i, v_j) > threshold".
    ``method``: "exact" compares all pairs (small inputs), "lsh" hashes first, "auto" picks.
    Deterministic: the same rows in the same order always give the same answer.
    """
    x, norms = _checked(vectors)
    n, d = x.shape
    dom = _domain_codes(domains, n)
    if method not in ("auto", "exact", "lsh"):
        raise DedupError(f"method: {method!r} is not one of 'auto', 'exact', 'lsh'")
    if not -1.0 <= threshold <= 1.0:
        raise DedupError(f"threshold: {threshold!r} is a cosine, so it must lie in [-1, 1]")
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if method == "exact" or (method == "auto" and float(n) * n * d <= _EXACT_FLOPS):
        i, j = _exact_edges(x / norms[:, None], dom, threshold)
    else:
        def pair_cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            dots = np.empty(len(a), np.float32)
            step = max(16, _COS_BYTES // (8 * d))
            for start in range(0, len(a), step):  # a loop over blocks of pairs, each one einsum
                dots[start : start + step] = np.einsum("ij,ij->i", x[a[start : start + step]], x[b[start : start + step]])
            return dots / (norms[a] * norms[b])

        i, j = _lsh_edges(_sample(x, norms), d, dom, threshold, pair_cos)
    return _representatives(n, i, j)


def duplicate_clusters_by_rows(
    rows: Callable[[np.ndarray], np.ndarray], n: int, dim: int, domains: Sequence[str], threshold: float = THETA_DUP,
    chunk: int = 4096,
) -> np.ndarray:
    """`duplicate_clusters` for vectors fetched on demand: ``rows(idx)`` returns vectors[idx].

    The same answer as duplicate_clusters(rows(arange(n)), ...), holding at most ``chunk``
    full rows at a time (plus the coordinate sample), so a library can cluster a large domain
    straight from its compressed codes.
    """
    if float(n) * n * dim <= _EXACT_FLOPS:
        return duplicate_clusters(rows(np.arange(n)), domains, threshold)
    dom = _domain_codes(domains, n)
    sub = np.empty((n, min(dim, _BANDS * _ROWS)), np.float32)
    for start in range(0, n, chunk):  # a loop over bounded blocks of rows
        x, norms = _checked(rows(np.arange(start, min(n, start + chunk))))
        sub[start : start + len(x)] = _sample(x, norms)

    def pair_cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty(len(a), np.float32)
        for start in range(0, len(a), chunk // 2):
            xa, na = _checked(rows(a[start : start + chunk // 2]))
            xb, nb = _checked(rows(b[start : start + chunk // 2]))
            out[start : start + len(xa)] = np.einsum("ij,ij->i", xa, xb) / (na * nb)
        return out

    i, j = _lsh_edges(sub, dim, dom, threshold, pair_cos)
    return _representatives(n, i, j)


def _checked(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows as float32 (no copy when already float32) and their L2 norms."""
    x = np.asarray(vectors)
    if x.ndim != 2:
        raise DedupError(f"vectors: expected a 2-D array (n, d), got shape {x.shape}")
    if x.size and not np.issubdtype(x.dtype, np.floating):
        raise DedupError(f"vectors: expected floating point, got dtype {x.dtype}")
    x = x.astype(np.float32, copy=False)
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    if not np.isfinite(norms).all():
        raise DedupError("vectors: contain NaN or Inf; drop or repair those rows first")
    return x, np.maximum(norms, 1e-12)


def _domain_codes(domains: Sequence[str], n: int) -> np.ndarray:
    if isinstance(domains, str):
        raise DedupError("domains: expected one domain per row, got a single string; pass [domain] * n")
    if len(domains) != n:
        raise DedupError(f"domains: {len(domains)} entries for {n} vectors; give one domain per row")
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    _, codes = np.unique(np.asarray(domains, dtype=object).astype(str), return_inverse=True)
    return codes.astype(np.int64)


def _representatives(n: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    # scipy is a core dependency, but scipy.sparse takes 0.1-0.4 s to import and `dso node --help`,
    # `dso search --help`... load this module (their option defaults live in the library)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(i), dtype=np.int8), (i, j)), shape=(n, n))
    n_comp, labels = connected_components(graph, directed=False)
    rep = np.full(n_comp, n, dtype=np.int64)
    np.minimum.at(rep, labels, np.arange(n, dtype=np.int64))
    return rep[labels]


def _exact_edges(x: np.ndarray, dom: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    n = len(x)
    block = max(1, int(4_000_000 // max(n, 1)))  # rows per block: a (block, n) float32 Gram ≤ 16 MB
    out_i, out_j = [], []
    for start in range(0, n, block):  # a loop over blocks of rows, each one matmul
        g = x[start : start + block] @ x.T  # (b, n)
        rows = np.arange(start, start + len(g))[:, None]
        hit = (g > threshold) & (dom[start : start + len(g), None] == dom[None, :]) & (np.arange(n)[None, :] > rows)
        bi, bj = np.nonzero(hit)
        out_i.append(bi + start)
        out_j.append(bj)
    return np.concatenate(out_i), np.concatenate(out_j)


def _sample(x: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """(n, m) the first m coordinates of the unit-normalised rows (every coordinate when d ≤ m).

    A contiguous slice reads 1/10 of each row's cache lines at d = 7680, where a scattered
    sample reads them all; canonical spaces are rotated or mixed, so any m coordinates do.
    """
    return x[:, : _BANDS * _ROWS] / norms[:, None]


def _band_keys(sub: np.ndarray, dom: np.ndarray) -> np.ndarray:
    """(bands, n) int64 keys: domain code in the high bits, R median-split sign bits below."""
    n, m = sub.shape
    cols = np.random.default_rng(_SEED).choice(m, size=_BANDS * _ROWS, replace=_BANDS * _ROWS > m)
    median = row_medians(_transposed(sub))  # (m,): the median runs along contiguous rows
    bits = np.take(sub > median, cols, axis=1)  # (n, B·R): band b's bits are columns b·R to (b + 1)·R
    keys = np.packbits(bits, axis=1, bitorder="little").view("<u2")  # (n, B): R = 16 bits, two bytes
    return keys.T.astype(np.int64) + (dom[None, :] << _ROWS)


def _transposed(a: np.ndarray, rows: int = 256) -> np.ndarray:
    """a.T as a new C-contiguous array, copied by blocks of rows that stay in cache (4x faster
    than one strided copy at 10,000 x 768)."""
    out = np.empty(a.shape[::-1], a.dtype)
    for start in range(0, len(a), rows):  # a loop over blocks of rows, each one copy
        out[:, start : start + rows] = a[start : start + rows].T
    return out


def _lsh_edges(
    sub: np.ndarray, d: int, dom: np.ndarray, threshold: float, pair_cos: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Edges (i, j) with cosine > threshold among rows whose unit-normalised sample is ``sub``."""
    n = len(sub)
    pair_codes = []
    for keys in _band_keys(sub, dom):  # one iteration per hash table (48), vectorised inside
        order = np.argsort(keys)  # not stable: every pair within a bucket is taken, in any order
        sk = keys[order]
        starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
        sizes = np.diff(np.r_[starts, n])
        shared = sizes >= 2
        pair_codes.append(_bucket_pairs(order, starts[shared], sizes[shared], n))
    codes = np.unique(np.concatenate(pair_codes))
    ci, cj = codes // n, codes % n
    # Cheap screen on k sampled coordinates: ‖a − b‖² estimated as (d/k)·Σ over them (exact
    # when d ≤ k). A duplicate has ‖a − b‖² < 2(1 − θ); the screen keeps pairs under
    # _SCREEN_SLACK times that, far outside the estimate's spread (relative sd ≈ √(2/k) ≈ 10%).
    screen = sub[:, :_SCREEN_DIMS]
    scale = d / screen.shape[1]
    limit = 2.0 * (1.0 - threshold) * (_SCREEN_SLACK if screen.shape[1] < d else 1.0) + 1e-6
    est = np.empty(len(codes), dtype=np.float32)
    for start in range(0, len(codes), _PAIR_CHUNK):
        diff = screen[ci[start : start + _PAIR_CHUNK]] - screen[cj[start : start + _PAIR_CHUNK]]
        est[start : start + len(diff)] = scale * np.einsum("ij,ij->i", diff, diff)
    ci, cj = ci[est < limit], cj[est < limit]
    keep = pair_cos(ci, cj) > threshold if len(ci) else np.zeros(0, bool)
    return ci[keep], cj[keep]


def _bucket_pairs(order: np.ndarray, starts: np.ndarray, sizes: np.ndarray, n: int) -> np.ndarray:
    """All within-bucket pairs as codes i·n + j (i < j), for buckets given by (start, size) in `order`."""
    if len(starts) == 0:
        return np.zeros(0, dtype=np.int64)
    # every position p of a bucket pairs with the positions after it in the same bucket
    pos = _ranges(starts, sizes)
    ends = np.repeat(starts + sizes, sizes)
    after = ends - pos - 1
    left = np.repeat(pos, after)
    first = np.repeat(np.cumsum(after) - after, after)
    right = left + 1 + (np.arange(len(left)) - first)
    a, b = order[left].astype(np.int64), order[right].astype(np.int64)
    return np.minimum(a, b) * n + np.maximum(a, b)


def _ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + m) for every (s, m), without a Python loop."""
    total = int(sizes.sum())
    offsets = np.arange(total) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return np.repeat(starts, sizes) + offsets
