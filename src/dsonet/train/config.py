"""One config for the three training stages of the Zen projection head (seeds/002).

Defaults are the paper's hyper-parameters where it gives them (marked "paper"), ours where
it does not (marked "ours"). On a CPU use `cpu_recipe()` or set smaller steps and batches on
the command line; the paper's batches assume 8 H100s.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True)
class TrainConfig:
    backbone: str = "minilm"  # ours: encoder spec of the frozen backbone (dsonet.encoders.registry)
    d_out: int = 7680  # paper: the canonical dimension (seeds/001)
    seed: int = 0  # ours: the head's init, every batch and every simulated attack derive from it
    held_out: float = 0.2  # ours: fraction of GSM8K items kept out of training for every metric
    limit_items: int = 0  # ours: use only the first N GSM8K items (0 = all 1,319); for tests
    # Stage 1: projection expansion, MSE to the zero-padded base embedding
    s1_steps: int = 50_000  # ours: the paper gives 18 h on 8 H100s, not a step count; stage 2's count
    s1_batch: int = 2048  # paper: 256 per GPU x 8
    s1_lr: float = 5e-4  # paper
    s1_warmup: int = 1000  # paper: linear warm-up steps
    # Stage 2: contrastive fine-tuning with hard negatives (InfoNCE)
    s2_steps: int = 50_000  # paper
    s2_batch: int = 1024  # paper: 128 per GPU x 8
    s2_lr: float = 1e-5  # paper: 10x lower than stage 1
    s2_negatives: int = 7  # paper: K hard negatives per query
    s2_tau: float = 0.05  # paper: temperature
    s2_mine_every: int = 100  # ours: re-mine hard negatives with the current head every N steps
    # Stage 3: DSO optimisation, λ1 L_compress + λ2 L_robust + λ3 L_diversity
    s3_steps: int = 50_000  # ours: not given by the paper
    s3_batch: int = 512  # paper: 64 per GPU x 8
    s3_lr: float = 5e-6  # paper
    s3_lambdas: tuple[float, float, float] = (0.3, 0.5, 0.2)  # paper: λ1, λ2, λ3
    s3_adversarial: float = 0.3  # paper: share of Byzantine vectors in the robustness simulation
    s3_copies: int = 7  # ours: honest nodes' copies of each experience (3 attackers join them: 30%)
    s3_noise: float = 0.05  # ours: std of the per-node perturbation of the base embedding
    # Stage 3, ours: the default profile's codes keep the floats' neighbours (see stages.stage3_dso)
    s3_code_lambdas: tuple[float, float, float] = (1.0, 1.0, 100.0)  # ours: λ4 L_code, λ5 L_blocks, λ6 L_keep
    s3_code_queries: int = 128  # ours: queries per step ranked against the pool by codes and floats
    s3_code_pool: int = 1024  # ours: rows per step: training texts and sentences, and synthetic draws
    s3_code_synthetic: float = 0.5  # ours: share of the pool drawn from a Gaussian fit of the real rows
    s3_code_tau: float = 0.05  # ours: temperature of L_code's rankings (the paper's contrastive τ)
    # Shared optimiser settings (paper: AdamW, stage 1's list, applied to all stages)
    weight_decay: float = 0.01  # paper
    grad_clip: float = 1.0  # paper
    betas: tuple[float, float] = (0.9, 0.999)  # paper
    eps: float = 1e-8  # paper
    checkpoint_every: int = 200  # ours: steps between checkpoints (and always at a stage's end)

    def recipe_hash(self) -> str:
        """A short stable name for what this config trains; becomes the head's tag and id."""
        data = {k: v for k, v in asdict(self).items() if k != "checkpoint_every"}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]

    def with_overrides(self, **overrides) -> "TrainConfig":
        """A copy with the non-None overrides applied (the command line's options)."""
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown training options {sorted(unknown)}; known: {sorted(known)}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


def cpu_recipe() -> TrainConfig:
    """The default profile's head: MiniLM backbone, a few minutes on 2 CPU cores.

    Steps and batches are cut ~100x; the learning rates of stages 2 and 3 are raised 10x and 20x
    so that a few hundred steps move the head at all (at the paper's rates they would not).
    """
    return TrainConfig(
        s1_steps=600, s1_batch=256, s1_warmup=60,
        s2_steps=120, s2_batch=64, s2_lr=1e-4, s2_mine_every=40,
        s3_steps=60, s3_batch=64, s3_lr=1e-4,
        checkpoint_every=100,
    )
