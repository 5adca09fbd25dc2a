"""`dso train` (the Zen head's three stages) and `dso align` (an adapter into a profile's space)."""

from __future__ import annotations

import dataclasses
import json
import sys

import click

from dsonet.errors import DsoError
from dsonet.train.config import TrainConfig, cpu_recipe

_SCALARS = [f for f in dataclasses.fields(TrainConfig) if isinstance(f.default, (int, float, str)) and f.name != "backbone"]


def _config_options(fn):
    """One --option per scalar TrainConfig field, default None (= the recipe's value)."""
    for f in reversed(_SCALARS):
        fn = click.option(f"--{f.name.replace('_', '-')}", f.name, type=type(f.default), default=None,
                          help=f"Override {f.name} (paper/default: {f.default}).")(fn)
    return fn


@click.command("train")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="zen-head", show_default=True,
              help="Directory for checkpoints and the trained ZenReranker (config.json + model.safetensors).")
@click.option("--backbone", default="minilm", show_default=True,
              help="Frozen backbone: minilm, st:NAME, hf:NAME (add ?pooling=last for Qwen3-Embedding), wordllama.")
@click.option("--paper", is_flag=True, help="Start from the paper's full hyper-parameters (GPU scale) instead of the CPU recipe.")
@click.option("--max-steps", type=int, default=None, help="Stop after this many optimisation steps; run again to resume.")
@click.option("--default", "default_head", is_flag=True,
              help="Rebuild the head the package ships (the CPU recipe) into --out; report its neighbours' agreement with the shipped one.")
@_config_options
def train_command(out_dir: str, backbone: str, paper: bool, max_steps: int | None, default_head: bool, **overrides) -> None:
    """Train the Zen-Reranker projection head: stage 1 projection expansion, stage 2 contrastive
    fine-tuning with hard negatives, stage 3 DSO optimisation (seeds/002). The backbone is frozen;
    its embeddings of packaged GSM8K text are computed once. Each stage prints its held-out metric
    before and after. Runs in one process or under torchrun (gloo on CPU), and resumes from
    the checkpoint in --out.

    \b
    Examples:
      dso train --out zen-head                         # CPU recipe, a few minutes on 2 cores
      dso train --out zen-head --s1-steps 50 --s2-steps 20 --s3-steps 10
      torchrun --standalone --nproc_per_node=2 -m dsonet.train --out zen-head
      dso train --paper --backbone "hf:Qwen/Qwen3-Embedding-8B?pooling=last" --out zen-8b   # on a GPU
      dso train --default --out zen-default            # rebuild the shipped head; prints its top-10 agreement
    """
    from dsonet.train import train
    from dsonet.train.run import init_distributed

    if default_head:
        from dsonet.train.default import reproduce

        click.echo(json.dumps(reproduce(out_dir), indent=1))
        return
    config = (TrainConfig() if paper else cpu_recipe()).with_overrides(backbone=backbone, **overrides)
    init_distributed()
    try:
        result = train(config, out_dir, max_steps=max_steps)
    except DsoError as exc:
        raise click.ClickException(str(exc)) from exc
    import torch.distributed as dist

    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    if rank0 and result.finished:
        click.echo(json.dumps(result.metrics, indent=1), file=sys.stderr)
        click.echo(f"trained head written to {out_dir}; load it with ZenReranker.from_pretrained({out_dir!r})")


@click.command("align")
@click.option("--model", "model_spec", required=True, help="The native model: wordllama, st:NAME, hf:NAME[?pooling=last].")
@click.option("--profile", "profile_spec", default="default", show_default=True,
              help="The profile's encoder, whose space to map into: default (MiniLM + Zen head, 7680 dims) or minilm.")
@click.option("--method", "methods", multiple=True, type=click.Choice(["ridge", "procrustes", "mlp"]),
              help="Methods to try (repeatable; default all three); the best held-out score wins.")
def align_command(model_spec: str, profile_spec: str, methods: tuple[str, ...]) -> None:
    """Learn an adapter from a model's native space into a profile's canonical space, from
    anchor texts (GSM8K training items) encoded by both, and save it under the two encoder ids,
    so that `AlignedEncoder.for_profile(model, profile_id)` finds it. Prints every method's
    held-out score (top-1 anchor match, mean cosine).

    \b
    Examples:
      dso align --model wordllama --profile default
      dso align --model "hf:Qwen/Qwen3-Embedding-0.6B?pooling=last" --profile default --method ridge
    """
    from dsonet.bench.report import format_table
    from dsonet.encoders.align import METHODS, adapter_dir, learn_adapter
    from dsonet.encoders.registry import load_encoder

    try:
        model, profile = load_encoder(model_spec), load_encoder(profile_spec)
        adapter = learn_adapter(model, profile, methods=methods or METHODS)
    except DsoError as exc:
        raise click.ClickException(str(exc)) from exc
    path = adapter.save(adapter_dir(model.id, profile.id))
    rows = [{"method": name, **score} for name, score in adapter.scores.items()]
    click.echo(format_table(rows, ["method", "top1", "cosine", "chosen"]))
    click.echo(f"{model.id} -> {profile.id}: {adapter.method} adapter saved to {path}")
