"""The fitted and refining stages of `dsonet.library.index.code_index.CodeIndex`'s search (see its module doc).

`Sketch` (stage 1, the coarse int8 sketch) and `Subspace` (stage 2b, the candidates re-decoded in
the principal directions of the library's deltas) are fitted to the library's own codes and
fitted again as it grows; `Support` (stage 3) is given by the encoder. Each reads the index's rows
through `IndexRows` (what it reads of the index) and keeps only its own arrays.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from dsonet.codec import kernels
from dsonet.codec.rotation import Rotation
from dsonet.codec.threads import one_blas_thread
from dsonet.library.index.eigen import matvec, top_eigh

GROW = 1.125  # capacity growth of the row arrays: amortised O(1) appends, at most 12.5% slack
SKETCH_DIM = 64  # principal directions in the coarse sketch
SKETCH_FIT_ROWS = 2048  # reconstructions the principal directions are fitted on
SUBSPACE_DIM = 128  # stage 2b: principal directions of the library's deltas the candidates are re-decoded in
SUBSPACE_SHARE = 0.95  # stage 2b runs only where they hold this share of the deltas' signal
DRIFT_ROWS = 512  # rows added since stage 2b's fit that show whether the codes drifted (`Subspace.still_fits`)
# How far their share of signal in the fitted directions may fall under the fit's own share, and rise
# over it. Directions estimated from the 1-bit codes of 2,048 rows hold less of rows they were not
# fitted on: lifted MiniLM at d = 7680 (the robustness bench's round), fit 0.914, the next 6,144 rows
# 0.827 (a refit on all 8,192: 0.913), 3,000 rows of another lift 0.016.
DRIFT_DROP, DRIFT_RISE = 0.15, 0.02
SUBSPACE_STEP = 1.25  # stage 2b's consistency step, in units of √(π / 8d) (measured at 10k: 1.0–1.5 alike, 1.75 less)
REFINE_STEPS = 3
REFINE_STEP = 1.5  # measured at 10k: 1.0 converges slower, 2.5 oscillates


class IndexRows(Protocol):
    """What a stage reads of the index that holds it (`dsonet.library.index.code_index.CodeIndex`, which
    imports this module: the stages sit below it)."""

    dim: int
    group_size: int
    rotation: Rotation | None
    n: int
    scales: np.ndarray  # (capacity, G)
    base_rows: np.ndarray  # (capacity,)
    kappa: np.ndarray  # (capacity,)

    @property
    def baselines(self) -> np.ndarray: ...

    def deltas(self, rows: np.ndarray) -> np.ndarray: ...

    def reconstruct(self, rows: np.ndarray) -> np.ndarray: ...

    def rotate(self, v: np.ndarray) -> np.ndarray: ...


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

    def __init__(self, index: IndexRows, support: np.ndarray):
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

    def add_baseline(self, index: IndexRows, base: np.ndarray) -> None:
        coords = matvec(self.basis, index.rotate(np.asarray(base, np.float32)))
        self.base_coords = np.vstack([self.base_coords, coords[None, :]])

    def score(self, index: IndexRows, q: np.ndarray, rotated_q: np.ndarray, rows: np.ndarray) -> np.ndarray:
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


class Subspace:
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

    def still_fits(self, index: IndexRows, n: int) -> bool:
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

    def kept_for(self, n: int) -> "Subspace":
        """This fit, standing for the first ``n`` rows (`still_fits` said they did not drift)."""
        kept = Subspace.__new__(Subspace)
        kept.codes, kept.step, kept.held, kept.fitted_at = self.codes, self.step, self.held, n
        return kept

    def state(self) -> dict[str, np.ndarray]:
        return {"codes": self.codes, "step": self.step, "fitted_at": np.int64(self.fitted_at), "held": np.float64(self.held)}

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> "Subspace":
        subspace = cls.__new__(cls)  # the int8 directions as saved: quantising them again would round twice
        subspace.codes, subspace.step = state["codes"].astype(np.int8), state["step"].astype(np.float32)
        subspace.fitted_at, subspace.held = int(state["fitted_at"]), float(state["held"])
        return subspace

    @classmethod
    def fit(cls, index: IndexRows, n: int) -> "Subspace":
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

    def score(self, index: IndexRows, rotated_q: np.ndarray, rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
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


class Sketch:
    """The coarse stage: P(ê − μ) for every row, P the top principal directions of reconstructions,
    stored as int8 with one scale per direction.

    Computed from the codes without leaving their frame: P ê = P ē_b + (P Rᵀ) Δ̂, and a query's
    P q = (P Rᵀ)(R q), so only P Rᵀ is kept and a row costs one dequantize and one (d × K) product.
    """

    def __init__(self, index: IndexRows, rotated: np.ndarray, mean: np.ndarray, step: np.ndarray, fitted_at: int,
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

    def _project(self, index: IndexRows, v: np.ndarray) -> np.ndarray:
        """P v for a vector of the profile's space."""
        return matvec(self.rotated, index.rotate(np.asarray(v, np.float32)))

    def state(self) -> dict[str, np.ndarray]:
        """The fitted directions, not the rows' sketches: those are one product a row, redone on restore."""
        return {"rotated": self.rotated, "mean": self.mean, "step": self.step, "fitted_at": np.int64(self.fitted_at)}

    @classmethod
    def from_state(cls, index: IndexRows, state: dict[str, np.ndarray]) -> "Sketch":
        """A fitted sketch with no rows sketched yet: `CodeIndex.install` catches it up."""
        return cls(index, np.ascontiguousarray(state["rotated"], np.float32), state["mean"].astype(np.float32),
                   state["step"].astype(np.float32), int(state["fitted_at"]), 0)

    @classmethod
    def fit(cls, index: IndexRows, n: int, baselines: int) -> "Sketch":
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

    def catch_up(self, index: IndexRows) -> None:
        """Project the baselines and sketch the rows the index gained since this sketch was fitted."""
        for base in index.baselines[len(self.base_proj) :]:
            self.add_baseline(index, base)
        self.add(index, np.arange(self.n, index.n))

    def add_baseline(self, index: IndexRows, base: np.ndarray) -> None:
        proj = self._project(index, base) - self.mean_proj
        self.base_proj = np.vstack([self.base_proj, proj[None, :]])

    def add(self, index: IndexRows, rows: np.ndarray) -> None:
        if self.n + len(rows) > len(self.codes):
            grown = np.zeros((max(self.n + len(rows), int(len(self.codes) * GROW)), self.codes.shape[1]), np.int8)
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
