"""Top-k search over BitDelta codes without decompressing the library.

Stages over what the index holds (≈ 1.1 KB an experience at d = 7680):

1. coarse (libraries of `SKETCH_MIN_ROWS` rows or more): every code's reconstruction projected on the
   top `SKETCH_DIM` principal directions of the library's reconstructions, stored as int8
   (64 bytes a row). Embeddings have far fewer informative directions than coordinates, so
   this short sketch finds the neighbourhood; its inner product with the query's sketch
   ranks ``candidates`` rows (C, `kernels.int8_dot`). Smaller libraries are scanned in full.
2. asymmetric, on those rows: an estimate of q·e from the code and the float query,

       q·e ≈ q·ē_b + κ · Σ_j α_j ⟨(Rq)_j, s_j⟩

   (R = the profile's rotation, identity when unset). ⟨v_j, s_j⟩ over ±1 signs is 2·(sum of
   v_j over set bits) − Σ v_j; the sum over set bits is one lookup per code byte in a
   (byte position × byte value) table built from the query (RaBitQ's fast scan, in C).
   κ undoes the shrinkage of 1-bit codes (RaBitQ's ⟨ō, o⟩ correction): profile vectors are
   unit length, so 1 = ‖ē‖² + 2κ ē·Δ̂ + κ‖Δ̂‖² gives κ = (1 − ‖ē‖²) / (‖Δ̂‖² + 2 ē·Δ̂) per
   row, from the code alone (`dso bench retrieval`, full scan of 10k lifted MiniLM vectors:
   recall@10 0.9465).
2b. where the library's deltas lie (almost) in a few principal directions, as the default Zen
   space's do: the best candidates decoded again, consistently with their sign bits, inside
   the directions learned from the codes (`_Subspace`; Zen space: 0.9495 → 0.956 at 10k rows).
3. optional, when the encoder knows the subspace its outputs lie in: the best candidates decoded
   again, consistently with their sign bits, inside that subspace (`Support`).

Rows whose float vector the node holds are then rescored exactly by the caller. Rows are
appended as experiences arrive and masked out when deleted, so the index grows
incrementally; the library rebuilds it from SQLite on open.

Stages 1 and 2b are fitted to the library and fitted again as it grows (`refit_due`): at 2,048
rows and every ×4 after for 2b, at 16,384 and every ×4 for the sketch, seconds each at d = 7680.
Stage 2b, where it is off (the library's deltas are not concentrated enough), is fitted again
only where the codes drifted (`_Subspace.still_fits`, a few ms): where the rows added since its
fit put about the share of their signal in its directions that the fit found, a refit would find
it off again, so the fit is kept and counts as covering the rows seen (the ×4 schedule goes on).
An index made with ``defer_refit`` leaves that work to its owner: `fit` reads only the rows
present when the refit fell due (rows are only ever appended or masked), so it runs without
the lock searches take, and `install` then shows the new fit, the sketch catching up on the rows
added meanwhile; until then searches use the previous fit, which covers every row (new rows are
sketched as they arrive) and stays exact, only less sharp.

A fit is a function of the rows it read: `fitted_states` hands each stage's arrays out with the
rows it was fitted on, and `restore` takes them back where `fingerprint` of those rows is
unchanged, so a library file keeps its fit and an open skips it (`dsonet.library.saved_fit`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np

from dsonet.codec import kernels
from dsonet.codec.bitdelta import words_per_group
from dsonet.codec.rotation import get_rotation
from dsonet.codec.threads import run_chunks
from dsonet.library.eigen import one_blas_thread, top_eigh

_GROW = 1.125  # capacity growth of the row arrays: amortised O(1) appends, at most 12.5% slack
SKETCH_DIM = 64  # principal directions in the coarse sketch
SKETCH_MIN_ROWS = 16384  # below this a full scan (≤ 16 MB of codes, a few ms on two cores) needs no sketch
_LUT_CHUNK_ROWS = 4096  # rows per core in a lookup-table scan: smaller scans are not worth a thread hand-off
SKETCH_FIT_ROWS = 2048  # reconstructions the principal directions are fitted on
_REFIT_GROWTH = 4  # refit the directions when the library has grown this much since the last fit
# The coarse stage keeps at least 1/32 of the rows. Measured at 1M, 200 queries: recall@10 0.8745 keeping
# 1/128 (51 ms), 0.883 keeping 1/32 (73 ms) or 1/16, 0.8835 for a full scan (762 ms).
COARSE_SHARE = 32
REFINE_ROWS = 16  # stages 2b and 3 re-decode this many of the best candidates (at least 2k)
SUBSPACE_DIM = 128  # stage 2b: principal directions of the library's deltas the candidates are re-decoded in
SUBSPACE_MIN_ROWS = 2048  # stage 2b needs this many rows to find those directions
SUBSPACE_MIN_DIM = 8 * SUBSPACE_DIM  # ... many more sign bits than directions (1-bit decoding errs by ~K/d)
SUBSPACE_SHARE = 0.95  # ... and runs only where they hold this share of the deltas' signal
DRIFT_ROWS = 512  # rows added since stage 2b's fit that show whether the codes drifted (`_Subspace.still_fits`)
# How far their share of signal in the fitted directions may fall under the fit's own share, and rise
# over it. Directions estimated from the 1-bit codes of 2,048 rows hold less of rows they were not
# fitted on: lifted MiniLM at d = 7680 (the robustness bench's round), fit 0.914, the next 6,144 rows
# 0.827 (a refit on all 8,192: 0.913), 3,000 rows of another lift 0.016.
DRIFT_DROP, DRIFT_RISE = 0.15, 0.02
SUBSPACE_STEP = 1.25  # stage 2b's consistency step, in units of √(π / 8d) (measured at 10k: 1.0–1.5 alike, 1.75 less)
REFINE_STEPS = 3
REFINE_STEP = 1.5  # measured at 10k: 1.0 converges slower, 2.5 oscillates
# Part of every fingerprint: raise it when a stage's fit or saved arrays change meaning, and saved fits are refitted.
FIT_FORMAT = 1


def _byte_table(q8: np.ndarray) -> np.ndarray:
    """(P, 8) -> (P, 256): column v holds the sum of the coordinates whose bit is set in v.

    Built by doubling (column v + 2^k = column v + q_k), 255 adds per row and no BLAS call:
    a threaded matmul this small costs more in thread wake-ups than in arithmetic.
    """
    table = np.zeros((len(q8), 1), np.float32)
    for k in range(8):
        table = np.concatenate([table, table + q8[:, k : k + 1]], axis=1)
    return np.ascontiguousarray(table)


def matvec(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """m @ v without BLAS: a threaded GEMV this small waits on thread wake-ups (measured 0.2 ms
    here against 4–6 ms through OpenBLAS on a busy 2-core machine)."""
    return np.einsum("ij,j->i", m, v).astype(np.float32, copy=False)


@dataclass(frozen=True)
class Refit:
    """A refit that fell due: the stages to fit again, on the first ``rows`` rows and ``baselines`` baselines."""

    rows: int
    baselines: int
    subspace: bool
    sketch: bool


@dataclass(frozen=True)
class Fitted:
    """What `CodeIndex.fit` computed, for `CodeIndex.install`: None for a stage not refitted."""

    subspace: _Subspace | None
    sketch: _Sketch | None


class CodeIndex:
    def __init__(self, dim: int, group_size: int, rotation_seed: int | None, support: np.ndarray | None = None,
                 defer_refit: bool = False):
        """``support``: (k, dim) vectors spanning the subspace the encoder's outputs lie in (see
        `Support`), when the encoder knows it; it turns on stage 3. ``defer_refit``: `add` leaves
        refits to the owner (`refit_due`, `fit`, `install`; see the module doc)."""
        self.dim, self.group_size, self.rotation_seed = dim, group_size, rotation_seed
        self.defer_refit = defer_refit
        self.n_groups = dim // group_size
        self.code_bytes = self.n_groups * words_per_group(group_size) * 4
        self.rotation = get_rotation(dim, rotation_seed, group_size) if rotation_seed is not None else None
        self.n = 0
        self._codes = np.zeros((0, self.code_bytes), np.uint8)
        self.scales = np.zeros((0, self.n_groups), np.float32)
        self.base_rows = np.zeros(0, np.int32)
        self.kappa = np.zeros(0, np.float32)  # the unit-norm correction of every row
        self.live = np.zeros(0, bool)
        self._baselines = np.zeros((0, dim), np.float32)
        self.n_baselines = 0
        self.sketch: _Sketch | None = None
        self.subspace: _Subspace | None = None
        self.support = None if support is None else Support(self, support)

    def __len__(self) -> int:
        return self.n

    @property
    def codes(self) -> np.ndarray:
        """(n, code_bytes) uint8: every row's sign words as bytes."""
        return self._codes[: self.n]

    @property
    def baselines(self) -> np.ndarray:
        return self._baselines[: self.n_baselines]

    def add_baseline(self, baseline: np.ndarray) -> int:
        if self.n_baselines == len(self._baselines):  # grow geometrically: one baseline arrives per batch
            grown = np.zeros((max(8, int(len(self._baselines) * 1.5)), self.dim), np.float32)
            grown[: self.n_baselines] = self._baselines[: self.n_baselines]
            self._baselines = grown
        self._baselines[self.n_baselines] = np.asarray(baseline, np.float32)
        self.n_baselines += 1
        if self.sketch is not None:
            self.sketch.add_baseline(self, self._baselines[self.n_baselines - 1])
        if self.support is not None:
            self.support.add_baseline(self, self._baselines[self.n_baselines - 1])
        return self.n_baselines - 1

    def add(self, signs: np.ndarray, scales: np.ndarray, base_rows: np.ndarray) -> np.ndarray:
        """Append codes: signs (m, G, W) uint32, scales (m, G), base_rows (m,) -> their row numbers."""
        m = len(scales)
        self._reserve(self.n + m)
        rows = np.arange(self.n, self.n + m)
        self._codes[rows] = np.ascontiguousarray(signs, dtype="<u4").reshape(m, -1).view(np.uint8)
        self.scales[rows] = scales
        self.base_rows[rows] = base_rows
        self.live[rows] = True
        self.n += m
        for start in range(0, m, 4096):  # bounded temporaries
            r = rows[start : start + 4096]
            self.kappa[r] = self._kappa(r)
        if self.sketch is not None:
            self.sketch.add(self, rows)  # the current sketch keeps covering every row until a new one is installed
        due = self.refit_due()
        if due is not None and not self.defer_refit:
            self.install(self.fit(due))
        return rows

    def refit_due(self) -> Refit | None:
        """The stages the library has outgrown (see the module doc), or None; ask holding the lock."""
        subspace = self.dim >= SUBSPACE_MIN_DIM and self.n >= SUBSPACE_MIN_ROWS and (
            self.subspace is None or self.n >= _REFIT_GROWTH * self.subspace.fitted_at)
        sketch = self.n >= SKETCH_MIN_ROWS and (self.sketch is None or self.n >= _REFIT_GROWTH * self.sketch.fitted_at)
        return Refit(self.n, self.n_baselines, subspace, sketch) if subspace or sketch else None

    def fit(self, due: Refit) -> Fitted:
        """Fit the stages ``due`` names on its rows only: needs no lock while writes only append
        rows and baselines or mask rows (arrays that grow are copied, never changed in place)."""
        subspace = None
        if due.subspace:
            held = self.subspace  # the installed fit: swapped by `install` only, so read once
            subspace = held.kept_for(due.rows) if held is not None and held.still_fits(self, due.rows) else \
                _Subspace.fit(self, due.rows)
        return Fitted(subspace, _Sketch.fit(self, due.rows, due.baselines) if due.sketch else None)

    def install(self, fitted: Fitted) -> None:
        """Show a fit (holding the lock): the new sketch first sketches the rows and baselines added since."""
        if fitted.subspace is not None:
            self.subspace = fitted.subspace
        if fitted.sketch is not None:
            fitted.sketch.catch_up(self)
            self.sketch = fitted.sketch

    def fingerprint(self, rows: int | np.ndarray, salt: str = "") -> str:
        """A digest of what a computation over some rows reads: their codes and scales, the baselines
        they are coded against, the index's shape and the stages' constants. ``rows``: the first
        that many (what a fit reads), or these rows in this order; ``salt`` names the computation."""
        pick = slice(0, rows) if isinstance(rows, (int, np.integer)) else np.asarray(rows, np.int64)
        base_rows = self.base_rows[pick]
        referenced = int(base_rows.max()) + 1 if len(base_rows) else 0
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{FIT_FORMAT}:{self.dim}:{self.group_size}:{self.rotation_seed}:{len(base_rows)}:{SKETCH_DIM}:"
                 f"{SKETCH_FIT_ROWS}:{SUBSPACE_DIM}:{SUBSPACE_SHARE}:{salt}".encode())
        for part in (self._codes[pick], self.scales[pick], base_rows, self._baselines[:referenced]):
            h.update(np.ascontiguousarray(part).data)
        return h.hexdigest()

    def fitted_states(self) -> dict[str, tuple[int, dict[str, np.ndarray]]]:
        """stage name -> (the rows it was fitted on, its arrays), for each fitted stage: what `restore` takes."""
        stages = {"subspace": self.subspace, "sketch": self.sketch}
        return {name: (stage.fitted_at, stage.state()) for name, stage in stages.items() if stage is not None}

    def restore(self, stage: str, state: dict[str, np.ndarray]) -> None:
        """Install a stage from `fitted_states`' arrays; the caller has checked `fingerprint` of its rows."""
        if stage == "subspace":
            self.install(Fitted(_Subspace.from_state(state), None))
        elif stage == "sketch":
            self.install(Fitted(None, _Sketch.from_state(self, state)))
        else:
            raise ValueError(f"stage: {stage!r} is not a fitted stage; expected subspace or sketch")

    def _reserve(self, size: int) -> None:
        if size <= len(self.scales):
            return
        cap = max(size, int(len(self.scales) * _GROW), 1024)
        for name in ("_codes", "scales", "base_rows", "kappa", "live"):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def remove(self, rows: np.ndarray) -> None:
        self.live[np.asarray(rows, dtype=np.int64)] = False

    def deltas(self, rows: np.ndarray) -> np.ndarray:
        """Δ̂ = α s of some rows, (len(rows), d), in the codes' own (rotated) frame."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dim), np.float32)
        words = np.ascontiguousarray(self._codes[rows]).view("<u4")
        scales = np.ascontiguousarray(self.scales[rows])
        kernels.dequantize(words, scales, None, len(rows), self.dim, self.group_size, out)
        return out

    def reconstruct(self, rows: np.ndarray) -> np.ndarray:
        """ê for some rows, (len(rows), d), in the profile's (unrotated) space."""
        rows = np.asarray(rows, dtype=np.int64)
        delta = self.deltas(rows)
        if self.rotation is not None:
            delta = self.rotation.invert(delta)
        return delta + self.baselines[self.base_rows[rows]]

    def score(self, q: np.ndarray, rows: np.ndarray | None = None, rotated_q: np.ndarray | None = None) -> np.ndarray:
        """Estimates of q·e (cosines, for a unit q) for the given rows (all rows when None), from the codes.
        ``rotated_q``: Rq, when the caller has it already."""
        rows = np.arange(self.n) if rows is None else np.asarray(rows, dtype=np.int64)
        rotated_q = self._rotate(q) if rotated_q is None else rotated_q
        base_dot = matvec(self.baselines, q)  # (B,) one per stored baseline
        estimate = base_dot[self.base_rows[rows]] + self.kappa[rows] * self._delta_dot(rotated_q, rows)
        return np.clip(estimate, -1.0, 1.0)  # a cosine of unit vectors, though its estimate may overshoot

    def _rotate(self, v: np.ndarray) -> np.ndarray:
        return self.rotation.apply(v[None, :])[0] if self.rotation is not None else v

    def _delta_dot(self, v: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """v·Δ̂ = Σ_j α_j ⟨v_j, s_j⟩ for rows, v in the codes' (rotated) frame; nothing unpacked."""
        grouped = np.zeros((self.n_groups, self.code_bytes // self.n_groups * 8), np.float32)  # pad bits: 0
        grouped[:, : self.group_size] = v.reshape(self.n_groups, self.group_size)
        table = _byte_table(grouped.reshape(-1, 8))  # (code_bytes, 256)
        set_sum = np.empty((len(rows), self.n_groups), np.float32)
        codes = self.codes

        def part(start: int, stop: int) -> None:
            kernels.lut_sums(table, codes, self.n, self.code_bytes, rows[start:stop], self.n_groups, set_sum[start:stop])

        run_chunks(part, len(rows), max(_LUT_CHUNK_ROWS, -(-len(rows) // (os.cpu_count() or 1))))
        return (self.scales[rows] * (2.0 * set_sum - grouped.sum(1))).sum(1)

    def _kappa(self, rows: np.ndarray) -> np.ndarray:
        """κ = (1 − ‖ē‖²) / (‖Δ̂‖² + 2 ē·Δ̂) per row (see the module doc); 1 where that is undefined."""
        out = np.ones(len(rows), np.float32)
        for b in np.unique(self.base_rows[rows]):  # rows of one batch share a baseline: usually one pass
            sel = self.base_rows[rows] == b
            base = self.baselines[b]
            energy = self.group_size * (self.scales[rows[sel]] ** 2).sum(1)
            denominator = energy + 2.0 * self._delta_dot(self._rotate(base), rows[sel])
            numerator = 1.0 - float(base @ base)
            ok = (denominator > 1e-12) & (numerator > 0)
            out[np.flatnonzero(sel)[ok]] = numerator / denominator[ok]
        return out

    def search(self, q: np.ndarray, k: int, candidates: int, allowed: np.ndarray | None = None,
               refine: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Top rows (rows, scores) by the asymmetric estimate, best first; at most ``candidates`` rows
        returned, from a coarse pool of at least ``candidates`` (1/`COARSE_SHARE` of the library past that).

        ``allowed``: a boolean mask over rows (e.g. a domain); small allowed sets are scored in full.
        ``refine``: run stage 3 (`Support`) on the best rows, when the index has a support.
        """
        mask = self.live[: self.n] if allowed is None else self.live[: self.n] & allowed[: self.n]
        n_allowed = int(mask.sum())
        if n_allowed == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        rotated_q = self._rotate(q)  # once: the coarse stage and the estimate both use it
        pool = max(candidates, n_allowed // COARSE_SHARE)
        if self.sketch is None or n_allowed <= pool:
            rows = np.flatnonzero(mask)
        else:
            # live rows make up most of the index; widen the coarse pool by the share that is masked out
            rows = self.sketch.search(rotated_q, int(pool * self.n / n_allowed) + k)
            rows = rows[mask[rows]]
        scores = self.score(q, rows, rotated_q)
        order = np.argsort(-scores, kind="stable")[:candidates]
        rows, scores = rows[order], scores[order]
        if self.subspace is not None and self.subspace.on and len(rows):
            top = min(len(rows), max(REFINE_ROWS, 2 * k))
            scores = scores.copy()
            scores[:top] = self.subspace.score(self, rotated_q, rows[:top], scores[:top])
            order = np.argsort(-scores, kind="stable")
            rows, scores = rows[order], scores[order]
        if refine and self.support is not None and len(rows):
            top = rows[: max(REFINE_ROWS, 2 * k)]
            scores = scores.copy()
            scores[: len(top)] = self.support.score(self, q, rotated_q, top)
            order = np.argsort(-scores, kind="stable")
            rows, scores = rows[order], scores[order]
        return rows, scores

    def memory_bytes(self) -> int:
        """Bytes allocated for the rows (capacity included), the baselines and the sketch."""
        rows = sum(getattr(self, name).nbytes for name in ("_codes", "scales", "base_rows", "kappa", "live"))
        stages = [s.memory_bytes() for s in (self.sketch, self.subspace, self.support) if s is not None]
        return rows + self._baselines.nbytes + sum(stages)


class Support:
    """Stage 3: the best candidates' codes decoded again, knowing the subspace the vectors lie in.

    An encoder whose last layers are linear up to a per-vector scale (the Zen head: Linear →
    LayerNorm → L2-normalise) puts every output in a fixed subspace of k ≪ d dimensions. The
    back-projection α·s spreads the code's error evenly over all d coordinates, so the part of it
    inside that subspace is about k/d of the error, and it is what still moves q·ê. Here Δ = Aᵀc
    (A: an orthonormal basis of the subspace, in the codes' frame) is sought whose signs agree
    with the code's, sign(Aᵀc) = s, starting from c = κ·A Δ̂: each step moves c towards the
    coordinates whose sign disagrees (binary iterative hard thresholding, 1-bit compressed
    sensing) and rescales it so ‖ē + Δ‖ = 1. Sign-consistent decoding of m bits in k dimensions
    errs by O(k/m) against the back-projection's O(√(k/m)). Measured on 10k lifted MiniLM vectors
    (k = 384, d = 7680), best 20 candidates: recall@10 0.9465 → 0.956 after 1 step, 0.9655 after 3.
    It costs 30–40 ms a query on two cores, dominated by streaming the k × d basis through each
    of the 7 products (decoding 8 rows instead of 20 saves only a sixth), so it is for libraries
    that would rather be right than fast. Decoding only the top principal directions inside the
    support (k' = 32–128) gains at most 0.007.
    """

    def __init__(self, index: CodeIndex, support: np.ndarray):
        support = np.asarray(support, np.float32)
        if support.ndim != 2 or support.shape[1] != index.dim or not 0 < len(support) < index.dim:
            raise ValueError(f"support: expected (k, {index.dim}) with 0 < k < {index.dim}, got {support.shape}")
        if not np.isfinite(support).all():
            raise ValueError("support: contains NaN or Inf")
        basis = np.linalg.qr(support.T.astype(np.float64))[0].T.astype(np.float32)  # orthonormal rows
        self.basis = basis if index.rotation is None else index.rotation.apply(basis)  # (k, d), codes' frame
        self.base_coords = np.zeros((0, len(basis)), np.float32)  # A R ē for every baseline
        for base in index.baselines:
            self.add_baseline(index, base)

    def add_baseline(self, index: CodeIndex, base: np.ndarray) -> None:
        coords = matvec(self.basis, index._rotate(np.asarray(base, np.float32)))
        self.base_coords = np.vstack([self.base_coords, coords[None, :]])

    def score(self, index: CodeIndex, q: np.ndarray, rotated_q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """q·(ē + Aᵀc) for each row after `REFINE_STEPS` sign-consistency steps."""
        deltas = index.deltas(rows)  # α·s in the codes' frame
        signs = np.sign(deltas)
        base = index.base_rows[rows]
        base_coords = self.base_coords[base]
        base_norm2 = np.einsum("ij,ij->i", index.baselines[base], index.baselines[base])
        c = self._unit(index.kappa[rows, None] * deltas @ self.basis.T, base_coords, base_norm2)
        step = REFINE_STEP * np.sqrt(np.pi / 8 / index.dim)
        y = np.empty_like(deltas)  # reused: a fresh 600 KB array a step costs page faults
        for _ in range(REFINE_STEPS):
            np.matmul(c, self.basis, out=y)
            miss = signs - np.sign(y)  # ±2 where the sign disagrees, else 0
            c = self._unit(c + step * np.linalg.norm(c, axis=1, keepdims=True) * (miss @ self.basis.T), base_coords, base_norm2)
        estimate = index.baselines[base] @ q + c @ (self.basis @ rotated_q)  # BLAS is awake by now
        return np.clip(estimate, -1.0, 1.0)

    def memory_bytes(self) -> int:
        """The basis is the encoder's (k·d floats, 11.8 MB for k = 384), whatever the library's size."""
        return self.basis.nbytes + self.base_coords.nbytes

    @staticmethod
    def _unit(c: np.ndarray, base_coords: np.ndarray, base_norm2: np.ndarray) -> np.ndarray:
        """c rescaled to length t, the root of t² + 2t ē·u + ‖ē‖² − 1 = 0 (u = c/‖c‖): ‖ē + Aᵀc‖ = 1."""
        norm = np.maximum(np.linalg.norm(c, axis=1), 1e-12)
        along = np.einsum("ij,ij->i", base_coords, c) / norm
        t = -along + np.sqrt(np.maximum(along**2 + 1.0 - base_norm2, 0.0))
        return c * (t / norm)[:, None]


class _Subspace:
    """Stage 2b: the best candidates' codes decoded again, consistently with their sign bits, inside
    the top `SUBSPACE_DIM` principal directions of the library's own deltas.

    The estimate κ α ⟨Rq, s⟩ is the linear back-projection of d one-bit measurements, and its
    error is spread over all d directions: for a unit query about 0.008 in the default Zen space,
    the size of the gap between a query's 10th and 11th neighbours. Per-row rescalings of it do
    not help (at 10k rows: ⟨q, ê⟩ 0.947, κ 0.9495, ⟨q, ê⟩/‖ê‖ 0.950, κ from the true ‖Δ‖ 0.9455),
    nor does a linear (Wiener) reweighting of the query (0.952). What helps is that embeddings
    fill few directions: like `Support`, but learning them from the codes instead of the encoder,
    V holds the principal directions of κΔ̂ over a sample of rows (codes' frame, int8); a
    candidate's coordinates c = V κΔ̂ take one step of binary iterative hard thresholding towards
    the coordinates whose sign disagrees with the code, keeping their length, and its estimate
    moves by ⟨V Rq, c − c₀⟩ (the part of q outside V keeps the linear estimate). One step on the
    best 20 candidates is three (20 × d) · (d × 128) products, a few ms. Measured on the default
    Zen space, whose top 128 directions hold 0.99 of the deltas' signal (`dso bench retrieval`):
    recall@10 0.9495 → 0.956 at 10k rows and 0.9535 → 0.959 at 100k. The gain varies with the
    library: over the first 2.5k–9k of those rows it is 0 to +0.0085 (−0.0075 at 3k), +0.004 on
    average. The encoder's own 290-dim support, 3 steps, gives 0.972 at 30 ms; more steps in the
    learned directions, or directions refitted on refined rows, gain nothing (they are estimated
    from 1-bit codes).
    In lifted MiniLM (384 flat-ish dims) the top 128 hold 0.87 of the signal and the step gains
    nothing (0.9465 → 0.9435), so it runs only where they hold `SUBSPACE_SHARE`.
    """

    def __init__(self, directions: np.ndarray, fitted_at: int, held: float):
        """``directions``: (K, d); ``held``: the share of the deltas' signal they hold. The step runs
        only where that is `SUBSPACE_SHARE` or more (`on`); the directions are kept either way, to
        tell whether the codes drifted (`still_fits`)."""
        self.held = held
        step = np.maximum(np.abs(directions).max(1, initial=0.0), 1e-12) / 127  # (K,) int8 keeps each entry to 1% of its row's spread
        self.codes = np.rint(directions / step[:, None]).astype(np.int8)  # (K, d) in the codes' frame
        self.step = step.astype(np.float32)
        self.fitted_at = fitted_at

    @property
    def on(self) -> bool:
        return self.held >= SUBSPACE_SHARE and len(self.codes) > 0  # a fit saved by older code kept none when off

    def still_fits(self, index: CodeIndex, n: int) -> bool:
        """Whether a stage that is off would stay off if fitted again on the first ``n`` rows: the rows
        added since the fit put about the share of their signal in these directions that the fit
        found (no less than `DRIFT_DROP` under it, no more than `DRIFT_RISE` over it), so the codes
        have not drifted. A stage that is on is fitted again all the same: directions fitted on a
        sample spread over the grown library describe it better (default space at 100k rows:
        recall@10 0.956 keeping the fit made at 3,000 rows, 0.959 refitting). Reads `DRIFT_ROWS` of
        those rows, the same ones for the same rows (a kept fit stays a function of the rows it
        covers, as `fingerprint` assumes)."""
        if self.on or not len(self.codes) or n <= self.fitted_at:
            return False
        sample = np.linspace(self.fitted_at, n - 1, min(DRIFT_ROWS, n - self.fitted_at)).astype(np.int64)
        x = index.deltas(sample) * index.kappa[sample, None]  # (s, d) κΔ̂, as `fit` reads them
        x -= x.mean(0)
        v = self.codes.astype(np.float32) * self.step[:, None]  # (K, d)
        v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        energy = index.group_size * (index.scales[sample] ** 2).sum(1)
        kappa = index.kappa[sample]
        noise = float(np.mean(kappa * (kappa - 1) * energy)) / index.dim  # per direction, as in `fit`
        coords = x @ v.T  # (s, K)
        captured = float(np.einsum("ij,ij->", coords, coords)) / len(x) - len(v) * noise
        signal = float(np.einsum("ij,ij->", x, x)) / len(x) - noise * index.dim
        return self.held - DRIFT_DROP <= captured / max(signal, 1e-12) <= self.held + DRIFT_RISE

    def kept_for(self, n: int) -> "_Subspace":
        """This fit, standing for the first ``n`` rows (`still_fits` said they did not drift)."""
        kept = _Subspace.__new__(_Subspace)
        kept.codes, kept.step, kept.held, kept.fitted_at = self.codes, self.step, self.held, n
        return kept

    def state(self) -> dict[str, np.ndarray]:
        return {"codes": self.codes, "step": self.step, "fitted_at": np.int64(self.fitted_at), "held": np.float64(self.held)}

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> "_Subspace":
        subspace = cls.__new__(cls)  # the int8 directions as saved: quantising them again would round twice
        subspace.codes, subspace.step = state["codes"].astype(np.int8), state["step"].astype(np.float32)
        subspace.fitted_at, subspace.held = int(state["fitted_at"]), float(state["held"])
        return subspace

    @classmethod
    def fit(cls, index: CodeIndex, n: int) -> "_Subspace":
        """The top directions of a sample of the first ``n`` rows' κΔ̂, kept only where they hold nearly all of the signal."""
        sample = np.linspace(0, n - 1, min(SKETCH_FIT_ROWS, n)).astype(np.int64)
        x = index.deltas(sample) * index.kappa[sample, None]  # (s, d) κΔ̂ in the codes' frame
        x -= x.mean(0)
        gram = x @ x.T / len(x)  # the small (s × s) Gram matrix: s ≪ d
        top_vals, top_vecs = top_eigh(gram, SUBSPACE_DIM)
        # κΔ̂ = Δ + noise, the noise's energy ‖κΔ̂‖² − ‖Δ‖² = κ(κ − 1)‖Δ̂‖² spread evenly over the d
        # directions by the rotation; each of the s-sample's directions holds d/s of that share
        energy = index.group_size * (index.scales[sample] ** 2).sum(1)  # ‖Δ̂‖²
        kappa = index.kappa[sample]
        noise = float(np.mean(kappa * (kappa - 1) * energy)) / index.dim  # per direction
        signal = float(np.trace(gram)) - noise * index.dim  # the trace: the sum of every eigenvalue
        held = (float(top_vals.sum()) - len(top_vals) * noise * index.dim / len(x)) / max(signal, 1e-12)
        directions = top_vecs.T @ x
        directions /= np.maximum(np.linalg.norm(directions, axis=1, keepdims=True), 1e-12)
        return cls(directions, n, held)

    def score(self, index: CodeIndex, rotated_q: np.ndarray, rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """The candidates' estimates (``scores``, from the codes) after one consistency step inside V."""
        v, step = self.codes.astype(np.float32), self.step  # V = step ⊙ v, (K, d)
        deltas = index.deltas(rows) * index.kappa[rows, None]  # (m, d) κΔ̂
        # one thread: on a busy machine two BLAS threads took 220 ms for a product one does in 1 ms
        with one_blas_thread():
            c0 = (deltas @ v.T) * step  # (m, K) the linear estimate's coordinates
            miss = np.sign(deltas) - np.sign((c0 * step) @ v)  # (m, d) ±2 where V's reconstruction has the wrong sign
            norm0 = np.linalg.norm(c0, axis=1, keepdims=True)
            c = c0 + SUBSPACE_STEP * np.sqrt(np.pi / 8 / index.dim) * norm0 * ((miss @ v.T) * step)
            c *= norm0 / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
            moved = (c - c0) @ ((v @ rotated_q) * step)  # (m,)
        return np.clip(scores + moved, -1.0, 1.0)

    def memory_bytes(self) -> int:
        return self.codes.nbytes + self.step.nbytes


class _Sketch:
    """The coarse stage: P(ê − μ) for every row, P the top principal directions of reconstructions,
    stored as int8 with one scale per direction.

    Computed from the codes without leaving their frame: P ê = P ē_b + (P Rᵀ) Δ̂, and a query's
    P q = (P Rᵀ)(R q), so only P Rᵀ is kept and a row costs one dequantize and one (d × K) product.
    """

    def __init__(self, index: CodeIndex, rotated: np.ndarray, mean: np.ndarray, step: np.ndarray, fitted_at: int,
                 baselines: int):
        """Projects the first ``baselines`` baselines; `add` sketches rows, `catch_up` the rest."""
        self.rotated, self.step, self.mean = rotated, step, mean  # (K, d) P Rᵀ; (K,) int8 step per direction; (d,)
        self.mean_proj = self._project(index, mean)
        self.base_proj = np.zeros((0, len(rotated)), np.float32)
        for base in index.baselines[:baselines]:
            self.add_baseline(index, base)
        self.fitted_at = fitted_at
        self.n = 0
        self.codes = np.zeros((0, len(rotated)), np.int8)

    def _project(self, index: CodeIndex, v: np.ndarray) -> np.ndarray:
        """P v for a vector of the profile's space."""
        return matvec(self.rotated, index._rotate(np.asarray(v, np.float32)))

    def state(self) -> dict[str, np.ndarray]:
        """The fitted directions, not the rows' sketches: those are one product a row, redone on restore."""
        return {"rotated": self.rotated, "mean": self.mean, "step": self.step, "fitted_at": np.int64(self.fitted_at)}

    @classmethod
    def from_state(cls, index: CodeIndex, state: dict[str, np.ndarray]) -> "_Sketch":
        """A fitted sketch with no rows sketched yet: `CodeIndex.install` catches it up."""
        return cls(index, np.ascontiguousarray(state["rotated"], np.float32), state["mean"].astype(np.float32),
                   state["step"].astype(np.float32), int(state["fitted_at"]), 0)

    @classmethod
    def fit(cls, index: CodeIndex, n: int, baselines: int) -> "_Sketch":
        """Fitted on, and sketching, the first ``n`` rows (coded against the first ``baselines`` baselines)."""
        sample = np.linspace(0, n - 1, min(SKETCH_FIT_ROWS, n)).astype(np.int64)
        x = index.reconstruct(sample)
        mean = x.mean(0)
        x -= mean
        # principal directions from the small (s × s) Gram matrix: s ≪ d
        _, top_vecs = top_eigh(x @ x.T, SKETCH_DIM)
        directions = top_vecs.T @ x
        directions /= np.maximum(np.linalg.norm(directions, axis=1, keepdims=True), 1e-12)
        directions = directions.astype(np.float32)
        rotated = directions if index.rotation is None else index.rotation.apply(directions)
        spread = np.abs(x @ directions.T).max(0)  # the sample's range along each direction
        step = (np.maximum(spread, 1e-6) * 1.5 / 127).astype(np.float32)  # 50% headroom, then clipped
        sketch = cls(index, np.ascontiguousarray(rotated), mean.astype(np.float32), step, n, baselines)
        sketch.add(index, np.arange(n))
        return sketch

    def catch_up(self, index: CodeIndex) -> None:
        """Project the baselines and sketch the rows the index gained since this sketch was fitted."""
        for base in index.baselines[len(self.base_proj) :]:
            self.add_baseline(index, base)
        self.add(index, np.arange(self.n, index.n))

    def add_baseline(self, index: CodeIndex, base: np.ndarray) -> None:
        proj = self._project(index, base) - self.mean_proj
        self.base_proj = np.vstack([self.base_proj, proj[None, :]])

    def add(self, index: CodeIndex, rows: np.ndarray) -> None:
        if self.n + len(rows) > len(self.codes):
            grown = np.zeros((max(self.n + len(rows), int(len(self.codes) * _GROW)), self.codes.shape[1]), np.int8)
            grown[: self.n] = self.codes[: self.n]
            self.codes = grown
        for start in range(0, len(rows), 4096):  # bounded temporaries
            r = rows[start : start + 4096]
            proj = index.deltas(r) @ self.rotated.T + self.base_proj[index.base_rows[r]]
            self.codes[self.n : self.n + len(r)] = np.clip(np.rint(proj / self.step), -127, 127)
            self.n += len(r)

    def search(self, rotated_q: np.ndarray, n: int) -> np.ndarray:
        """The n rows whose sketch has the largest inner product with the query's."""
        weights = matvec(self.rotated, rotated_q) * self.step
        scores = np.empty(self.n, np.float32)
        kernels.int8_dot(self.codes[: self.n], weights, self.n, len(weights), scores)
        if n >= self.n:
            return np.arange(self.n)
        return np.argpartition(-scores, n)[:n]

    def memory_bytes(self) -> int:
        return self.codes.nbytes + self.rotated.nbytes + self.base_proj.nbytes
