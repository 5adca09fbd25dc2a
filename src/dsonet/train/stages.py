"""The three stages (seeds/002), each one function: sample a batch, compute the paper's loss.

Each stage hands `Trainer.fit` a function step -> loss; the trainer owns the optimiser, the
schedule, distribution and checkpoints. Batches come from a generator seeded by
(seed, stage, step), so every rank draws the same global batch and takes its own slice, and a
resumed run draws exactly the batches the interrupted one would have.
"""

from __future__ import annotations

import numpy as np
import torch

from dsonet.train.losses import contrastive_loss, dso_loss, expansion_loss
from dsonet.train.metrics import attackers, cosine_to_padded, dso_metrics, honest_inputs, recall_at


def batch_rows(trainer, stage: int, step: int, n: int, batch: int) -> np.ndarray:
    """This rank's slice of the global batch of row indices for (stage, step)."""
    rng = np.random.default_rng([trainer.config.seed, stage, step])
    rows = rng.choice(n, size=batch, replace=batch > n)
    return rows[trainer.rank :: trainer.world]


def stage1_expansion(trainer) -> None:
    """Projection expansion: L = 1/N Σ ||e_i − Pad(h_i)||²."""
    cfg, h_all = trainer.config, trainer.tensor(trainer.data.corpus_train)  # (N, d_in)

    def loss_at(step: int) -> torch.Tensor:
        h = h_all[batch_rows(trainer, 1, step, len(h_all), cfg.s1_batch)]  # (B, d_in)
        e = trainer.model(h)  # (B, d_out)
        return expansion_loss(e, h)

    trainer.fit(1, cfg.s1_steps, cfg.s1_lr, cfg.s1_warmup, loss_at,
                metric=lambda: {"cosine_to_padded": cosine_to_padded(trainer.head, trainer.data.corpus_held)})


def mine_hard_negatives(trainer, k: int) -> np.ndarray:
    """(Nq, K) indices of the K training solutions the current head ranks highest for each
    question, its own solution excluded."""
    q = trainer.head.project(trainer.data.q_train)  # (Nq, d)
    d = trainer.head.project(trainer.data.d_train)  # (Nq, d)
    scores = q @ d.T  # (Nq, Nq)
    np.fill_diagonal(scores, -np.inf)
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def stage2_contrastive(trainer) -> None:
    """Contrastive fine-tuning: InfoNCE over the positive and K hard negatives, temperature τ."""
    cfg, data = trainer.config, trainer.data
    q_all, d_all = trainer.tensor(data.q_train), trainer.tensor(data.d_train)  # (Nq, d_in) each
    k = min(cfg.s2_negatives, len(d_all) - 1)

    def loss_at(step: int) -> torch.Tensor:
        if step % cfg.s2_mine_every == 0 or trainer.negatives is None:
            trainer.negatives = mine_hard_negatives(trainer, k)  # refreshed with the current model
        rows = batch_rows(trainer, 2, step, len(q_all), cfg.s2_batch)  # (B,)
        b = len(rows)
        neg_rows = trainer.negatives[rows].reshape(-1)  # (B·K,)
        # one forward per step: DistributedDataParallel syncs gradients once per forward
        out = trainer.model(torch.cat([q_all[rows], d_all[rows], d_all[neg_rows]]))  # (2B + B·K, d)
        q, p_pos, p_neg = out[:b], out[b : 2 * b], out[2 * b :].reshape(b, k, -1)  # (B, d), (B, d), (B, K, d)
        return contrastive_loss(q, p_pos, p_neg, cfg.s2_tau)

    trainer.fit(2, cfg.s2_steps, cfg.s2_lr, 0, loss_at, metric=lambda: {"recall_at_1": held_out_recall(trainer, 1),
                                                                       "recall_at_10": held_out_recall(trainer, 10)})


def held_out_recall(trainer, k: int) -> float:
    return recall_at(trainer.head.project(trainer.data.q_held), trainer.head.project(trainer.data.d_held), k)


def stage3_dso(trainer) -> None:
    """DSO optimisation: L = λ1 L_compress + λ2 L_robust + λ3 L_diversity."""
    cfg, h_all = trainer.config, trainer.tensor(trainer.data.corpus_train)  # (N, d_in)

    def loss_at(step: int) -> torch.Tensor:
        h = h_all[batch_rows(trainer, 3, step, len(h_all), cfg.s3_batch)]  # (B, d_in)
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step * 2 + trainer.rank)
        b = len(h)
        out = trainer.model(torch.cat([h, honest_inputs(h, cfg, gen)]))  # (B + B·n, d), one forward
        e, clean = out[:b], out[b:].reshape(b, cfg.s3_copies, -1)  # (B, d), (B, n, d)
        attack = attackers(clean, cfg, gen)  # (B, m, d)
        loss, parts = dso_loss(e, clean, attack, cfg.s3_lambdas)
        trainer.last_parts = parts
        return loss

    def metric() -> dict[str, float]:
        return {**dso_metrics(trainer.head, trainer.data.corpus_held, cfg), "recall_at_1": held_out_recall(trainer, 1),
                "recall_at_10": held_out_recall(trainer, 10)}

    trainer.fit(3, cfg.s3_steps, cfg.s3_lr, 0, loss_at, metric=metric)


STAGES = (stage1_expansion, stage2_contrastive, stage3_dso)
