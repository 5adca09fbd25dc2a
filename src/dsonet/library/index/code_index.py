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
   the directions learned from the codes (`Subspace`; Zen space: 0.9495 → 0.956 at 10k rows).
3. optional, when the encoder knows the subspace its outputs lie in: the best candidates decoded
   again, consistently with their sign bits, inside that subspace (`Support`).

Rows whose float vector the node holds are then rescored exactly by the caller. Rows are
appended as experiences arrive and masked out when deleted, so the index grows
incrementally; the library rebuilds it from SQLite on open.

Stages 1 and 2b are fitted to the library and fitted again as it grows (`refit_due`): at 2,048
rows and every ×4 after for 2b, at 16,384 and every ×4 for the sketch, seconds each at d = 7680.
Stage 2b, where it is off (the library's deltas are not concentrated enough), is fitted again
only where the codes drifted (`Subspace.still_fits`, a few ms): where the rows added since its
fit put about the share of their signal in its directions that the fit found, a refit would find
it off again, so the fit is kept and counts as covering the rows seen (the ×4 schedule goes on).
An index made with ``defer_refit`` leaves that work to its owner: `fit` reads only the rows
present when the refit fell due (rows are only ever appended or masked), so it runs without
the lock searches take, and `install` then shows the new fit, the sketch catching up on the rows
added meanwhile; until then searches use the previous fit, which covers every row (new rows are
sketched as they arrive) and stays exact, only less sharp.

A fit is a function of the rows it read: `fitted_states` hands each stage's arrays out with the
rows it was fitted on, and `restore` takes them back where `fingerprint` of those rows is
unchanged, so a library file keeps its fit and an open skips it (`dsonet.library.index.saved_fit`).
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
from dsonet.library.index import stages
from dsonet.library.index.eigen import matvec
from dsonet.library.index.stages import GROW, Sketch, Subspace, Support

SKETCH_MIN_ROWS = 16384  # below this a full scan (≤ 16 MB of codes, a few ms on two cores) needs no sketch
_LUT_CHUNK_ROWS = 4096  # rows per core in a lookup-table scan: smaller scans are not worth a thread hand-off
_REFIT_GROWTH = 4  # refit the directions when the library has grown this much since the last fit
# The coarse stage keeps at least 1/32 of the rows. Measured at 1M, 200 queries: recall@10 0.8745 keeping
# 1/128 (51 ms), 0.883 keeping 1/32 (73 ms) or 1/16, 0.8835 for a full scan (762 ms).
COARSE_SHARE = 32
REFINE_ROWS = 16  # stages 2b and 3 re-decode this many of the best candidates (at least 2k)
SUBSPACE_MIN_ROWS = 2048  # stage 2b needs this many rows to find its directions
SUBSPACE_MIN_DIM = 8 * stages.SUBSPACE_DIM  # ... many more sign bits than directions (1-bit decoding errs by ~K/d)
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

    subspace: Subspace | None
    sketch: Sketch | None


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
        self.sketch: Sketch | None = None
        self.subspace: Subspace | None = None
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
                Subspace.fit(self, due.rows)
        return Fitted(subspace, Sketch.fit(self, due.rows, due.baselines) if due.sketch else None)

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
        h.update(f"{FIT_FORMAT}:{self.dim}:{self.group_size}:{self.rotation_seed}:{len(base_rows)}:{stages.SKETCH_DIM}:"
                 f"{stages.SKETCH_FIT_ROWS}:{stages.SUBSPACE_DIM}:{stages.SUBSPACE_SHARE}:{salt}".encode())
        for part in (self._codes[pick], self.scales[pick], base_rows, self._baselines[:referenced]):
            h.update(np.ascontiguousarray(part).data)
        return h.hexdigest()

    def fitted_states(self) -> dict[str, tuple[int, dict[str, np.ndarray]]]:
        """stage name -> (the rows it was fitted on, its arrays), for each fitted stage: what `restore` takes."""
        fitted = {"subspace": self.subspace, "sketch": self.sketch}
        return {name: (stage.fitted_at, stage.state()) for name, stage in fitted.items() if stage is not None}

    def restore(self, stage: str, state: dict[str, np.ndarray]) -> None:
        """Install a stage from `fitted_states`' arrays; the caller has checked `fingerprint` of its rows."""
        if stage == "subspace":
            self.install(Fitted(Subspace.from_state(state), None))
        elif stage == "sketch":
            self.install(Fitted(None, Sketch.from_state(self, state)))
        else:
            raise ValueError(f"stage: {stage!r} is not a fitted stage; expected subspace or sketch")

    def _reserve(self, size: int) -> None:
        if size <= len(self.scales):
            return
        cap = max(size, int(len(self.scales) * GROW), 1024)
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
        rotated_q = self.rotate(q) if rotated_q is None else rotated_q
        base_dot = matvec(self.baselines, q)  # (B,) one per stored baseline
        estimate = base_dot[self.base_rows[rows]] + self.kappa[rows] * self._delta_dot(rotated_q, rows)
        return np.clip(estimate, -1.0, 1.0)  # a cosine of unit vectors, though its estimate may overshoot

    def rotate(self, v: np.ndarray) -> np.ndarray:
        """Rv: a vector of the profile's space in the codes' frame."""
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
            denominator = energy + 2.0 * self._delta_dot(self.rotate(base), rows[sel])
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
        rotated_q = self.rotate(q)  # once: the coarse stage and the estimate both use it
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
