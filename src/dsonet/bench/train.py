"""`dso bench train`: a short run of the Zen head's three stages, each stage's held-out metric
before and after, beside the paper's result for that stage. Writes bench/results/train.json.

Paper (seeds/002), on 8 H100s over 54 hours: stage 1 cosine to the padded target 96.3%;
stage 2 MTEB retrieval 61.3 -> 62.7 (we measure recall@1/@10 on held-out GSM8K instead);
stage 3 BitDelta 29.9x -> 31.87x, accuracy under 30% attack 87.3% -> 92.1%, mean pairwise
distance 1.62 -> 1.87 (which only fits a *squared* distance: see dsonet.train.metrics).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict

import click

from dsonet.bench.report import format_table, write_results

PAPER = {
    "stage1": {"cosine_to_padded": 0.963},
    "stage2": {"mteb_retrieval": [61.3, 62.7]},
    "stage3": {"bitdelta_ratio": [29.9, 31.87], "accuracy_under_30pct_attack": [0.873, 0.921],
               "pairwise_sq_distance": [1.62, 1.87]},  # fits a squared distance only
}


@click.command()
@click.option("--quick", is_flag=True, help="About a tenth of the CPU recipe's steps (a minute or two once GSM8K is cached).")
@click.option("--seed", default=0, show_default=True, help="Seed of the run.")
def cli(quick: bool, seed: int) -> None:
    """Train the Zen head briefly (the CPU recipe, or --quick) on cached MiniLM embeddings and
    report each stage's held-out metric before and after, beside the paper's.

    \b
    Example:
      dso bench train --quick
    """
    from dsonet.encoders import minilm
    from dsonet.train import cpu_recipe, train

    config = cpu_recipe().with_overrides(seed=seed)
    if quick:
        config = config.with_overrides(s1_steps=150, s1_warmup=15, s2_steps=30, s2_mine_every=15, s3_steps=15)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = train(config, out, encoder=minilm())
    rows = []
    for stage in ("stage1", "stage2", "stage3"):
        m = result.metrics[stage]
        for name, before in m["before"].items():
            rows.append({"stage": stage, "metric": name, "before": before, "after": m["after"][name],
                         "paper": PAPER[stage].get(name)})
    click.echo(format_table(rows, ["stage", "metric", "before", "after", "paper"]))
    seconds = time.perf_counter() - start
    path = write_results("train", {
        "config": asdict(config), "recipe": config.recipe_hash(), "quick": quick,
        "metrics": result.metrics, "rows": rows, "paper": PAPER, "wall_seconds": seconds,
        "compress_surrogate": "entropy of a linearly interpolated histogram of adjacent differences (64 bins); "
                              "delta_entropy_bits is the hard-binned entropy on the same bins",
    }, quick=quick)
    click.echo(f"{seconds:.0f} s; wrote {path}")
