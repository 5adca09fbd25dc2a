"""The default profile's codes, seen from training: what a peer's 964 bytes let a node estimate.

A node scores a query q against a peer's code (rotated BitDelta, g = d: signs s = sign(R(e − ē))
and one scale α = ‖R(e − ē)‖₁ / d) without decompressing it (`dsonet.library.index.code_index`):

    ŝ(q, e) = q·ē + κ α ⟨Rq, s⟩,   κ = (1 − ‖ē‖²) / (d α² + 2 α ⟨Rē, s⟩)

κ rescales the 1-bit reconstruction so that ê has unit length, as e has. This module computes the
same estimate in torch (the tests check it against the index), so a loss can compare it with
the float similarity q·e that it approximates. The library is a layer above training and is
not imported here; the rotation comes from the codec, below both.
"""

from __future__ import annotations

import torch

from dsonet.train.rotation import TorchRotation


@torch.no_grad()
def code_similarities(q: torch.Tensor, e: torch.Tensor, baseline: torch.Tensor, rotation: TorchRotation) -> torch.Tensor:
    """ŝ(q_i, e_j) from e's code: q (Q, d), e (P, d), baseline (d,) -> (Q, P)."""
    d = e.shape[1]
    y = rotation(e - baseline)  # (P, d)   R(e − ē)
    alpha = y.abs().sum(1) / d  # (P,)     one scale per vector (g = d)
    s = torch.where(y >= 0, 1.0, -1.0)  # (P, d)  sign(0) = +1, as the codec packs it
    rb = rotation(baseline[None, :])[0]  # (d,)  Rē
    kappa = (1 - baseline @ baseline) / (d * alpha**2 + 2 * alpha * (s @ rb))  # (P,)
    return (q @ baseline)[:, None] + (rotation(q) @ s.T) * (kappa * alpha)[None, :]  # (Q, P)


def delta_cosine(e: torch.Tensor, baseline: torch.Tensor, rotation: TorchRotation) -> torch.Tensor:
    """cos(Δ, Δ̂) per row, exactly and differentiably: Δ̂ = α Rᵀ sign(RΔ) with α = ‖RΔ‖₁/d, so
    Δ·Δ̂ = ‖RΔ‖₁²/d and ‖Δ̂‖ = ‖RΔ‖₁/√d, and the cosine is ‖RΔ‖₁ / (√d ‖Δ‖). (P, d) -> (P,)."""
    y = rotation(e - baseline)  # (P, d)
    return y.abs().sum(1) / (e.shape[1] ** 0.5 * y.norm(dim=1).clamp_min(1e-12))


@torch.no_grad()
def reconstruction_cosine(e: torch.Tensor, baseline: torch.Tensor, rotation: TorchRotation) -> torch.Tensor:
    """cos(e, ê) per row, ê = ē + α Rᵀ sign(R(e − ē)) (unscaled by κ, as `dsonet.codec.decompress`). (P, d) -> (P,)."""
    d = e.shape[1]
    y = rotation(e - baseline)  # (P, d)
    alpha = y.abs().sum(1, keepdim=True) / d  # (P, 1)
    s = torch.where(y >= 0, 1.0, -1.0)
    # Rᵀ is orthogonal: e·ê = e·ē + α ⟨R e, s⟩ and ‖ê‖² = ‖ē‖² + 2α⟨Rē, s⟩ + d α²
    re, rb = rotation(e), rotation(baseline[None, :])[0]
    dot = e @ baseline + alpha[:, 0] * (re * s).sum(1)
    norm2 = baseline @ baseline + 2 * alpha[:, 0] * (s @ rb) + d * alpha[:, 0] ** 2
    return dot / (e.norm(dim=1) * norm2.sqrt())
