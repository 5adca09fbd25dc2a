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
2(m + a + c) flops per coordinate (126 for d = 7680), instead of 2d for a dense rotation.
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
    """The rotation R = (Q_m ⊗ H_a ⊗ H_c)·D for one (dim, seed); cheap to rebuild.

    numpy in, numpy out; the three small matrix products run in torch, whose CPU GEMM is
    several times faster than numpy's for these skinny shapes.
    """

    def __init__(self, dim: int, seed: int):
        if dim < 1:
            raise CodecError(f"rotation dim must be positive, got {dim}")
        import torch

        self.dim = dim
        self.seed = int(seed)
        rng = np.random.default_rng(self.seed)
        self.signs = np.where(rng.random(dim) < 0.5, -1.0, 1.0).astype(np.float32)
        m, a, c = _factor(dim)
        q, r = np.linalg.qr(rng.standard_normal((m, m)))
        q = (q * np.sign(np.diag(r))).astype(np.float32)  # Haar-distributed, deterministic
        self.shape = (m, a, c)
        self._q, self._ha, self._hc = (torch.from_numpy(f) for f in (q, _hadamard(a), _hadamard(c)))
        self._signs = torch.from_numpy(self.signs)

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Rotate rows: (n, dim) -> (n, dim). The rotated coordinates come out in a fixed, arbitrary order."""
        import torch

        m, a, c = self.shape
        y = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)) * self._signs  # (n, m·a·c)
        n = y.shape[0]
        if c > 1:
            y = y.view(-1, c) @ self._hc  # (n·m·a, c)
        if a > 1:
            y = y.view(n * m, a, c).transpose(1, 2).reshape(-1, a) @ self._ha  # layout (n, m, c, a)
        if m > 1:
            y = y.reshape(n, m, a * c).transpose(1, 2).reshape(-1, m) @ self._q  # layout (n, c·a, m)
        return y.reshape(n, self.dim).numpy()

    def invert(self, y: np.ndarray) -> np.ndarray:
        """Undo `apply`: (n, dim) -> (n, dim)."""
        import torch

        m, a, c = self.shape
        x = torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32))
        n = x.shape[0]
        if m > 1:
            x = (x.reshape(-1, m) @ self._q.T).view(n, a * c, m).transpose(1, 2)  # (n, m, c·a)
        if a > 1:
            x = (x.reshape(-1, a) @ self._ha.T).view(n * m, c, a).transpose(1, 2)  # (n·m, a, c)
        if c > 1:
            x = x.reshape(-1, c) @ self._hc.T
        return (x.reshape(n, self.dim) * self._signs).numpy()


@lru_cache(maxsize=16)
def get_rotation(dim: int, seed: int) -> Rotation:
    """Cached constructor: a node decodes many batches with the same (dim, seed)."""
    return Rotation(dim, seed)
