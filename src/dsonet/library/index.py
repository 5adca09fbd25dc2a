"""Top-k search over BitDelta codes without decompressing the library.

Two stages, both over the codes as stored:

1. coarse: Hamming distance between the library's sign bits and the signs of the query's
   own delta, sign(R(q − ē)), in faiss `IndexBinaryFlat` (popcount over 960 bytes a row at
   d = 7680; memory-bound, multithreaded). It keeps ``oversample`` candidates.
2. asymmetric: for those candidates only, the exact inner product with the reconstruction,
   q·ê = q·ē_b + Σ_j α_j ⟨(Rq)_j, s_j⟩ (R = the profile's rotation, identity when unset), divided
   by ‖ê‖ so scores are cosines. ⟨q_j, s_j⟩ over ±1 signs is 2·(sum of q over set bits) − Σ q_j;
   the candidates' bits are unpacked to ±1 and multiplied as one matrix.

Rows whose float vector the node holds (it encoded the text itself) are then rescored
exactly by the caller. Rows are appended as experiences arrive and masked out when deleted,
so the index grows incrementally; the library rebuilds it from SQLite on open.
"""

from __future__ import annotations

import numpy as np

from dsonet.codec.bitdelta import pack_signs, unpack_signs
from dsonet.codec.rotation import get_rotation

_GROW = 1.5  # capacity growth factor of the row arrays (amortised O(1) appends)


def _byte_table(q8: np.ndarray) -> np.ndarray:
    """(P, 8) -> (P, 256): column v holds the sum of the coordinates whose bit is set in v.

    Built by doubling (column v + 2^k = column v + q_k), 255 adds per row and no BLAS call:
    a threaded matmul this small costs more in thread wake-ups than in arithmetic.
    """
    table = np.zeros((len(q8), 1), np.float32)
    for k in range(8):
        table = np.concatenate([table, table + q8[:, k : k + 1]], axis=1)
    return table


class CodeIndex:
    def __init__(self, dim: int, group_size: int, rotation_seed: int | None, reference: np.ndarray | None = None):
        import faiss

        self.dim, self.group_size, self.rotation_seed = dim, group_size, rotation_seed
        self.n_groups = dim // group_size
        self.code_bytes = self.n_groups * (-(-group_size // 32)) * 4
        self.rotation = get_rotation(dim, rotation_seed, group_size) if rotation_seed is not None else None
        self.binary = faiss.IndexBinaryFlat(self.code_bytes * 8)
        self.reference = None if reference is None else np.asarray(reference, np.float32)  # ē used for coarse query signs
        self.n = 0
        self.scales = np.zeros((0, self.n_groups), np.float32)
        self.base_rows = np.zeros(0, np.int32)
        self.norms = np.zeros(0, np.float32)  # ‖ê‖ of every row
        self.live = np.zeros(0, bool)
        self._baselines = np.zeros((0, dim), np.float32)
        self.n_baselines = 0

    def __len__(self) -> int:
        return self.n

    @property
    def signs(self) -> np.ndarray:
        """(n, code_bytes) uint8: a view of faiss's own copy of the codes, so they are held once.

        The view is taken afresh on every use because faiss may reallocate on add.
        """
        import faiss

        if self.n == 0:
            return np.zeros((0, self.code_bytes), np.uint8)
        return faiss.rev_swig_ptr(self.binary.xb.data(), self.n * self.code_bytes).reshape(self.n, self.code_bytes)

    @property
    def baselines(self) -> np.ndarray:
        return self._baselines[: self.n_baselines]

    def add_baseline(self, baseline: np.ndarray) -> int:
        if self.n_baselines == len(self._baselines):  # grow geometrically: one baseline arrives per batch
            grown = np.zeros((max(8, int(len(self._baselines) * _GROW)), self.dim), np.float32)
            grown[: self.n_baselines] = self._baselines[: self.n_baselines]
            self._baselines = grown
        self._baselines[self.n_baselines] = np.asarray(baseline, np.float32)
        self.n_baselines += 1
        if self.reference is None:
            self.reference = self._baselines[0].copy()
        return self.n_baselines - 1

    def add(self, signs: np.ndarray, scales: np.ndarray, base_rows: np.ndarray) -> np.ndarray:
        """Append codes: signs (m, G, W) uint32, scales (m, G), base_rows (m,) -> their row numbers."""
        m = len(scales)
        packed = np.ascontiguousarray(signs, dtype="<u4").reshape(m, -1).view(np.uint8)  # (m, code_bytes)
        self._reserve(self.n + m)
        rows = np.arange(self.n, self.n + m)
        self.binary.add(packed)
        self.n += m
        self.scales[rows] = scales
        self.base_rows[rows] = base_rows
        self.live[rows] = True
        for start in range(0, m, 4096):  # bounded temporaries
            r = rows[start : start + 4096]
            self.norms[r] = self._norms(r)
        return rows

    def _reserve(self, size: int) -> None:
        if size <= len(self.scales):
            return
        cap = max(size, int(len(self.scales) * _GROW), 1024)
        for name in ("scales", "base_rows", "norms", "live"):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def remove(self, rows: np.ndarray) -> None:
        self.live[np.asarray(rows, dtype=np.int64)] = False

    def reconstruct(self, rows: np.ndarray) -> np.ndarray:
        """ê for some rows, (len(rows), d), in the profile's (unrotated) space."""
        delta = self._deltas(np.asarray(rows))
        if self.rotation is not None:
            delta = self.rotation.invert(delta)
        return delta + self.baselines[self.base_rows[rows]]

    def _deltas(self, rows: np.ndarray) -> np.ndarray:
        words = self.signs[rows].view("<u4").reshape(len(rows), self.n_groups, -1)
        signs = unpack_signs(words, self.group_size)  # (m, G, g) ±1
        return (signs * self.scales[rows][:, :, None]).reshape(len(rows), self.dim)

    def score(self, q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Cosine of the float query q (unit, (d,)) with ê of the given rows, from the codes."""
        rows = np.asarray(rows, dtype=np.int64)
        base_dot = self.baselines @ q  # (B,) one per stored baseline
        dots = base_dot[self.base_rows[rows]] + self._delta_dot(self._rotate(q), rows)
        return dots / np.maximum(self.norms[rows], 1e-12)

    def _rotate(self, v: np.ndarray) -> np.ndarray:
        return self.rotation.apply(v[None, :])[0] if self.rotation is not None else v

    def _delta_dot(self, v: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """v·Δ̂ = Σ_j α_j ⟨v_j, s_j⟩ for rows, v in the codes' (rotated) frame; nothing unpacked.

        ⟨v_j, s_j⟩ = 2·(sum of v_j over set bits) − Σ v_j. The sum over set bits is a byte
        lookup table (as in RaBitQ's fast scan): T[p, b] is the sum of v's 8 coordinates at byte
        position p where b has a bit set, so a row costs one gather per code byte.
        """
        grouped = np.zeros((self.n_groups, self.code_bytes // self.n_groups * 8), np.float32)  # pad bits: 0
        grouped[:, : self.group_size] = v.reshape(self.n_groups, self.group_size)
        table = _byte_table(grouped.reshape(-1, 8))  # (code_bytes, 256)
        flat = self.signs[rows] + (np.arange(self.code_bytes, dtype=np.int32) * 256)  # (m, code_bytes)
        set_sum = np.take(table.ravel(), flat).reshape(len(rows), self.n_groups, -1).sum(-1)  # (m, G)
        return (self.scales[rows] * (2.0 * set_sum - grouped.sum(1))).sum(1)

    def _norms(self, rows: np.ndarray) -> np.ndarray:
        """‖ê‖ from the codes: ‖ē‖² + 2 ē·Δ̂ + g Σ_j α_j² (the rotation preserves norms)."""
        out = np.empty(len(rows), np.float32)
        for b in np.unique(self.base_rows[rows]):  # rows of one batch share a baseline: usually one pass
            sel = self.base_rows[rows] == b
            base = self.baselines[b]
            sq = base @ base + 2.0 * self._delta_dot(self._rotate(base), rows[sel])
            out[sel] = np.sqrt(np.maximum(sq + self.group_size * (self.scales[rows[sel]] ** 2).sum(1), 0.0))
        return out

    def coarse(self, q: np.ndarray, n_candidates: int) -> np.ndarray:
        """Row numbers of the n_candidates codes nearest in Hamming distance to sign(R(q − ē))."""
        if self.n == 0:
            return np.zeros(0, np.int64)
        delta = (q - self.reference)[None, :]
        if self.rotation is not None:
            delta = self.rotation.apply(delta)
        grouped = delta.reshape(1, self.n_groups, self.group_size)
        qcode = np.ascontiguousarray(pack_signs(grouped >= 0)).reshape(1, -1).view(np.uint8)
        _, idx = self.binary.search(qcode, min(n_candidates, self.n))
        idx = idx[0]
        return idx[idx >= 0].astype(np.int64)

    def search(self, q: np.ndarray, k: int, oversample: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top candidates (rows, cosines) by asymmetric score, best first; at most ``oversample`` rows.

        ``allowed``: a boolean mask over rows (e.g. a domain); small allowed sets are scored in full.
        """
        mask = self.live[: self.n] if allowed is None else self.live[: self.n] & allowed[: self.n]
        n_allowed = int(mask.sum())
        if n_allowed == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if n_allowed <= oversample:
            rows = np.flatnonzero(mask)
        else:
            # live rows make up most of the index; widen the coarse pool by the share that is masked out
            widen = self.n / n_allowed
            rows = self.coarse(q, int(oversample * widen) + k)
            rows = rows[mask[rows]]
        scores = self.score(q, rows)
        order = np.argsort(-scores, kind="stable")
        return rows[order], scores[order]

    def memory_bytes(self) -> int:
        n = self.n
        return n * (self.code_bytes + self.n_groups * 4 + 4 + 4 + 1) + self.baselines.nbytes
