"""The kernels of `_kernels.c` in numpy: the same signatures and the same numbers, for machines
where the C extension was not built (see setup.py's build guard). Several times slower."""

from __future__ import annotations

import numpy as np

_ROWS = 4096  # rows per block: bounded temporaries


def _rows(a, n: int, width: int, dtype) -> np.ndarray:
    return np.asarray(a).view(dtype).reshape(n, width)


def quantize(x, base, rows: int, dim: int, group_size: int, signs, scales) -> None:
    """signs, scales <- BitDelta code of x - base (base may be None)."""
    g, groups, words = group_size, dim // group_size, -(-group_size // 32)
    x = _rows(x, rows, dim, np.float32)
    signs_out, scales_out = _rows(signs, rows, groups * words, np.uint32), _rows(scales, rows, groups, np.float32)
    for s in range(0, rows, _ROWS):
        v = x[s : s + _ROWS] - (0 if base is None else np.asarray(base, np.float32))
        v = v.reshape(len(v), groups, g)
        scales_out[s : s + _ROWS] = np.abs(v).sum(axis=2, dtype=np.float32) / np.float32(g)
        bits = np.zeros((len(v), groups, words * 32), np.uint8)
        bits[:, :, :g] = v >= 0
        packed = np.packbits(bits, axis=2, bitorder="little")  # (m, G, 4W)
        signs_out[s : s + _ROWS] = packed.reshape(len(v), -1).view("<u4")


def dequantize(signs, scales, base, rows: int, dim: int, group_size: int, out) -> None:
    """out <- base + scale * sign for every coordinate (base may be None)."""
    g, groups, words = group_size, dim // group_size, -(-group_size // 32)
    signs = _rows(signs, rows, groups * words, np.uint32)
    scales, out = _rows(scales, rows, groups, np.float32), _rows(out, rows, dim, np.float32)
    for s in range(0, rows, _ROWS):
        w = np.ascontiguousarray(signs[s : s + _ROWS]).view(np.uint8).reshape(-1, groups, 4 * words)
        bits = np.unpackbits(w, axis=2, bitorder="little")[:, :, :g]  # (m, G, g)
        a = scales[s : s + _ROWS, :, None]
        y = np.where(bits.astype(bool), a, -a).reshape(-1, dim)
        out[s : s + _ROWS] = y if base is None else y + np.asarray(base, np.float32)


def _fwht(z: np.ndarray) -> np.ndarray:
    """The unnormalised Walsh–Hadamard transform along the last axis (natural order)."""
    n, h = z.shape[-1], 1
    lead = z.shape[:-1]
    while h < n:
        z = z.reshape(*lead, n // (2 * h), 2, h)
        z = np.stack([z[..., 0, :] + z[..., 1, :], z[..., 0, :] - z[..., 1, :]], axis=-2)
        h *= 2
    return z.reshape(*lead, n)


def _rotation(x, base, rows, dim, m, a, c, dsigns, q, out, inverse: bool) -> None:
    g, n = m * a * c, a * c
    x = _rows(x, rows, dim, np.float32).reshape(rows, dim // g, g)
    out = _rows(out, rows, dim, np.float32).reshape(rows, dim // g, g)
    dsigns = np.asarray(dsigns, np.float32).reshape(g) / np.float32(np.sqrt(n))
    q = np.asarray(q, np.float32).reshape(m, m)
    b = 0 if base is None else np.asarray(base, np.float32).reshape(dim // g, g)
    for s in range(0, rows, _ROWS):
        if inverse:  # Rᵀ y + base = D Hᵀ (Q_mᵀ ⊗ I) y + base
            w = np.einsum("ij,rbit->rbjt", q, x[s : s + _ROWS].reshape(-1, dim // g, m, n)) if m > 1 else \
                x[s : s + _ROWS].reshape(-1, dim // g, m, n)
            out[s : s + _ROWS] = _fwht(w).reshape(-1, dim // g, g) * dsigns + b
        else:  # R (x − base) = (Q_m ⊗ H) D (x − base)
            z = _fwht(((x[s : s + _ROWS] - b) * dsigns).reshape(-1, dim // g, m, n))
            out[s : s + _ROWS] = (np.einsum("ji,rbit->rbjt", q, z) if m > 1 else z).reshape(-1, dim // g, g)


def rotate(x, base, rows, dim, m, a, c, dsigns, q, out) -> None:
    """out <- R (x - base) on every block of m*a*c coordinates of every row."""
    _rotation(x, base, rows, dim, m, a, c, dsigns, q, out, inverse=False)


def unrotate(y, base, rows, dim, m, a, c, dsigns, q, out) -> None:
    """out <- R^T y + base on every block of m*a*c coordinates of every row."""
    _rotation(y, base, rows, dim, m, a, c, dsigns, q, out, inverse=True)


def lut_sums(table, codes, n: int, n_bytes: int, rows, groups: int, out) -> None:
    """out[r, j] <- sum of table[p, codes[rows[r], p]] over the bytes p of group j (rows None: all)."""
    table = np.asarray(table, np.float32).reshape(n_bytes, 256)
    codes = _rows(codes, n, n_bytes, np.uint8)
    rows = np.arange(n) if rows is None else np.asarray(rows, np.int64)
    out = np.asarray(out).reshape(len(rows), groups)
    positions = np.arange(n_bytes)
    for s in range(0, len(rows), _ROWS):
        picked = table[positions, codes[rows[s : s + _ROWS]]]  # (m, n_bytes)
        out[s : s + _ROWS] = picked.reshape(len(picked), groups, -1).sum(axis=2)


def int8_dot(codes, q, n: int, k: int, out) -> None:
    """out[i] <- sum_t q[t] * codes[i, t] for int8 codes (n, k)."""
    codes, q, out = _rows(codes, n, k, np.int8), np.asarray(q, np.float32), np.asarray(out).reshape(n)
    for s in range(0, n, _ROWS):
        out[s : s + _ROWS] = codes[s : s + _ROWS].astype(np.float32) @ q


def weighted_l1(x, center, weights, n: int, d: int, out) -> None:
    """out[i] <- sum_j weights[j] * |x[i, j] - center[j]|."""
    x, out = _rows(x, n, d, np.float32), np.asarray(out).reshape(n)
    center, weights = np.asarray(center, np.float32), np.asarray(weights, np.float32)
    for s in range(0, n, _ROWS):
        out[s : s + _ROWS] = np.abs(x[s : s + _ROWS] - center) @ weights


def simd() -> str:
    return "numpy"
