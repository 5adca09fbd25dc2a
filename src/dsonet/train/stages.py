"""The three stages (seeds/002), each one function: sample a batch, compute the paper's loss.

Each stage hands `Trainer.fit` a function step -> loss; the trainer owns the optimiser, the
schedule, distribution and checkpoints. Batches come from a generator seeded by
(seed, stage, step), so every rank draws the same global batch and takes its own slice, and a
resumed run draws exactly the batches the interrupted one would have.
"""

from __future__ import annotations

import numpy as np
import torch

from dsonet.codec.profile import DEFAULT_ROTATION_SEED
from dsonet.encoders.zen import ZenHead
from dsonet.train.codes import code_similarities
from dsonet.train.data import GaussianFit
from dsonet.train.losses import block_loss, code_loss, contrastive_loss, dso_loss, expansion_loss, keep_loss
from dsonet.train.metrics import attackers, code_metrics, cosine_to_padded, dso_metrics, honest_inputs, recall_at
from dsonet.train.rotation import TorchRotation


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
                metric=lambda: {"cosine_to_padded": cosine_to_padded(trainer.head, trainer.data.corpus_held),
                                **stage_code_metrics(trainer)})


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
                                                                       "recall_at_10": held_out_recall(trainer, 10),
                                                                       **stage_code_metrics(trainer)})


def held_out_recall(trainer, k: int) -> float:
    return recall_at(trainer.head.project(trainer.data.q_held), trainer.head.project(trainer.data.d_held), k)


def spread_outputs(head: ZenHead, seed: int) -> None:
    """Permute the head's output coordinates by a seeded permutation, in place: W2's rows, b2 and
    the last LayerNorm's γ and β. LayerNorm and the L2 norm are permutation-equivariant, so the
    head then computes P·e and every similarity is exactly what it was. Stage 1's target Pad(h)
    puts the meaning in the first d_in coordinates, one block of the codec's rotation
    (see `block_loss`); the permutation spreads them over all blocks."""
    perm = torch.from_numpy(np.random.default_rng([seed, 3]).permutation(head.d_out))
    with torch.no_grad():
        for p in (head.w2.weight, head.w2.bias, head.ln2.weight, head.ln2.bias):
            p.copy_(p[perm])


def stage3_dso(trainer) -> None:
    """DSO optimisation: L = λ1 L_compress + λ2 L_robust + λ3 L_diversity (paper)
    + λ4 L_code + λ5 L_blocks + λ6 L_keep (ours: the default profile's codes keep the floats' neighbours).

    The paper's terms reward things the code a node sends does not depend on (low entropy of
    adjacent differences) or that its defences measure elsewhere; ours ask for what a peer needs
    from 964 bytes: that the codes' estimates rank a query's neighbours as the floats do. The stage
    starts by spreading the outputs over the rotation's blocks (`spread_outputs`, exact); then
    L_code (straight-through, on the codes' real estimates) and L_blocks shape the space while
    L_keep holds every similarity near the stage-2 head's, so meaning stays. The code loss ranks
    `s3_code_queries` rows against a pool of `s3_code_pool`: training texts and sentences, and draws
    from a Gaussian fit of them (libraries past the corpus hold texts we never saw).
    """
    cfg, data = trainer.config, trainer.data
    h_all = trainer.tensor(data.corpus_train)  # (N, d_in)
    real = np.concatenate([data.corpus_train, data.s_train])  # (N + Ns, d_in)
    fit = GaussianFit.of(real)
    rotation = TorchRotation(cfg.d_out, DEFAULT_ROTATION_SEED).to(trainer.device)
    if trainer.starts(3):
        spread_outputs(trainer.head, cfg.seed)
        trainer.reference = {k: v.detach().clone() for k, v in trainer.head.state_dict().items()}
    if trainer.reference is None:  # the step budget ran out before stage 3: nothing to do in this run
        return
    reference = ZenHead(data.d_in, cfg.d_out).to(trainer.device).eval()
    reference.load_state_dict(trainer.reference)
    for p in reference.parameters():
        p.requires_grad_(False)
    lambda_code, lambda_blocks, lambda_keep = cfg.s3_code_lambdas

    def code_pool(step: int) -> torch.Tensor:
        """(Q + P, d_in): the step's queries, then its pool (the same on every rank)."""
        rng = np.random.default_rng([cfg.seed, 3, step, 1])
        n_real = round(cfg.s3_code_pool * (1 - cfg.s3_code_synthetic))
        pool = np.concatenate([real[rng.choice(len(real), n_real, replace=False)], fit.draw(rng, cfg.s3_code_pool - n_real)])
        queries = pool[rng.choice(len(pool), cfg.s3_code_queries, replace=False)]
        return trainer.tensor(np.concatenate([queries, pool]))

    def loss_at(step: int) -> torch.Tensor:
        h = h_all[batch_rows(trainer, 3, step, len(h_all), cfg.s3_batch)]  # (B, d_in)
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step * 2 + trainer.rank)
        b, nq = len(h), cfg.s3_code_queries
        pool_in = code_pool(step)  # (Q + P, d_in)
        out = trainer.model(torch.cat([h, honest_inputs(h, cfg, gen), pool_in]))  # (B + B·n + Q + P, d), one forward
        e, clean = out[:b], out[b : b + b * cfg.s3_copies].reshape(b, cfg.s3_copies, -1)  # (B, d), (B, n, d)
        q, pool = out[b + b * cfg.s3_copies :][:nq], out[b + b * cfg.s3_copies + nq :]  # (Q, d), (P, d)
        attack = attackers(clean, cfg, gen)  # (B, m, d)
        baseline = pool.detach().mean(0)  # (d,) the pool's mean stands in for the profile's fixed baseline
        s = q @ pool.T  # (Q, P) float similarities
        with torch.no_grad():
            ref = reference(pool_in)
            s_ref = ref[:nq] @ ref[nq:].T  # (Q, P) the stage-2 head's
        l_code = code_loss(s, code_similarities(q.detach(), pool.detach(), baseline, rotation), cfg.s3_code_tau)
        l_blocks = block_loss(pool - baseline, rotation.signs, rotation.m)
        l_keep = keep_loss(s, s_ref)
        loss, parts = dso_loss(e, clean, attack, cfg.s3_lambdas, l_code, lambda_code)
        trainer.last_parts = {**parts, "blocks": l_blocks.item(), "keep": l_keep.item()}
        return loss + lambda_blocks * l_blocks + lambda_keep * l_keep

    def metric() -> dict[str, float]:
        return {**dso_metrics(trainer.head, trainer.data.corpus_held, cfg), "recall_at_1": held_out_recall(trainer, 1),
                "recall_at_10": held_out_recall(trainer, 10), **stage_code_metrics(trainer)}

    trainer.fit(3, cfg.s3_steps, cfg.s3_lr, 0, loss_at, metric=metric)


def stage_code_metrics(trainer) -> dict[str, float]:
    """The default profile's codes, for every stage (`metrics.code_metrics`): held-out questions
    searching every text the data holds."""
    data = trainer.data
    return code_metrics(trainer.head, data.q_held, np.concatenate([data.corpus_train, data.corpus_held, data.s_train]))


STAGES = (stage1_expansion, stage2_contrastive, stage3_dso)
