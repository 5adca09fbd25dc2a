"""The three stages' losses, written like the paper's equations (seeds/002). Shapes in comments.

L_compress: the paper's H(Δe) is the empirical entropy of adjacent-coordinate differences, a
histogram count with no gradient. Our surrogate is the same entropy over a *linearly
interpolated* histogram: each difference adds (1 − f) to its bin and f to the next, f its
fractional position, so bin masses — and the entropy — are piecewise-linear in e and have a
gradient. The hard-binned entropy (`delta_entropy`) uses the same bins and is what we report.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

ENTROPY_BINS = 64  # histogram bins over [−R, R]
ENTROPY_RANGE = 8.0  # R in units of 1/√d, the per-coordinate scale of a unit vector in R^d


def expansion_loss(e: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """L_expansion = 1/N Σ ||e_i − Pad(h_i)||²: e (N, d_out), h (N, d_in)."""
    padded = F.pad(h, (0, e.shape[1] - h.shape[1]))  # (N, d_out) zero-padded base embedding
    return ((e - padded) ** 2).sum(-1).mean()


def contrastive_loss(q: torch.Tensor, p_pos: torch.Tensor, p_neg: torch.Tensor, tau: float) -> torch.Tensor:
    """L = −log exp(q·p⁺/τ) / (exp(q·p⁺/τ) + Σ_j exp(q·p⁻_j/τ)): q, p_pos (B, d), p_neg (B, K, d)."""
    pos = (q * p_pos).sum(-1, keepdim=True)  # (B, 1)
    neg = torch.einsum("bd,bkd->bk", q, p_neg)  # (B, K)
    logits = torch.cat([pos, neg], dim=1) / tau  # (B, 1 + K); the positive is class 0
    return F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.long, device=q.device))


def _histogram_coordinates(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Bin index (floor) and fractional position of each value of x (..., n) on the fixed grid."""
    d = x.shape[-1] + 1
    radius = ENTROPY_RANGE / d**0.5
    pos = ((x + radius) / (2 * radius) * (ENTROPY_BINS - 1)).clamp(0, ENTROPY_BINS - 1.001)  # keeps floor + 1 a valid bin in float32
    lower = pos.detach().floor()
    return lower.long(), pos - lower


def soft_delta_entropy(e: torch.Tensor) -> torch.Tensor:
    """Differentiable H(Δe_i) per row, in bits: e (N, d) -> (N,)."""
    delta = e[:, 1:] - e[:, :-1]  # (N, d − 1)   Δe[j] = e[j] − e[j−1]
    lower, frac = _histogram_coordinates(delta)
    mass = torch.zeros(e.shape[0], ENTROPY_BINS, dtype=e.dtype, device=e.device)  # (N, bins)
    mass = mass.scatter_add(1, lower, 1 - frac).scatter_add(1, lower + 1, frac)
    p = mass / delta.shape[1]
    return -(p * torch.log2(p.clamp_min(1e-12))).sum(-1)


@torch.no_grad()
def delta_entropy(e: torch.Tensor) -> torch.Tensor:
    """The paper's H(Δe_i) with hard bins (same grid), in bits: (N, d) -> (N,)."""
    delta = e[:, 1:] - e[:, :-1]
    lower, frac = _histogram_coordinates(delta)
    nearest = (lower + (frac >= 0.5).long()).clamp_max(ENTROPY_BINS - 1)
    counts = torch.zeros(e.shape[0], ENTROPY_BINS, device=e.device).scatter_add(1, nearest, torch.ones_like(delta))
    p = counts / delta.shape[1]
    return -(p * torch.log2(p.clamp_min(1e-12))).sum(-1)


def robust_loss(clean: torch.Tensor, attack: torch.Tensor) -> torch.Tensor:
    """L_robust = 1/N Σ ||Median({e^(j)}) − Median({e^(j)} ∪ {a^(k)})||²: clean (N, n, d), attack (N, m, d)."""
    med_clean = clean.median(dim=1).values  # (N, d) coordinate-wise median of the honest copies
    med_all = torch.cat([clean, attack], dim=1).median(dim=1).values  # (N, d)
    return ((med_clean - med_all) ** 2).sum(-1).mean()


def diversity_loss(e: torch.Tensor) -> torch.Tensor:
    """L_diversity = −1/(N(N−1)) Σ_{i≠j} ||e_i − e_j||²: e (N, d)."""
    n = e.shape[0]
    sq = torch.cdist(e, e) ** 2  # (N, N), zero diagonal
    return -sq.sum() / (n * (n - 1))


def dso_loss(e: torch.Tensor, clean: torch.Tensor, attack: torch.Tensor,
             lambdas: tuple[float, float, float]) -> tuple[torch.Tensor, dict[str, float]]:
    """L_DSO = λ1 L_compress + λ2 L_robust + λ3 L_diversity; also returns each term's value."""
    l_compress = soft_delta_entropy(e).mean()
    l_robust = robust_loss(clean, attack)
    l_diversity = diversity_loss(e)
    total = lambdas[0] * l_compress + lambdas[1] * l_robust + lambdas[2] * l_diversity
    return total, {"compress": l_compress.item(), "robust": l_robust.item(), "diversity": l_diversity.item()}
