"""The top eigenpairs of a fit's Gram matrix, and a small matrix-vector product that skips BLAS.

The index's fitted stages (`dsonet.library.index.stages`: the coarse sketch, the subspace stage) need the
top 64 or 128 principal directions of a 2,048-row sample at d = 7680: from its (s × s) Gram, whose
full `np.linalg.eigh` was most of a fit. `top_eigh` finds only those, by seeded subspace iteration.
"""

from __future__ import annotations

import numpy as np

from dsonet.codec.threads import one_blas_thread

_SEED = 0x5EED_E16  # the start of `top_eigh`'s iteration


def top_eigh(gram: np.ndarray, k: int, oversample: int = 64, steps: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenvalues of a symmetric (s × s) matrix, descending, and their eigenvectors
    (s, k), by subspace iteration from a seeded start (the same input gives the same answer). A full
    `np.linalg.eigh` of the 2,048-row Gram a fit reads took 3.4 s on one busy core, this 0.6 s; on
    lifted MiniLM (a flat spectrum, the slow case) the top 128 directions' span agrees with it to
    cosine 0.9994 or more and their eigenvalues' sum to 1e-5. Small matrices are solved in full."""
    s = len(gram)
    if s <= 2 * (k + oversample):
        vals, vecs = _small_eigh(gram)
        top = np.argsort(vals)[::-1][:k]
        return vals[top], vecs[:, top]
    q = gram @ np.random.default_rng(_SEED).standard_normal((s, k + oversample)).astype(gram.dtype)
    for _ in range(steps):  # each step sharpens the span towards the top eigenvectors
        q = gram @ _orthonormal(q).astype(gram.dtype)
    q = _orthonormal(q)
    vals, vecs = _small_eigh(q.T @ (gram @ q))  # (k + p)², the small projected problem
    top = np.argsort(vals)[::-1][:k]
    return vals[top].astype(gram.dtype), (q @ vecs[:, top]).astype(gram.dtype)


def _orthonormal(q: np.ndarray) -> np.ndarray:
    """An orthonormal basis (float64) of q's columns (s × m, m small) through its (m × m) Gram, twice
    (once is accurate only to that Gram's condition). LAPACK's Householder QR, many small threaded
    calls, crawled on a busy 2-core machine: 8 of them at 2048 × 192 took 11.6 s, these 1.0 s."""
    q = q.astype(np.float64)
    for _ in range(2):
        vals, vecs = _small_eigh(q.T @ q)
        q = q @ (vecs / np.sqrt(np.maximum(vals, vals[-1] * 1e-15)))
    return q


def _small_eigh(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.linalg.eigh` of a small matrix on one BLAS thread (a window of milliseconds): LAPACK's
    threads on a 192 × 192 problem waited 0.65 s a call for each other on a busy 2-core machine."""
    with one_blas_thread():
        return np.linalg.eigh(m)


def matvec(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """m @ v without BLAS: a threaded GEMV this small waits on thread wake-ups (measured 0.2 ms
    here against 4–6 ms through OpenBLAS on a busy 2-core machine)."""
    return np.einsum("ij,j->i", m, v).astype(np.float32, copy=False)
