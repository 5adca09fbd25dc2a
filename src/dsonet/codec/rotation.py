"""A seeded, fast, exactly invertible random rotation of each BitDelta group (rotated BitDelta).

Sign quantisation loses least when every coordinate of a group carries a similar share of
its energy; real embeddings have a few loud coordinates. A random orthogonal rotation
spreads that energy evenly (the trick RaBitQ and QuIP# use), and is undone exactly on
decompression because R^-1 = R^T.

The rotation acts on each group of g coordinates separately (block-diagonal, the same block
for every group). Rotating across groups would also even out the energy *between* groups and
so waste the per-group scales, which are what g < d pays for (measured: in the Zen space at
g = 128 a whole-vector rotation lowered mean cosine from 0.80 to 0.72). Within a group the
squared error is ‖Δ_j‖² − ‖Δ_j‖₁²/g (seeds/004); a rotation keeps ‖Δ_j‖² and, unless |Δ_j|
is already flatter than a Gaussian's, raises ‖Δ_j‖₁. At g = d it is one rotation of the
whole vector.

We never pad: padding 7680 to 8192 would make a rotated code larger than a plain one.
Instead we write g = m · 2^k and use

    R = (Q_m ⊗ H_{2^k}) · D

where D is a diagonal of random signs, H is the normalised Walsh–Hadamard matrix (applied as
a fast transform) and Q_m is a seeded dense random orthogonal matrix of the odd part m (15
for g = 7680, 3 for 384, 1 for powers of two). Every output coordinate of a block depends on
every input coordinate of it, so one round mixes the whole group: about 2(m + k) flops per
coordinate (38 for g = 7680). The transform runs in `dsonet.codec.kernels` (C, AVX2).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from dsonet.codec import kernels
from dsonet.errors import CodecError


def _factor(dim: int) -> tuple[int, int, int]:
    """Split dim into (m, a, c): m odd, a and c powers of two with a <= c (H_{ac} = H_a ⊗ H_c)."""
    power = dim & -dim  # largest power of two dividing dim
    m = dim // power
    k = power.bit_length() - 1
    a = 1 << (k // 2)
    c = power // a
    return m, a, c


class Rotation:
    """R = (Q_m ⊗ H)·D on every block of ``block`` coordinates of a ``dim``-vector, for one seed.

    ``block`` defaults to ``dim`` (one rotation of the whole vector); rotated BitDelta uses the
    group size. numpy float32 in and out, row by row.
    """

    def __init__(self, dim: int, seed: int, block: int | None = None):
        block = dim if block is None else block
        if dim < 1 or block < 1 or dim % block:
            raise CodecError(f"rotation needs a block size dividing the dimension, got dim={dim}, block={block}")
        self.dim, self.block, self.seed = dim, block, int(seed)
        rng = np.random.default_rng(self.seed)
        self.signs = np.where(rng.random(block) < 0.5, -1.0, 1.0).astype(np.float32)
        self.shape = _factor(block)
        m = self.shape[0]
        q, r = np.linalg.qr(rng.standard_normal((m, m)))
        q = q * np.sign(np.diag(r))  # Haar-distributed, deterministic
        # Q_1 would be a sign D already draws: the kernel skips the mix, so it must be +1
        self.q = np.ones((1, 1), np.float32) if m == 1 else np.ascontiguousarray(q, dtype=np.float32)

    def apply(self, x: np.ndarray, base: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """R (x − base) for rows of x: (n, dim) -> (n, dim)."""
        return self._run(kernels.rotate, x, base, out)

    def invert(self, y: np.ndarray, base: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Rᵀ y + base for rows of y: undoes `apply`."""
        return self._run(kernels.unrotate, y, base, out)

    def _run(self, kernel, x: np.ndarray, base: np.ndarray | None, out: np.ndarray | None) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise CodecError(f"rotation of dim {self.dim} needs rows of {self.dim} floats, got shape {x.shape}")
        out = np.empty_like(x) if out is None else out
        m, a, c = self.shape
        kernel(x, base, len(x), self.dim, m, a, c, self.signs, self.q, out)
        return out


@lru_cache(maxsize=16)
def get_rotation(dim: int, seed: int, block: int | None = None) -> Rotation:
    """Cached constructor: a node decodes many batches with the same (dim, seed, block)."""
    return Rotation(dim, seed, block)
