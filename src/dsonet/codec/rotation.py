"""A seeded, fast, exactly invertible random rotation of R^d (for rotated BitDelta).

Sign quantisation loses least when every coordinate of a delta carries a similar share
of its energy; real embeddings have a few loud coordinates. A random orthogonal rotation
spreads that energy evenly (the trick RaBitQ and QuIP# use), and is undone exactly on
decompression because R^-1 = R^T.

We never pad: padding d = 7680 to 8192 would make a rotated code larger than a plain one.
Instead we write d = m * a * c, with a * c the largest power of two dividing d, and use

    R = (Q_m ⊗ H_a ⊗ H_c) · D

where D is a diagonal of random signs, H_a and H_c are normalised Walsh–Hadamard
matrices and Q_m is a seeded dense random orthogonal matrix of the odd part m
(15 for d = 7680, 3 for d = 384). A Kronecker product of orthogonal matrices is
orthogonal, and every output coordinate depends on every input coordinate, so one round
mixes globally. Applying it is three small matrix products over reshaped views, about
2(m + a + c) flops per coordinate, instead of 2d for a dense rotation.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from dsonet.errors import CodecError


def _hadamard(n: int) -> np.ndarray:
    """Normalised Sylvester–Hadamard matrix of size n (a power of two)."""
    h = np.ones((1, 1), dtype=np.float32)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return (h / np.sqrt(n)).astype(np.float32)


def _factor(dim: int) -> tuple[int, int, int]:
    """Split dim into (m, a, c): m odd, a and c powers of two with a <= c."""
    power = dim & -dim  # largest power of two dividing dim
    m = dim // power
    k = power.bit_length() - 1
    a = 1 << (k // 2)
    c = power // a
    return m, a, c


class Rotation:
    """The rotation R = (Q_m ⊗ H_a ⊗ H_c)·D for one (dim, seed); cheap to rebuild."""

    def __init__(self, dim: int, seed: int):
        if dim < 1:
            raise CodecError(f"rotation dim must be positive, got {dim}")
        self.dim = dim
        self.seed = int(seed)
        rng = np.random.default_rng(self.seed)
        self.signs = np.where(rng.random(dim) < 0.5, -1.0, 1.0).astype(np.float32)
        m, a, c = _factor(dim)
        q, r = np.linalg.qr(rng.standard_normal((m, m)))
        q = (q * np.sign(np.diag(r))).astype(np.float32)  # Haar-distributed, deterministic
        self.shape = (m, a, c)
        # Factors along axes 0, 1, 2 of the (m, a, c) view; identity factors are skipped.
        self.factors = [(axis, f) for axis, f in enumerate((q, _hadamard(a), _hadamard(c))) if f.shape[0] > 1]

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Rotate rows: (n, dim) -> (n, dim). The output order of coordinates is fixed but arbitrary."""
        x = np.asarray(x, dtype=np.float32)
        n = x.shape[0]
        y = (x * self.signs).reshape(n, *self.shape)  # (n, m, a, c)
        # tensordot contracts one axis and appends the result axis last; after all factors the
        # axes have been cycled into a fixed order that `invert` undoes.
        for axis, f in self.factors:
            y = np.tensordot(y, f, axes=([1 + axis - self._moved(axis)], [0]))
        return np.ascontiguousarray(y).reshape(n, self.dim)

    def invert(self, y: np.ndarray) -> np.ndarray:
        """Undo `apply`: (n, dim) -> (n, dim)."""
        y = np.asarray(y, dtype=np.float32)
        n = y.shape[0]
        x = y.reshape(n, *self._rotated_shape())
        for axis, f in reversed(self.factors):
            # the factor's output axis is last; contract it with f^T and move it back
            x = np.tensordot(x, f.T, axes=([-1], [0]))
            x = np.moveaxis(x, -1, 1 + axis - self._moved(axis))
        return (np.ascontiguousarray(x).reshape(n, self.dim)) * self.signs

    def _moved(self, axis: int) -> int:
        """How many earlier factors have already been moved to the end when `axis` is applied."""
        return sum(1 for a, _ in self.factors if a < axis)

    def _rotated_shape(self) -> tuple[int, ...]:
        kept = [s for i, s in enumerate(self.shape) if i not in {a for a, _ in self.factors}]
        return (*kept, *(self.shape[a] for a, _ in self.factors))


@lru_cache(maxsize=16)
def get_rotation(dim: int, seed: int) -> Rotation:
    """Cached constructor: a node decodes many batches with the same (dim, seed)."""
    return Rotation(dim, seed)
