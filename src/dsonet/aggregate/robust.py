"""Robust statistics over rows of a matrix (n, d): pure numpy, no message handling.

Each center function takes the rows it should use; callers that want speed pass a seeded
row sample (`sample_rows`). Preconditions fail with "required vs received" messages.
"""

from __future__ import annotations

import numpy as np

from dsonet.aggregate.errors import AggregationError
from dsonet.codec import kernels
from dsonet.codec.medians import row_medians
from dsonet.codec.threads import run_chunks

_CHUNK = 512  # rows per task when scoring every row


def sample_rows(x: np.ndarray, size: int | None, rng: np.random.Generator) -> np.ndarray:
    """A uniform sample of ``size`` rows without replacement (all rows when size is None or ≥ n)."""
    if size is None or size >= len(x):
        return x
    return x[np.sort(rng.choice(len(x), size=size, replace=False))]


def coordinate_median(x: np.ndarray) -> np.ndarray:
    """μ_j = median_i x_ij, (d,) float32."""
    _need_rows(x, 1, "coordinate median")
    return row_medians(_scratch_transpose(x))


def median_and_mad(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """μ_j = median_i x_ij and σ_j = median_i |x_ij − μ_j| (unscaled, as in the paper), (d,) float32 each,
    with one transpose: a partition only reorders values within a coordinate, and the MAD does not
    depend on their order."""
    _need_rows(x, 1, "coordinate median")
    xt = _scratch_transpose(x)  # (d, n)
    mu = row_medians(xt)
    xt -= mu[:, None]
    return mu, row_medians(np.abs(xt, out=xt))


def _scratch_transpose(x: np.ndarray) -> np.ndarray:
    """x.T as a float32 C-contiguous copy, worked on in place. Always a copy: for one row, x.T is already
    contiguous and np.ascontiguousarray would hand back a view, so the MAD's subtraction zeroed the caller's row."""
    return np.array(x.T, dtype=np.float32, order="C")


def mad_scores(x: np.ndarray, center: np.ndarray, mad: np.ndarray, eps: float) -> np.ndarray:
    """DeltaSoup's outlier score per row: mean_j |x_ij − μ_j| / (σ_j + ε), (n,) float32.

    One fused pass over the rows in C, on every core (numpy needs three passes and a temporary)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, d = x.shape
    w = ((1.0 / (mad.astype(np.float64) + eps)) / d).astype(np.float32)  # ε = 1e-8 vanishes in float32 sums
    center = np.ascontiguousarray(center, dtype=np.float32)
    out = np.empty(n, dtype=np.float32)

    def rows(start: int, stop: int) -> None:
        kernels.weighted_l1(x[start:stop], center, w, stop - start, d, out[start:stop])

    run_chunks(rows, n, _CHUNK)
    return out


def trimmed_mean(x: np.ndarray, beta: float) -> np.ndarray:
    """Coordinate-wise mean after dropping the ⌊βn⌋ smallest and largest values."""
    if not 0.0 <= beta < 0.5:
        raise AggregationError("beta", f"trim fraction must lie in [0, 0.5), got {beta!r}")
    _need_rows(x, 1, "trimmed mean")
    n = len(x)
    k = int(beta * n)  # β < 1/2 leaves at least one row
    s = np.sort(x, axis=0)
    return s[k : n - k].mean(axis=0).astype(np.float32)


def geometric_median(x: np.ndarray, max_iter: int = 100, tol: float = 1e-6, eps: float = 1e-8) -> np.ndarray:
    """argmin_z Σ_i ‖x_i − z‖ by Weiszfeld's iteration, started at the coordinate median."""
    _need_rows(x, 1, "geometric median")
    x64 = x.astype(np.float64)
    z = np.median(x64, axis=0)
    for _ in range(max_iter):
        w = 1.0 / np.maximum(np.linalg.norm(x64 - z, axis=1), eps)  # (n,)
        z_new = (w @ x64) / w.sum()
        if np.linalg.norm(z_new - z) <= tol * max(np.linalg.norm(z), 1.0):
            return z_new.astype(np.float32)
        z = z_new
    return z.astype(np.float32)


def krum_scores(x: np.ndarray, reference: np.ndarray, f: int) -> np.ndarray:
    """Krum score of every row: the sum of squared distances to its n_ref − f − 2 nearest
    reference rows (Blanchard et al., 2017). Rows of ``reference`` that are also rows of ``x``
    count themselves at distance 0, which shifts every score equally.
    """
    n_ref = len(reference)
    if n_ref < 2 * f + 3:
        raise AggregationError("krum", f"needs at least 2f+3 = {2 * f + 3} reference rows for f={f}, got {n_ref}")
    k = n_ref - f - 2
    ref_sq = np.einsum("ij,ij->i", reference, reference)
    out = np.empty(len(x), dtype=np.float32)
    for start in range(0, len(x), _CHUNK):
        block = x[start : start + _CHUNK]
        d2 = np.einsum("ij,ij->i", block, block)[:, None] + ref_sq[None, :] - 2.0 * (block @ reference.T)
        out[start : start + len(block)] = np.partition(np.maximum(d2, 0.0), k - 1, axis=1)[:, :k].sum(axis=1)
    return out


def multi_krum_select(scores: np.ndarray, keep: int) -> np.ndarray:
    """Multi-Krum: a mask of the ``keep`` rows with the lowest Krum scores."""
    if not 0 < keep <= len(scores):
        raise AggregationError("keep", f"must lie in [1, {len(scores)}], got {keep}")
    mask = np.zeros(len(scores), dtype=bool)
    mask[np.argpartition(scores, keep - 1)[:keep]] = True
    return mask


def cosine_distance(x: np.ndarray, center: np.ndarray) -> np.ndarray:
    """1 − cos(x_i, c) per row, (n,) float32."""
    c = center / max(float(np.linalg.norm(center)), 1e-12)
    # einsum, not linalg.norm(axis=1): no (n, d) temporary of squares (a round's rows are ~100 MB at d = 7680)
    norms = np.maximum(np.sqrt(np.einsum("ij,ij->i", x, x)), 1e-12)
    return (1.0 - (x @ c) / norms).astype(np.float32)


def _need_rows(x: np.ndarray, required: int, what: str) -> None:
    if x.ndim != 2:
        raise AggregationError("vectors", f"{what} needs a 2-D array (n, d), got shape {x.shape}")
    if len(x) < required:
        raise AggregationError("vectors", f"{what} needs at least {required} rows, got {len(x)}")
