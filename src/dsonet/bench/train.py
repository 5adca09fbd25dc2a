"""`dso bench train`: a short run of the Zen head's three stages, each stage's held-out metric
before and after, beside the paper's result for that stage. Writes bench/results/train.json.

Paper (seeds/002), on 8 H100s over 54 hours: stage 1 cosine to the padded target 96.3%;
stage 2 MTEB retrieval 61.3 -> 62.7 (we measure recall@1/@10 on held-out GSM8K instead);
stage 3 BitDelta 29.9x -> 31.87x, accuracy under 30% attack 87.3% -> 92.1%, mean pairwise
distance 1.62 -> 1.87 (which only fits a *squared* distance: see dsonet.train.metrics).

Every stage also reports what it does to the default profile's codes (rotated BitDelta, g = d):
code_recall_at_10 (held-out questions searching every text the data holds, the codes'
estimate against exact float search), code_cosine = cos(e, ê) and code_delta_cosine = cos(Δ, Δ̂).
Then the float16 copy of the trained head (what the package ships) is compared with the float32
one: top-10 neighbours of held-out texts and the codes' recall.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import click
import numpy as np

from dsonet.bench.report import format_table, write_results
from dsonet.encoders import minilm
from dsonet.train import cpu_recipe
from dsonet.train.data import TrainData

PAPER = {
    "stage1": {"cosine_to_padded": 0.963},
    "stage2": {"mteb_retrieval": [61.3, 62.7]},
    "stage3": {"bitdelta_ratio": [29.9, 31.87], "accuracy_under_30pct_attack": [0.873, 0.921],
               "pairwise_sq_distance": [1.62, 1.87]},  # fits a squared distance only
}


def half_precision(run_dir: str) -> dict:
    """The trained head stored as float16 (as the package ships it) against its float32 self."""
    from dsonet.encoders.zen import ZenReranker
    from dsonet.train.default import held_out_texts, neighbour_agreement
    from dsonet.train.metrics import code_metrics
    from dsonet.train.run import DATA

    full = ZenReranker.from_pretrained(run_dir, backbone=minilm())
    with tempfile.TemporaryDirectory() as tmp:
        full.save_pretrained(tmp, half=True)
        half = ZenReranker.from_pretrained(tmp, backbone=minilm())
    data = TrainData.load(f"{run_dir}/{DATA}")
    docs = np.concatenate([data.corpus_train, data.corpus_held, data.s_train])
    return {"top10_overlap": neighbour_agreement(full, half, held_out_texts()),
            "code_recall_at_10_fp32": code_metrics(full.head, data.q_held, docs)["code_recall_at_10"],
            "code_recall_at_10_fp16": code_metrics(half.head, data.q_held, docs)["code_recall_at_10"]}


@click.command()
@click.option("--quick", is_flag=True, help="About a tenth of the CPU recipe's steps (a minute or two once GSM8K is cached).")
@click.option("--seed", default=0, show_default=True, help="Seed of the run.")
@click.option("--run", "run_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Report a finished run of the CPU recipe (its metrics.json and head) instead of training again.")
def cli(quick: bool, seed: int, run_dir: str | None) -> None:
    """Train the Zen head (the CPU recipe, or --quick) on cached MiniLM embeddings and report each
    stage's held-out metric before and after, beside the paper's, with what each stage does to
    the default profile's codes (recall@10 against exact search, cos(e, ê), cos(Δ, Δ̂)), and the
    float16 head against the float32 one.

    \b
    Examples:
      dso bench train --quick
      dso bench train --run zen-default/run     # the run `dso train --default --out zen-default` made
    """
    from dsonet.train.run import train  # torch

    config = cpu_recipe().with_overrides(seed=seed)
    if quick:
        config = config.with_overrides(s1_steps=150, s1_warmup=15, s2_steps=30, s2_mine_every=15, s3_steps=15)
    start = time.perf_counter()
    if run_dir:
        recorded = json.loads(Path(run_dir, "metrics.json").read_text())
        if recorded["recipe"] != config.recipe_hash():
            raise click.ClickException(f"{run_dir} was trained by recipe {recorded['recipe']}, not this one "
                                       f"({config.recipe_hash()}); run without --run to train")
        metrics, train_seconds = recorded, sum(recorded[f"stage{i}"]["seconds"] for i in (1, 2, 3))
        half = half_precision(run_dir)
    else:
        with tempfile.TemporaryDirectory() as out:
            metrics = train(config, out, encoder=minilm()).metrics
            train_seconds = time.perf_counter() - start
            half = half_precision(out)
    rows = []
    for stage in ("stage1", "stage2", "stage3"):
        m = metrics[stage]
        for name, before in m["before"].items():
            rows.append({"stage": stage, "metric": name, "before": before, "after": m["after"][name],
                         "paper": PAPER[stage].get(name)})
    click.echo(format_table(rows, ["stage", "metric", "before", "after", "paper"]))
    click.echo(f"float16 head vs float32: top-10 neighbours agree {half['top10_overlap']:.4f}; code recall@10 "
               f"{half['code_recall_at_10_fp16']:.4f} vs {half['code_recall_at_10_fp32']:.4f}")
    seconds = time.perf_counter() - start
    path = write_results("train", {
        "config": asdict(config), "recipe": config.recipe_hash(), "quick": quick, "train_seconds": train_seconds,
        "metrics": {k: metrics[k] for k in ("stage1", "stage2", "stage3")}, "rows": rows, "run": run_dir,
        "paper": PAPER, "wall_seconds": seconds, "float16": half, "load_average": os.getloadavg()[0],
        "compress_surrogate": "entropy of a linearly interpolated histogram of adjacent differences (64 bins); "
                              "delta_entropy_bits is the hard-binned entropy on the same bins",
    }, quick=quick)
    click.echo(f"{seconds:.0f} s; wrote {path}")
