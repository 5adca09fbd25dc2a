"""Held-out metrics, one per paper result (seeds/002), and the simulated Byzantine nodes.

- stage 1: mean cosine between the head's output and the zero-padded base embedding (paper 96.3%);
- stage 2: recall@10, held-out GSM8K question -> its own solution among all held-out solutions;
- stage 3: BitDelta fidelity and size at the default profile (g = d), the true entropy of
  adjacent-coordinate differences, the coordinate-wise median's displacement under a 30%
  attack, and the mean pairwise distance (paper 1.62 -> 1.87).

The paper's "avg pairwise distance" of 1.87 cannot be a Euclidean distance between unit
vectors (that would need a mean cosine of −0.75); it fits the *squared* distance of its own
L_diversity (2 − 2·mean cosine). We report both.

Every stage also reports what its head does to the default profile's codes (`code_metrics`):
recall@10 of the codes' estimates against exact float search, cos(e, ê) and cos(Δ, Δ̂), so the
effect of each stage on compressibility is visible.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from dsonet.codec import bytes_per_vector, compress, decompress
from dsonet.codec.profile import DEFAULT_ROTATION_SEED
from dsonet.encoders.zen import ZenHead
from dsonet.train.codes import code_similarities, delta_cosine, reconstruction_cosine
from dsonet.train.config import TrainConfig
from dsonet.train.losses import delta_entropy
from dsonet.train.rotation import TorchRotation


def n_attackers(copies: int, share: float) -> int:
    """m such that m / (copies + m) is closest to ``share`` (7 honest copies, 30% -> 3)."""
    return max(1, round(copies * share / (1 - share)))


def honest_inputs(h: torch.Tensor, config: TrainConfig, gen: torch.Generator) -> torch.Tensor:
    """Each honest node j embeds a slightly different version of the experience: h + σ ε_j.
    h (N, d_in) -> (N·n, d_in), node copies of row i contiguous."""
    noise = torch.randn(h.shape[0], config.s3_copies, h.shape[1], generator=gen).to(h.device) * config.s3_noise  # (N, n, d_in)
    return (h[:, None, :] + noise).reshape(-1, h.shape[1])


def attackers(clean: torch.Tensor, config: TrainConfig, gen: torch.Generator) -> torch.Tensor:
    """Byzantine vectors for each experience: random unit vectors (half) and the honest mean's
    opposite plus noise (half). clean (N, n, d) -> (N, m, d), m / (n + m) ≈ the attack share."""
    n_rows, d = clean.shape[0], clean.shape[-1]
    m = n_attackers(config.s3_copies, config.s3_adversarial)
    random_vectors = F.normalize(torch.randn(n_rows, m - m // 2, d, generator=gen), dim=-1).to(clean.device)
    jitter = torch.randn(n_rows, m // 2, d, generator=gen).to(clean.device)
    flipped = -clean.detach().mean(1, keepdim=True) + 0.1 * jitter / d**0.5
    return torch.cat([random_vectors, F.normalize(flipped, dim=-1)], dim=1)


def cosine_to_padded(head: ZenHead, base: np.ndarray) -> float:
    e = head.project(base)  # (N, d_out), unit rows
    padded = np.pad(base, ((0, 0), (0, e.shape[1] - base.shape[1])))
    padded /= np.linalg.norm(padded, axis=1, keepdims=True)
    return float((e * padded).sum(1).mean())


def recall_at(queries: np.ndarray, docs: np.ndarray, k: int) -> float:
    """Share of queries i whose document i is among the k most similar documents."""
    scores = queries @ docs.T  # (Q, D)
    own = scores[np.arange(len(queries)), np.arange(len(queries))]
    rank = (scores > own[:, None]).sum(1)  # documents scored strictly above the relevant one
    return float((rank < k).mean())


@torch.no_grad()
def dso_metrics(head: ZenHead, base: np.ndarray, config: TrainConfig) -> dict[str, float]:
    e = head.project(base)  # (N, d)
    d = e.shape[1]
    e_hat = decompress(compress(e, group_size=d))
    cos = (e * e_hat).sum(1) / np.linalg.norm(e_hat, axis=1)
    rel = np.linalg.norm(e - e_hat, axis=1) / np.linalg.norm(e, axis=1)
    head.eval()
    gen = torch.Generator().manual_seed(config.seed + 3)
    device = next(head.parameters()).device
    clean = head(honest_inputs(torch.from_numpy(base).to(device), config, gen)).reshape(len(base), config.s3_copies, d)
    attack = attackers(clean, config, gen)
    shift = (clean.median(1).values - torch.cat([clean, attack], 1).median(1).values).norm(dim=-1)
    gram = e @ e.T
    off = ~np.eye(len(e), dtype=bool)
    sq = np.clip(2 - 2 * gram[off], 0, None)
    return {
        "bitdelta_cosine": float(cos.mean()),
        "bitdelta_rel_l2": float(rel.mean()),
        "bitdelta_bytes": bytes_per_vector(d, d),
        "bitdelta_ratio": 4 * d / bytes_per_vector(d, d),
        "delta_entropy_bits": float(delta_entropy(torch.from_numpy(e)).mean()),
        "median_shift_under_attack": float(shift.mean()),
        "pairwise_sq_distance": float(sq.mean()),
        "pairwise_distance": float(np.sqrt(sq).mean()),
    }


@torch.no_grad()
def code_metrics(head: ZenHead, queries: np.ndarray, docs: np.ndarray, k: int = 10) -> dict[str, float]:
    """The default profile's codes of ``docs`` (rotated BitDelta, g = d, against the docs' mean as
    a fixed baseline) searched by ``queries``, base embeddings (Q, d_in) and (N, d_in):
    code_recall_at_10 = |top-k by the codes' estimate ∩ exact float top-k| / k, averaged over queries;
    code_cosine = cos(e, ê) and code_delta_cosine = cos(e − ē, ê − ē), averaged over docs."""
    device = next(head.parameters()).device
    rotation = TorchRotation(head.d_out, DEFAULT_ROTATION_SEED).to(device)
    e = torch.from_numpy(head.project(docs)).to(device)  # (N, d)
    q = torch.from_numpy(head.project(queries)).to(device)  # (Q, d)
    baseline = e.mean(0)
    cos, cos_delta = [], []
    exact = (q @ e.T).topk(k, dim=1).indices  # (Q, k)
    estimate = torch.cat([code_similarities(q, e[i : i + 2048], baseline, rotation) for i in range(0, len(e), 2048)], 1)
    found = estimate.topk(k, dim=1).indices  # (Q, k)
    hits = (found[:, :, None] == exact[:, None, :]).any(-1).float().sum(1).mean() / k
    for i in range(0, len(e), 2048):
        cos.append(reconstruction_cosine(e[i : i + 2048], baseline, rotation))
        cos_delta.append(delta_cosine(e[i : i + 2048], baseline, rotation))
    return {"code_recall_at_10": float(hits), "code_cosine": float(torch.cat(cos).mean()),
            "code_delta_cosine": float(torch.cat(cos_delta).mean())}
