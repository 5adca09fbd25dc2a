"""The three stages' losses, written like the paper's equations (seeds/002). Shapes in comments.

L_code is ours, stage 3's fourth term: the paper's L_compress rewards low entropy of adjacent
differences, which the code a node sends (rotated BitDelta) does not care about; L_code asks
instead that the codes rank a query's neighbours as the float vectors do (see `code_loss`).

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


def code_loss(s: torch.Tensor, s_code: torch.Tensor, tau: float) -> torch.Tensor:
    """L_code = 1/Q Σ_i KL(softmax(s_i / τ) ‖ softmax(ŝ_i / τ)), ŝ = s + sg(s_code − s).

    s (Q, P): float similarities q_i·e_j; s_code (Q, P): what the codes of e_j estimate for them
    (`dsonet.train.codes.code_similarities`, no gradient: sign() has none). Straight-through: the
    forward pass ranks by the codes' own estimates, the gradient flows as if they were the floats.
    So where a code misranks a neighbour, the float space moves that pair apart or together until
    the code's error no longer swaps them: margins grow where 1-bit codes need them. The target
    softmax(s/τ) is the float ranking itself (no gradient), so the loss never asks the floats to
    follow the codes.
    """
    s_hat = s + (s_code - s).detach()  # (Q, P) forward: the codes' estimate; backward: ∂s
    target = F.softmax(s.detach() / tau, dim=1)  # (Q, P)
    return F.kl_div(F.log_softmax(s_hat / tau, dim=1), target, reduction="batchmean")


def block_loss(delta: torch.Tensor, signs: torch.Tensor, blocks: int) -> torch.Tensor:
    """L_blocks = 1/N Σ_i ||m · G_i / tr G_i − I||²_F / m, G_i = B_i B_iᵀ the Gram of the m blocks of D Δ_i.

    delta (N, d), signs (d,) the rotation's D, m = blocks (the odd factor of d: 15 for 7680).
    The default profile's rotation (Q_m ⊗ H)·D mixes its m blocks of d/m coordinates only through
    the m×m matrix Q_m: a delta whose energy sits in one block (a zero-padded embedding's does)
    comes out as m scaled copies of the same d/m signs, and its 7680-bit code carries 512 bits.
    When the blocks of DΔ are orthogonal and equally loud (G ∝ I), the m rows that Q_m mixes are
    too, and the signs are as independent as a random vector's. Orthogonal maps of the output
    leave every similarity unchanged, so the head can meet this at no cost to meaning.
    """
    b = (delta * signs).reshape(delta.shape[0], blocks, -1)  # (N, m, d/m)
    gram = b @ b.transpose(1, 2)  # (N, m, m)
    gram = blocks * gram / gram.diagonal(dim1=1, dim2=2).sum(1).clamp_min(1e-12)[:, None, None]
    eye = torch.eye(blocks, dtype=delta.dtype, device=delta.device)
    return ((gram - eye) ** 2).sum((1, 2)).mean() / blocks


def keep_loss(s: torch.Tensor, s_ref: torch.Tensor) -> torch.Tensor:
    """L_keep = 1/(QP) Σ (q_i·e_j − q'_i·e'_j)²: s, s_ref (Q, P), the head's similarities and the
    stage-2 head's (no gradient). Stage 3 may reshape how the space sits in coordinates, not what
    is near what."""
    return ((s - s_ref.detach()) ** 2).mean()


def dso_loss(e: torch.Tensor, clean: torch.Tensor, attack: torch.Tensor, lambdas: tuple[float, float, float],
             l_code: torch.Tensor, lambda_code: float) -> tuple[torch.Tensor, dict[str, float]]:
    """L_DSO = λ1 L_compress + λ2 L_robust + λ3 L_diversity (paper) + λ4 L_code (ours); each term's value too."""
    l_compress = soft_delta_entropy(e).mean()
    l_robust = robust_loss(clean, attack)
    l_diversity = diversity_loss(e)
    total = lambdas[0] * l_compress + lambdas[1] * l_robust + lambdas[2] * l_diversity + lambda_code * l_code
    return total, {"compress": l_compress.item(), "robust": l_robust.item(), "diversity": l_diversity.item(),
                   "code": l_code.item()}
